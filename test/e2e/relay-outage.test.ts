/**
 * The real relayd with its upstream down: it keeps accepting (2xx = on disk), reports the outage
 * in system/status and /metrics, and delivers everything exactly once when the upstream is back.
 * Then a crash: SIGKILL while 500 PUTs are in flight and the upstream is down; after a restart
 * and the upstream's return, every file that got a 2xx arrives exactly once, nothing that
 * arrives is partial, and no partial upload is left anywhere in the spool. And a crash while
 * delivered files are being overwritten in free/ (recycling, upstream up) leaves nothing partial
 * in incoming/ and sends nothing partial upstream.
 */
import { randomBytes } from 'node:crypto';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import t from 'tap';
import { Pool } from 'undici';
import { CountingUpstream, freePort, runName, sha256, until } from '../relayd/helpers/upstream.js';
import { startRelayd } from '../relayd/helpers/proc.js';
import { programDir } from '../helpers/programs.js';

const NODE = '0ffe0ffe-0000-4000-8000-000000000002';

t.test('upstream down: the relay keeps accepting and delivers everything once it is back', async (t) => {
  const dir = programDir(t);
  const port = await freePort();
  const up = new CountingUpstream();
  t.teardown(() => up.stop());
  const relay = await startRelayd(['--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'spool'), '--upstream', `http://127.0.0.1:${port}`, '--log-level', 'error']);
  t.teardown(() => relay.signal('SIGTERM'));

  const pool = new Pool(relay.url, { connections: 8 });
  t.teardown(() => pool.close());
  const sent = new Set<string>();
  const statuses = new Set<number>();
  for (let i = 0; i < 300; i++) {
    const body = randomBytes(2048);
    sent.add(sha256(body));
    const res = await pool.request({ method: 'PUT', path: `/reports/${encodeURIComponent(runName(NODE, i))}`, body, headers: { 'content-length': '2048' } });
    await res.body.dump();
    statuses.add(res.statusCode);
  }
  t.same([...statuses], [201], '300 files accepted with the upstream down');

  const status = await until(async () => {
    const s = ((await (await fetch(`${relay.url}/rudder/relay-api/1/system/status`)).json()) as any).data;
    return s.upstream.state === 'down' ? s : undefined;
  }, 'the outage in system/status');
  t.equal(status.upstream.status, 'error');
  t.equal(status.spool.incoming.reports, 300, 'all waiting in the spool');
  const metrics = await (await fetch(`${relay.url}/metrics`)).text();
  t.match(metrics, /capstan_relayd_upstream_up 0/);
  t.match(metrics, /capstan_relayd_spool_files\{kind="reports"\} 300/);
  t.match(metrics, /process_resident_memory_bytes \d+/, 'process metrics');

  await up.start(port);
  await until(() => (up.received.length >= 300 ? true : undefined), 'all 300 delivered', 30_000);
  t.same(new Set(up.counts.keys()), sent, 'every file arrived');
  t.ok([...up.counts.values()].every((n) => n === 1), 'each exactly once');
  t.equal(await relay.signal('SIGTERM'), 0, 'SIGTERM exits 0');
});

t.test('SIGKILL with 500 PUTs in flight and the upstream down loses nothing acknowledged', async (t) => {
  const dir = programDir(t);
  const spool = join(dir, 'spool');
  const port = await freePort();
  const up = new CountingUpstream();
  t.teardown(() => up.stop());
  // Hundreds of uploads from this one address at once, some stalled until the kill: no
  // per-address limit and no body pace here.
  await writeFile(join(dir, 'relayd.toml'), '[http]\nmax_uploads_per_client = 0\nmin_upload_rate = 0\nbody_timeout = "10m"\n');
  const args = ['--config', join(dir, 'relayd.toml'), '--listen', '127.0.0.1:0', '--spool-dir', spool, '--upstream', `http://127.0.0.1:${port}`, '--log-level', 'error'];
  const first = await startRelayd(args);
  t.teardown(() => first.signal('SIGKILL'));

  // Half of the uploads send their whole body at once; the other half stall in the middle of
  // theirs, so the kill always catches uploads mid-body as well as finished ones.
  const SIZE = 20 * 1024;
  const pool = new Pool(first.url, { connections: 500, pipelining: 0 });
  const outcomes: Array<{ sha: string; status: number | 'error' }> = [];
  let acknowledged = 0;
  const release: Array<() => void> = [];
  const upload = async (i: number) => {
    const body = randomBytes(SIZE);
    const stall = i % 2 === 1;
    const stream = stall
      ? Readable.from((async function* () {
          yield body.subarray(0, SIZE / 2);
          await new Promise<void>((r) => release.push(r));
          yield body.subarray(SIZE / 2);
        })())
      : body;
    try {
      const res = await pool.request({ method: 'PUT', path: `/reports/${encodeURIComponent(runName(NODE, i))}`, body: stream, headers: { 'content-length': String(SIZE) } });
      await res.body.dump();
      if (res.statusCode < 300) acknowledged++;
      outcomes.push({ sha: sha256(body), status: res.statusCode });
    } catch {
      outcomes.push({ sha: sha256(body), status: 'error' });
    }
  };
  // The stalled half first, then the whole-body half 50 at a time, so that the kill lands among
  // uploads that are finished, mid-write and not yet started.
  const stalled = Array.from({ length: 250 }, (_, k) => upload(2 * k + 1));
  await until(() => (release.length >= 200 ? true : undefined), 'uploads stalled mid-body');
  let nextFast = 0;
  const fast = Array.from({ length: 50 }, async () => {
    while (nextFast < 250) await upload(2 * nextFast++);
  });
  const uploads = [...stalled, ...fast];
  await until(() => (acknowledged >= 100 ? true : undefined), '100 uploads acknowledged');
  t.equal(await first.signal('SIGKILL'), null, 'killed');
  release.forEach((r) => r());
  await Promise.all(uploads);
  await pool.close().catch(() => {});
  const ok = outcomes.filter((o) => typeof o.status === 'number' && o.status < 300);
  const failed = outcomes.filter((o) => o.status === 'error' || (o.status as number) >= 300);
  t.ok(ok.length >= 100, `${ok.length} acknowledged before the kill`);
  t.ok(failed.length >= 250, `${failed.length} cut off by the kill`);

  // Whatever is in incoming/ now is complete: every file there is byte for byte one that was sent.
  const sentShas = new Set(outcomes.map((o) => o.sha));
  const incoming = await readdir(join(spool, 'incoming', 'reports'));
  for (const name of incoming) {
    if (!sentShas.has(sha256(await readFile(join(spool, 'incoming', 'reports', name))))) t.fail(`partial file in incoming/: ${name}`);
  }

  const second = await startRelayd(args);
  t.teardown(() => second.signal('SIGTERM'));
  t.same(await readdir(join(spool, 'tmp')), [], 'partial uploads of the killed process are gone after the restart');
  await up.start(port);
  await until(async () => {
    const s = ((await (await fetch(`${second.url}/rudder/relay-api/1/system/status`)).json()) as any).data;
    return s.spool.incoming.reports === 0 && s.spool.pending.reports === 0 ? true : undefined;
  }, 'the spool to drain', 30_000);

  for (const o of ok) if (up.counts.get(o.sha) !== 1) t.fail(`acknowledged file arrived ${up.counts.get(o.sha) ?? 0} times`);
  t.pass(`all ${ok.length} acknowledged files arrived exactly once`);
  t.ok([...up.counts.keys()].every((sha) => sentShas.has(sha)), 'nothing partial arrived upstream');
  t.ok([...up.counts.values()].every((n) => n === 1), 'nothing arrived twice');
  const extra = failed.filter((o) => up.counts.has(o.sha)).length;
  t.comment(`${extra} of the ${failed.length} cut-off uploads had been renamed into place before the kill and were delivered whole`);
  t.same(await readdir(join(spool, 'failed', 'reports')), [], 'nothing failed');
  t.equal(await second.signal('SIGTERM'), 0);
});

t.test('SIGKILL while delivered files are being overwritten in free/: nothing partial ever reaches incoming/ or the upstream', async (t) => {
  const dir = programDir(t);
  const spool = join(dir, 'spool');
  const port = await freePort();
  const up = new CountingUpstream();
  t.teardown(() => up.stop());
  await up.start(port);
  // Hundreds of uploads from this one address at once, some stalled until the kill: no
  // per-address limit and no body pace here.
  await writeFile(join(dir, 'relayd.toml'), '[http]\nmax_uploads_per_client = 0\nmin_upload_rate = 0\nbody_timeout = "10m"\n');
  const args = ['--config', join(dir, 'relayd.toml'), '--listen', '127.0.0.1:0', '--spool-dir', spool, '--upstream', `http://127.0.0.1:${port}`, '--log-level', 'error'];
  const first = await startRelayd(args);
  t.teardown(() => first.signal('SIGKILL'));
  const pool = new Pool(first.url, { connections: 300, pipelining: 0 });
  const sent = new Set<string>();
  const acked: string[] = [];
  const release: Array<() => void> = [];
  let failures = 0;
  // Sizes vary, so that a reused file is sometimes longer than its new body (cut) or shorter (grown).
  const upload = async (i: number, stall: boolean) => {
    const size = 1024 + ((i * 7919) % 40_000);
    const body = randomBytes(size);
    sent.add(sha256(body));
    const stream = stall
      ? Readable.from((async function* () {
          yield body.subarray(0, size >> 1);
          await new Promise<void>((r) => release.push(r));
          yield body.subarray(size >> 1);
        })())
      : body;
    try {
      const res = await pool.request({ method: 'PUT', path: `/reports/${encodeURIComponent(runName(NODE, i))}`, body: stream, headers: { 'content-length': String(size) } });
      await res.body.dump();
      if (res.statusCode === 201) acked.push(sha256(body));
      else failures++;
    } catch {
      failures++;
    }
  };

  // Fill free/ with delivered files.
  for (let k = 0; k < 200; k += 20) await Promise.all(Array.from({ length: 20 }, (_, j) => upload(k + j, false)));
  const status = async (url: string) => ((await (await fetch(`${url}/rudder/relay-api/1/system/status`)).json()) as any).data;
  await until(() => (up.received.length >= 200 ? true : undefined), 'the first 200 delivered', 30_000);
  // As many files wait in free/ as were in flight at once; the uploads below take them again.
  await until(async () => ((await status(first.url)).spool.recycled.files >= 10 ? true : undefined), 'delivered files kept in free/', 30_000);

  // Uploads that stall mid-body (writing into reused files), then a stream of whole ones, and the kill among them.
  const stalled = Array.from({ length: 100 }, (_, k) => upload(1000 + k, true));
  await until(() => (release.length >= 80 ? true : undefined), 'uploads stalled mid-body');
  let next = 2000;
  const before = acked.length;
  const fast = Array.from({ length: 20 }, async () => {
    while (next < 2300) await upload(next++, false);
  });
  await until(() => (acked.length >= before + 60 ? true : undefined), 'uploads acknowledged while files are reused');
  t.ok((await status(first.url)).spool.recycled.reused >= 10, 'uploads were written into reused files');
  const metrics = await (await fetch(`${first.url}/metrics`)).text();
  t.ok(Number(/^capstan_relayd_spool_reused_files_total (\d+)$/m.exec(metrics)?.[1]) >= 10, 'and /metrics counts them');
  t.match(metrics, /^capstan_relayd_spool_free_files \d+$/m);
  t.equal(await first.signal('SIGKILL'), null, 'killed');
  release.forEach((r) => r());
  await Promise.all([...stalled, ...fast]);
  await pool.close().catch(() => {});
  t.ok(failures >= 80, `${failures} uploads cut off by the kill`);

  for (const name of await readdir(join(spool, 'incoming', 'reports'))) {
    if (!sent.has(sha256(await readFile(join(spool, 'incoming', 'reports', name))))) t.fail(`partial file in incoming/: ${name}`);
  }
  const second = await startRelayd(args);
  t.teardown(() => second.signal('SIGTERM'));
  await until(async () => {
    const s = await status(second.url);
    return s.spool.incoming.reports === 0 && s.spool.pending.reports === 0 ? true : undefined;
  }, 'the spool to drain', 30_000);
  const missing = acked.filter((sha) => !up.counts.has(sha));
  t.same(missing, [], `all ${acked.length} acknowledged files arrived`);
  t.ok([...up.counts.keys()].every((sha) => sent.has(sha)), 'nothing partial arrived upstream');
  t.same(await readdir(join(spool, 'failed', 'reports')), [], 'nothing failed');
  t.ok((await status(second.url)).spool.recycled.files > 0, 'free/ adopted by the restarted relay');
  t.equal(await second.signal('SIGTERM'), 0);
});
