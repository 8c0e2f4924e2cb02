/**
 * Faults between a relay and its server, with real programs on loopback: the server killed with
 * SIGKILL while the relay forwards a backlog to it in batches (SQLite and PostgreSQL), and a
 * network partition that drops packets instead of refusing them. After each, every run log the
 * relay acknowledged is stored exactly once, nothing else is stored, nothing is left in failed/
 * and the server still answers. See docs/faults.md.
 */
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { adminClient, BIN, programDir, startProgram, waitFor, type Running } from '../helpers/programs.js';
import { freePort } from '../relayd/helpers/upstream.js';
import { freshSchemaUrl, pgUnavailable } from '../server/pg.js';
import {
  BlackHoleProxy, poll, compareStored, makeFleet, putAll, registerFleet, relayDrained, relayStatus, storedRuns, storedTotal, type Fleet,
} from '../helpers/faults.js';

/** The bound on a program's ready line: programs here start beside others (the tests run two at a time). */
const READY_MS = 90_000;

/** One fleet for every test here (each has a server of its own): 4 nodes, 50 run logs each. */
const fleet = makeFleet('1', 4, 50);

const RELAY_TOML = [
  '[upstream]', 'batch_files = 16', 'concurrency = 2', 'probe_interval = "100ms"', 'timeout = "2s"',
  '[processing]', 'retry_min = "100ms"', 'retry_max = "1s"', 'catchup_interval = "500ms"', '',
].join('\n');

async function checkStored(t: Test, api: ReturnType<typeof adminClient>, fleet: Fleet, acked: string[]): Promise<void> {
  const stored = await storedRuns(api, fleet);
  const { missing, twice, unknown } = compareStored(stored, acked, fleet);
  t.same(missing, [], `all ${acked.length} acknowledged run logs stored`);
  t.same(twice, [], 'none stored twice');
  t.same(unknown, [], 'nothing stored that was not sent');
  t.equal(stored.size, acked.length, `${stored.size} runs stored, as many as acknowledged`);
}

async function serverOn(dir: string, port: number, database: string | undefined): Promise<Running> {
  return startProgram(BIN.server, ['serve', '--config', join(dir, 'server.toml'), '--listen', `127.0.0.1:${port}`, '--data-dir', join(dir, 'data'),
    '--log-level', 'error', ...(database ? ['--database', database] : [])], READY_MS);
}

async function killMidBacklog(t: Test, store: 'sqlite' | 'postgres') {
  const t0 = Date.now();
  const dir = programDir(t);
  const database = store === 'postgres' ? await freshSchemaUrl(t) : undefined;
  await writeFile(join(dir, 'server.toml'), '[lifecycle]\nsweep_interval = "1h"\n');
  await writeFile(join(dir, 'relayd.toml'), RELAY_TOML);
  const port = await freePort();

  // The relay takes the run logs while its upstream refuses connections (down), then sends its
  // backlog in batches; the server is killed among them.
  const gate = new BlackHoleProxy(port);
  await gate.start();
  t.teardown(() => gate.stop());
  gate.refuse();
  // The server starts and learns the fleet while the relay starts and spools the backlog.
  const [{ first, api }, { relay, sent }] = await Promise.all([
    (async () => {
      const first = await serverOn(dir, port, database);
      t.teardown(() => first.signal('SIGKILL'));
      const api = adminClient(first.url, (await readFile(join(dir, 'data', 'admin.token'), 'utf8')).trim());
      await registerFleet(api, fleet);
      return { first, api };
    })(),
    (async () => {
      const relay = await startProgram(BIN.relayd, ['--config', join(dir, 'relayd.toml'), '--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'),
        '--upstream', `http://127.0.0.1:${gate.port}`, '--log-level', 'error'], READY_MS);
      t.teardown(() => relay.stop());
      return { relay, sent: await putAll(relay.url, fleet.files) };
    })(),
  ]);
  t.equal(sent.acked.length, fleet.files.length, `the relay acknowledged all ${fleet.files.length} run logs with the server unreachable`);
  t.comment(`backlog spooled at ${Date.now() - t0} ms`);

  gate.heal();
  const atKill = await poll(async () => {
    const n = await storedTotal(api, fleet);
    return n >= 20 ? n : undefined;
  }, 'the first batches stored', 30_000);
  t.equal(await first.signal('SIGKILL'), null, 'server killed');
  t.ok(atKill < fleet.files.length, `killed with ${atKill} of ${fleet.files.length} stored (mid-backlog)`);

  const second = await serverOn(dir, port, database);
  t.teardown(() => second.stop());
  t.comment(`restarted at ${Date.now() - t0} ms`);
  await waitFor(() => relayDrained(relay.url), 'the relay to drain', 40_000);
  await poll(async () => ((await storedTotal(api, fleet)) >= fleet.files.length ? true : undefined), 'every run stored', 20_000);
  t.comment(`drained at ${Date.now() - t0} ms`);
  await checkStored(t, api, fleet, sent.acked);
  t.same(await readdir(join(dir, 'relay', 'failed', 'reports')), [], 'nothing failed at the relay');
  t.same(await readdir(join(dir, 'data', 'spool', 'failed', 'reports')), [], 'nothing failed at the server');
  t.equal((await api('GET', '/api/1/nodes?per_page=10')).json.total, fleet.ids.length, 'the server answers, with its nodes');
  t.notMatch(second.stderr.join(''), /\n\s+at /, 'no stack trace in the restarted server\'s log');
  t.equal(await second.stop(), 0, 'and stops cleanly');
}

// The tests share nothing but the fleet (a server, relay and directory of their own each; a schema
// of their own on PostgreSQL) and wait much on programs and timers: two at a time.
t.jobs = 2;

t.test('SIGKILL of the server mid-backlog, SQLite: every acknowledged run log stored once', (t) => killMidBacklog(t, 'sqlite'));

const why = await pgUnavailable();
t.test('SIGKILL of the server mid-backlog, PostgreSQL: every acknowledged run log stored once', { skip: why ?? false }, (t) => killMidBacklog(t, 'postgres'));

t.test('two roots on one database: one killed mid-backlog, the relay fails over, every run stored once', { skip: why ?? false }, async (t) => {
  const t0 = Date.now();
  const dir = programDir(t);
  const database = await freshSchemaUrl(t);
  // Servers sharing a database share the secret sealing its signing keys.
  await writeFile(join(dir, 'server.toml'), `[lifecycle]\nsweep_interval = "1h"\n[identity]\nsecret_file = "${join(dir, 'identity.secret')}"\n`);
  await writeFile(join(dir, 'relayd.toml'), RELAY_TOML);
  const [portA, portB] = [await freePort(), await freePort()];
  const root = (name: string, port: number) => startProgram(BIN.server, ['serve', '--config', join(dir, 'server.toml'), '--listen', `127.0.0.1:${port}`,
    '--data-dir', join(dir, name), '--log-level', 'error', '--database', database], READY_MS);

  // The relay knows both roots; it starts beside the first, the second is not up yet.
  const [relay, a] = await Promise.all([
    startProgram(BIN.relayd, ['--config', join(dir, 'relayd.toml'), '--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'),
      '--upstream', `http://127.0.0.1:${portA}`, '--upstream', `http://127.0.0.1:${portB}`, '--log-level', 'warn'], READY_MS).then((p) => (t.teardown(() => p.stop()), p)),
    root('a', portA).then((p) => (t.teardown(() => p.signal('SIGKILL')), p)),
  ]);
  t.same((await relayStatus(relay.url)).upstream.urls, [`http://127.0.0.1:${portA}`, `http://127.0.0.1:${portB}`], 'the relay lists both upstreams');
  const api = adminClient(a.url, (await readFile(join(dir, 'a', 'admin.token'), 'utf8')).trim());
  await registerFleet(api, fleet);
  // Half the runs go up to the first root; the second comes up; the first is killed while it
  // stores them; then the other half arrives at the relay, which has only the second to send to.
  const halves = [fleet.files.filter((_, i) => i % 2 === 0), fleet.files.filter((_, i) => i % 2 === 1)];
  const acked = [...(await putAll(relay.url, halves[0]!)).acked];
  // The second root starts once the relay is on the first, while the first stores its runs.
  await waitFor(async () => {
    const s = await relayStatus(relay.url);
    return s.upstream.url === `http://127.0.0.1:${portA}` && s.upstream.state === 'up' ? true : undefined;
  }, 'the relay to use the first root');
  const starting = root('b', portB).then((p) => (t.teardown(() => p.stop()), p));
  starting.catch(() => undefined); // awaited below, after the poll
  const atKill = await poll(async () => {
    const n = await storedTotal(api, fleet);
    return n >= 20 ? n : undefined;
  }, 'the first runs stored by the first root', 30_000);
  const b = await starting;
  const apiB = adminClient(b.url, (await readFile(join(dir, 'b', 'admin.token'), 'utf8')).trim());
  t.equal(await a.signal('SIGKILL'), null, 'the first root killed');
  t.ok(atKill < fleet.files.length, `killed with ${atKill} of ${fleet.files.length} stored`);
  acked.push(...(await putAll(relay.url, halves[1]!)).acked);
  t.equal(acked.length, fleet.files.length, `the relay acknowledged all ${fleet.files.length} run logs`);

  // The relay goes on with the second root, alone.
  await waitFor(() => relayDrained(relay.url), 'the relay to drain into the second root', 40_000);
  const status = await relayStatus(relay.url);
  t.equal(status.upstream.url, `http://127.0.0.1:${portB}`, 'the relay uses the second root');
  t.match(relay.output.join('\n'), /the next one takes over/, 'and says so in its log');
  const tookB = await poll(async () => {
    const n = (await apiB('GET', '/api/1/system/status')).json.data.processed.reports_done ?? 0;
    return n >= halves[1]!.length ? n : undefined;
  }, 'the second root to store the second half', 30_000);
  t.ok(tookB >= halves[1]!.length, `the second root stored ${tookB} run logs, the second half at least`);

  // What the first root acknowledged and had not stored waits in its spool: back, it stores it.
  const again = await root('a', portA);
  t.teardown(() => again.stop());
  await poll(async () => ((await storedTotal(apiB, fleet)) >= fleet.files.length ? true : undefined), 'every run stored', 30_000);
  t.comment(`all stored at ${Date.now() - t0} ms`);
  await checkStored(t, apiB, fleet, acked);
  t.same(await readdir(join(dir, 'relay', 'failed', 'reports')), [], 'nothing failed at the relay');
  for (const name of ['a', 'b']) t.same(await readdir(join(dir, name, 'spool', 'failed', 'reports')), [], `nothing failed at root ${name}`);
  t.equal(await again.stop(), 0, 'the first root stops cleanly');
  t.equal(await b.stop(), 0, 'the second root stops cleanly');
});

t.test('a partition that drops packets: the relay times out, retries and delivers everything once', async (t) => {
  const dir = programDir(t);
  await writeFile(join(dir, 'server.toml'), '[lifecycle]\nsweep_interval = "1h"\n');
  await writeFile(join(dir, 'relayd.toml'), RELAY_TOML);
  const port = await freePort();
  const proxy = new BlackHoleProxy(port);
  await proxy.start();
  t.teardown(() => proxy.stop());
  // The server starts and learns the fleet while the relay starts.
  const [api, relay] = await Promise.all([
    (async () => {
      const server = await startProgram(BIN.server, ['serve', '--config', join(dir, 'server.toml'), '--listen', `127.0.0.1:${port}`, '--data-dir', join(dir, 'data'), '--log-level', 'error'], READY_MS);
      t.teardown(() => server.stop());
      const api = adminClient(server.url, (await readFile(join(dir, 'data', 'admin.token'), 'utf8')).trim());
      await registerFleet(api, fleet);
      return api;
    })(),
    startProgram(BIN.relayd, ['--config', join(dir, 'relayd.toml'), '--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'),
      '--upstream', `http://127.0.0.1:${proxy.port}`, '--log-level', 'error'], READY_MS).then((p) => (t.teardown(() => p.stop()), p)),
  ]);

  // A first third goes through; the partition falls while the second third is on its way up.
  const thirds = [fleet.files.filter((_, i) => i % 3 === 0), fleet.files.filter((_, i) => i % 3 === 1), fleet.files.filter((_, i) => i % 3 === 2)];
  const acked: string[] = [];
  acked.push(...(await putAll(relay.url, thirds[0]!)).acked);
  await poll(async () => ((await storedTotal(api, fleet)) >= 10 ? true : undefined), 'the first run logs stored', 20_000);
  const second = putAll(relay.url, thirds[1]!);
  await waitFor(async () => ((await relayStatus(relay.url)).spool.incoming.reports > 0 ? true : undefined), 'files waiting at the relay', 10_000).catch(() => undefined);
  proxy.partition();
  acked.push(...(await second).acked);
  acked.push(...(await putAll(relay.url, thirds[2]!)).acked);
  t.equal(acked.length, fleet.files.length, 'the relay acknowledged every run log, partition or not');

  // The relay notices by its own timeout (nothing refuses it), and keeps everything spooled.
  const down = await waitFor(async () => {
    const s = await relayStatus(relay.url);
    return s.upstream.state === 'down' ? s : undefined;
  }, 'the relay to see the upstream down', 20_000);
  t.ok(down.spool.incoming.reports > 0, `${down.spool.incoming.reports} files wait at the relay`);
  // A request may have gone up whole before the partition fell and only its answer be held: what
  // proves the partition took traffic is bytes held either way.
  t.ok(proxy.heldUp + proxy.heldDown > 0, `${proxy.heldUp} bytes up and ${proxy.heldDown} down were dropped (held) by the partition`);
  const during = await storedTotal(api, fleet);
  t.ok(during < fleet.files.length, `${during} of ${fleet.files.length} stored during the partition`);

  // Healed: what was held arrives late (a retransmission), and the relay sends again what it gave up on.
  proxy.heal();
  await waitFor(() => relayDrained(relay.url), 'the relay to drain', 40_000);
  await poll(async () => ((await storedTotal(api, fleet)) >= fleet.files.length ? true : undefined), 'every run stored', 20_000);
  t.equal((await relayStatus(relay.url)).upstream.state, 'up', 'the relay sees the upstream up again');
  await checkStored(t, api, fleet, acked);
  t.same(await readdir(join(dir, 'relay', 'failed', 'reports')), [], 'nothing failed at the relay');
  t.same(await readdir(join(dir, 'data', 'spool', 'failed', 'reports')), [], 'nothing failed at the server');
  t.equal(await relay.stop(), 0, 'the relay stops cleanly');
});
