/**
 * The relay's store-and-forward fate rules, against a stand-in upstream: 2xx deletes, other 4xx
 * go to failed/ with a reason, 408/429/5xx and outages are retried, unknown nodes are refused by
 * the nodes list, the upstream never sees more than `concurrency` requests at once, a full spool
 * answers 507 and leaves nothing behind, and failed/ is cleaned after its retention.
 */
import { mkdir, readdir, readFile, utimes, writeFile } from 'node:fs/promises';
import { pino } from 'pino';
import { join } from 'node:path';
import t from 'tap';
import { CountingUpstream, freePort, runName, sha256, until } from './helpers/upstream.js';
import { put, startTestRelay } from './helpers/relay.js';
import { programDir } from '../helpers/programs.js';
import { loadRelaydConfig } from '@capstan/relayd';

const NODE = 'e745a140-40bc-4b86-b6dc-084488fc906b';

t.test('a 2xx deletes the file; the upstream gets the same bytes', async (t) => {
  const up = await new CountingUpstream().start();
  t.teardown(() => up.stop());
  const r = await startTestRelay(t, { 'upstream.url': up.url });
  const body = Buffer.from('report body\n');
  const res = await put(r.url, 'reports', runName(NODE, 1), body);
  t.equal(res.status, 201);
  await until(() => (up.received.length === 1 ? true : undefined), 'the forward');
  t.equal(up.received[0]!.sha256, sha256(body));
  t.equal(up.received[0]!.path, `/reports/${runName(NODE, 1)}`);
  await until(async () => ((await readdir(join(r.spool, 'incoming', 'reports'))).length === 0 ? true : undefined), 'the spool to empty');
});

t.test('an upstream 4xx moves the file to failed/ with the reason; 429 and 5xx are retried', async (t) => {
  let tries429 = 0;
  let tries503 = 0;
  const up = await new CountingUpstream((_req, path) => {
    if (path.includes('T00:00:01')) return 400;
    if (path.includes('T00:00:02')) return ++tries429 <= 2 ? 429 : 201;
    if (path.includes('T00:00:03')) return ++tries503 <= 2 ? 503 : 201;
    if (path.includes('T00:00:04')) return 408;
    return 201;
  }).start();
  t.teardown(() => up.stop());
  const r = await startTestRelay(t, { 'upstream.url': up.url });
  for (const i of [1, 2, 3]) t.equal((await put(r.url, 'reports', runName(NODE, i), `body ${i}`)).status, 201);

  const failedDir = join(r.spool, 'failed', 'reports');
  const reason = await until(() => readFile(join(failedDir, `${runName(NODE, 1)}.reason`), 'utf8').catch(() => undefined), 'the refused file in failed/');
  t.match(reason, /ERR_UPSTREAM_REJECTED: upstream refused the file with 400 ERR_BAD_REQUEST/);
  t.equal(await readFile(join(failedDir, runName(NODE, 1)), 'utf8'), 'body 1', 'the bytes are kept');
  await until(() => (up.received.length === 2 ? true : undefined), 'both retried files');
  t.equal(tries429, 3, '429 retried until accepted');
  t.equal(tries503, 3, '503 retried until accepted');
  t.same((await readdir(failedDir)).sort(), [runName(NODE, 1), `${runName(NODE, 1)}.reason`], 'only the 400 failed');

  // 408 is "try again" too: it stays in incoming/ and is never moved to failed/.
  t.equal((await put(r.url, 'reports', runName(NODE, 4), 'body 4')).status, 201);
  await until(() => (r.handle.processors.reports.pending === 1 && up.inFlight === 0 ? true : undefined), 'the 408 file waiting');
  t.notOk((await readdir(failedDir)).includes(runName(NODE, 4)));
});

t.test('with a nodes list, files from unknown nodes go to failed/; known ones are forwarded', async (t) => {
  const up = await new CountingUpstream().start();
  t.teardown(() => up.stop());
  const dir = programDir(t, {
    'nodeslist.json': JSON.stringify({ root: { hostname: 'r', 'policy-server': 'root' }, [NODE]: { hostname: 'n1', 'policy-server': 'root' } }),
  });
  const r = await startTestRelay(t, { 'upstream.url': up.url, 'general.nodes_list_file': join(dir, 'nodeslist.json') }, { dir });
  t.equal((await put(r.url, 'reports', runName(NODE, 1), 'known')).status, 201);
  t.equal((await put(r.url, 'reports', runName('unknown-node', 1), 'unknown')).status, 201);
  t.equal((await put(r.url, 'inventories', `${NODE}_2026-01-01T00:00:00Z.json`, '{}')).status, 201);
  await until(() => (up.received.length === 2 ? true : undefined), 'known files forwarded');
  const reason = await until(
    () => readFile(join(r.spool, 'failed', 'reports', `${runName('unknown-node', 1)}.reason`), 'utf8').catch(() => undefined),
    'the unknown node in failed/',
  );
  t.match(reason, /ERR_NODE_UNKNOWN/);
  t.same(up.received.map((x) => x.sha256).sort(), [sha256('known'), sha256('{}')].sort());
});

t.test('an upstream outage pauses forwarding; everything goes when the probe sees it back', async (t) => {
  const port = await freePort();
  const up = new CountingUpstream();
  t.teardown(() => up.stop());
  const r = await startTestRelay(t, { 'upstream.url': `http://127.0.0.1:${port}`, 'upstream.concurrency': 4 });
  const sent = new Set<string>();
  const statuses = new Set<number>();
  for (let i = 0; i < 40; i++) {
    const body = `file ${i}`;
    statuses.add((await put(r.url, 'reports', runName(NODE, i), body)).status);
    sent.add(sha256(body));
  }
  t.same([...statuses], [201], 'all 40 accepted while the upstream is down');
  const down = await until(async () => {
    const s = (await (await fetch(`${r.url}/rudder/relay-api/1/system/status`)).json()) as { data: { upstream: { state: string; status: string } } };
    return s.data.upstream.state === 'down' ? s.data.upstream : undefined;
  }, 'the upstream marked down');
  t.equal(down.status, 'error', 'system/status shows the outage');
  t.ok(r.handle.processors.reports.isPaused, 'forwarding paused, no retry storm');

  await up.start(port);
  await until(() => (up.received.length === 40 ? true : undefined), 'all 40 files after the upstream came back', 10_000);
  t.same(new Set(up.received.map((x) => x.sha256)), sent, 'each file arrived');
  t.ok([...up.counts.values()].every((n) => n === 1), 'exactly once');
});

t.test('the upstream never sees more requests at once than upstream.concurrency', async (t) => {
  const gate: Array<() => void> = [];
  const up = await new CountingUpstream(() => new Promise<number>((res) => gate.push(() => res(201)))).start();
  t.teardown(() => up.stop());
  const r = await startTestRelay(t, { 'upstream.url': up.url, 'upstream.concurrency': 3 });
  for (let i = 0; i < 12; i++) await put(r.url, i % 2 ? 'reports' : 'inventories', i % 2 ? runName(NODE, i) : `${NODE}_2026-01-01T00:00:${String(i).padStart(2, '0')}Z.json`, `f${i}`);
  await until(() => (gate.length === 3 ? true : undefined), 'three requests held');
  // Give the relay every chance to open a fourth: it must not (the pool bounds it).
  await new Promise((res) => setTimeout(res, 200));
  t.equal(up.maxInFlight, 3);
  while (up.received.length < 12) {
    gate.splice(0).forEach((release) => release());
    await new Promise((res) => setTimeout(res, 10));
  }
  t.equal(up.maxInFlight, 3, 'still at most 3 after draining 12 files');
});

t.test('a full spool answers 507 with Retry-After, keeps nothing, and system/status says why', async (t) => {
  const r = await startTestRelay(t, { 'spool.max_size': '100' });
  t.equal((await put(r.url, 'reports', runName(NODE, 1), Buffer.alloc(60))).status, 201);
  const res = await put(r.url, 'reports', runName(NODE, 2), Buffer.alloc(60));
  t.equal(res.status, 507);
  t.equal(res.headers.get('retry-after'), '60');
  t.equal(((await res.json()) as { error: { code: string } }).error.code, 'ERR_SPOOL_FULL');
  t.same(await readdir(join(r.spool, 'incoming', 'reports')), [runName(NODE, 1)], 'no partial file in incoming/');
  t.same(await readdir(join(r.spool, 'tmp')), [], 'nor in tmp/');
  const status = (await (await fetch(`${r.url}/rudder/relay-api/1/system/status`)).json()) as { data: { spool: { status: string; details: string } } };
  t.equal(status.data.spool.status, 'error');
  t.match(status.data.spool.details, /did not fit in spool.max_size/);

  const disk = await startTestRelay(t, { 'spool.min_free_space': '1000000GiB' }, { dir: join(r.spool, '..', 'second') });
  const full = await put(disk.url, 'reports', runName(NODE, 3), 'x');
  t.equal(full.status, 507, 'the file system reserve refuses too');
  const s2 = (await (await fetch(`${disk.url}/rudder/relay-api/1/system/status`)).json()) as { data: { spool: { status: string; details: string } } };
  t.match(s2.data.spool.details, /below spool.min_free_space/);
});

t.test('failed/ and stale partial uploads are removed after their retention; fresh ones stay', async (t) => {
  const dir = programDir(t);
  const spool = join(dir, 'spool');
  // A first run makes the layout; then plant old and new leftovers and start again.
  const first = await startTestRelay(t, {}, { dir });
  await first.handle.close();
  const old = new Date(Date.now() - 8 * 86_400_000);
  for (const [p, mtime] of [
    [join(spool, 'failed', 'reports', 'old.log'), old],
    [join(spool, 'failed', 'reports', 'old.log.reason'), old],
    [join(spool, 'failed', 'reports', 'new.log'), new Date()],
  ] as const) {
    await writeFile(p, 'x');
    await utimes(p, mtime, mtime);
  }
  await writeFile(join(spool, 'tmp', 'crash.part'), 'half');
  await startTestRelay(t, { 'spool.failed_retention': '7d' }, { dir });
  t.same((await readdir(join(spool, 'failed', 'reports'))).sort(), ['new.log'], 'only the old failed file and its reason went');
  t.same(await readdir(join(spool, 'tmp')), [], 'partial uploads from a dead process are removed at start');
});

t.test('a second relay on the same spool refuses to start', async (t) => {
  const dir = programDir(t);
  await startTestRelay(t, {}, { dir });
  await t.rejects(startTestRelay(t, {}, { dir }), { code: 'ERR_STARTUP' });
});

t.test('files dropped into incoming/ whose name is no run log or inventory are left alone', async (t) => {
  // These used to be moved to failed/ with ERR_RUNINFO_NAME; RUDDER's relayd leaves `bob.log`
  // where it is (its conformance notes), and so does the relay now, forwarding the valid ones.
  const up = await new CountingUpstream().start();
  t.teardown(() => up.stop());
  const dir = programDir(t);
  const spool = join(dir, 'spool');
  const strays: Record<string, string[]> = {
    reports: ['toto', 'bob.log', 'notes.txt', '2026-13-01T00:00:00+00:00@x.log', `${NODE}.log.gz`],
    inventories: ['toto', 'inventory.json'],
  };
  for (const [kind, names] of Object.entries(strays)) {
    await mkdir(join(spool, 'incoming', kind), { recursive: true });
    for (const n of names) await writeFile(join(spool, 'incoming', kind, n), `stray ${n}`);
  }
  await writeFile(join(spool, 'incoming', 'reports', runName(NODE, 7)), 'valid');
  // Each stray is announced once in the log when the processor meets it (no sleep needed).
  const ignored = new Set<string>();
  const log = pino({ level: 'warn' }, { write: (line: string) => {
    const e = JSON.parse(line) as { msg: string; file?: string; kind?: string };
    if (e.msg.startsWith('not a file name')) ignored.add(`${e.kind}/${e.file}`);
  } });
  const r = await startTestRelay(t, { 'upstream.url': up.url, 'log.level': 'warn' }, { dir, log });
  await until(() => (up.received.length === 1 ? true : undefined), 'the valid file forwarded');
  const total = Object.values(strays).flat().length;
  await until(() => (ignored.size === total ? true : undefined), 'every stray met and left alone');
  // The forwarded file is removed just after the upstream's 2xx.
  await until(async () => ((await readdir(join(r.spool, 'incoming', 'reports'))).length === strays.reports!.length ? true : undefined), 'the forwarded file removed');
  for (const [kind, names] of Object.entries(strays)) {
    t.same((await readdir(join(r.spool, 'incoming', kind))).sort(), [...names].sort(), `${kind}: strays still in incoming/`);
    t.same(await readdir(join(r.spool, 'failed', kind)), [], `${kind}: nothing in failed/`);
  }
  t.equal(up.received.length, 1, 'only the valid file went up');
});

t.test('a RUDDER agent\'s OCS inventory waits for its .sign and goes up with it, inventory first', async (t) => {
  const up = await new CountingUpstream().start();
  t.teardown(() => up.stop());
  const r = await startTestRelay(t, { 'upstream.url': up.url, 'processing.ocs_pair_wait': '1m' });
  const base = `${NODE}_2026-11-25T10:00:00+00:00.ocs`;
  t.equal((await put(r.url, 'inventories', `${base}.gz`, 'xml')).status, 201);
  // Alone, the inventory stays: held until its signature arrives, not forwarded, not failed.
  await until(() => (r.handle.processors.inventories.pending === 1 && up.inFlight === 0 ? true : undefined), 'the lone half waiting');
  t.equal(up.received.length, 0, 'nothing forwarded without the .sign');
  // Sent to /inventory-updates/ (an accepted node's path): the same spool, forwarded as /inventories/.
  const res = await fetch(`${r.url}/inventory-updates/${encodeURIComponent(`${base}.sign`)}`, { method: 'PUT', body: 'sig' });
  t.equal(res.status, 201);
  await until(() => (up.received.length === 2 ? true : undefined), 'the pair forwarded');
  t.same(up.received.map((x) => decodeURIComponent(x.path)), [`/inventories/${base}.gz`, `/inventories/${base}.sign`], 'in that order');
  await until(async () => ((await readdir(join(r.spool, 'incoming', 'inventories'))).length === 0 ? true : undefined), 'both halves gone from the spool');
  t.same(await readdir(join(r.spool, 'failed', 'inventories')), [], 'nothing failed');
});

t.test('an OCS inventory still alone after processing.ocs_pair_wait goes to failed/; a lone .sign goes up alone', async (t) => {
  const up = await new CountingUpstream().start();
  t.teardown(() => up.stop());
  const lone = `${NODE}_2026-11-25T11:00:00+00:00.ocs.gz`;
  const r2 = await startTestRelay(t, { 'upstream.url': up.url, 'processing.ocs_pair_wait': '50ms', 'processing.retry_min': '20ms', 'processing.retry_max': '50ms' });
  t.equal((await put(r2.url, 'inventories', lone, 'inv')).status, 201);
  const reason = await until(() => readFile(join(r2.spool, 'failed', 'inventories', `${lone}.reason`), 'utf8').catch(() => undefined), 'the lone inventory in failed/');
  t.match(reason, /ERR_OCS_UNPAIRED/);
  t.equal(up.received.length, 0, 'it was never forwarded');
  // A .sign whose inventory is not (or no longer) at the relay: its inventory may be waiting at the
  // root, which pairs them (junk raced ahead under the .sign's name must not strand the real one).
  const sign = `${NODE}_2026-11-25T12:00:00+00:00.ocs.sign`;
  t.equal((await put(r2.url, 'inventories', sign, 'sig')).status, 201);
  await until(() => (up.received.length === 1 ? true : undefined), 'the lone .sign sent up');
  t.equal(up.received[0]!.path, `/inventories/${sign}`);
});

t.test('several upstreams: the next takes over when the one in use does not answer', async (t) => {
  const second = await new CountingUpstream().start();
  t.teardown(() => second.stop());
  // The first refuses connections (nothing listens on its port).
  const r = await startTestRelay(t, { 'upstream.url': `http://127.0.0.1:${await freePort()}`, 'upstream.fallback_urls': [second.url] });
  for (let i = 1; i <= 5; i++) t.equal((await put(r.url, 'reports', runName(NODE, i), Buffer.from(`run ${i}\n`))).status, 201);
  await until(() => (second.received.length >= 5 ? true : undefined), 'the files at the second upstream');
  t.equal(second.received.length, 5, 'each file reached the second upstream once');
  const status = await (await fetch(`${r.url}/rudder/relay-api/1/system/status`)).json() as { data: { upstream: { url: string; urls: string[] } } };
  t.equal(status.data.upstream.url, second.url, 'the status names the upstream in use');
  t.equal(status.data.upstream.urls.length, 2, 'and lists both');
});

t.test('several upstreams: an upstream answering 503 hands over to the next', async (t) => {
  const busy = await new CountingUpstream(() => 503, { batches: 503 }).start();
  const ok = await new CountingUpstream().start();
  t.teardown(() => Promise.all([busy.stop(), ok.stop()]));
  const r = await startTestRelay(t, { 'upstream.url': busy.url, 'upstream.fallback_urls': [ok.url] });
  t.equal((await put(r.url, 'reports', runName(NODE, 1), Buffer.from('run\n'))).status, 201);
  await until(() => (ok.received.length === 1 ? true : undefined), 'the file at the answering upstream');
  await until(async () => ((await readdir(join(r.spool, 'incoming', 'reports'))).length === 0 ? true : undefined), 'the spool to empty');
  t.same(await readdir(join(r.spool, 'failed', 'reports')), [], 'nothing failed');
});

t.test('upstream.fallback_urls must be http(s) URLs, and https with a pin or CA', async (t) => {
  const dir = programDir(t);
  const load = (o: Record<string, unknown>) => () => loadRelaydConfig({ overrides: { 'spool.directory': join(dir, 'spool'), ...o } });
  t.throws(load({ 'upstream.fallback_urls': ['ftp://x'] }), { code: 'ERR_CONFIG', message: /fallback_urls/ });
  t.throws(load({ 'upstream.url': 'https://a.test', 'upstream.ca_file': '/x.pem', 'upstream.fallback_urls': ['http://b.test'] }), { code: 'ERR_CONFIG', message: /https/ });
  t.doesNotThrow(load({ 'upstream.fallback_urls': ['http://b.test:3031', 'https://c.test'] }));
});
