/**
 * Reads from a PostgreSQL streaming replica ([database] replicas), against a real primary and hot
 * standby of the test's own (initdb + pg_basebackup in a temporary directory, on loopback
 * ports): the fleet-wide reads come from the replica while it is within replica_max_lag, which
 * the status shows; with its replay paused they go on from it until the bound passes, then from
 * the primary; and what decides (registration) never reads it. The kept counters (compliance by
 * group) read there too.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { adminClient, BIN, programDir, startProgram, waitFor } from '../helpers/programs.js';
import { pgClusterUnavailable, pgTempDir, startPrimary, startReplica } from '../helpers/pg-replica.js';

const why = await pgClusterUnavailable();
if (why && process.env.CI === 'true') throw new Error(`a private PostgreSQL cluster is needed in CI: ${why}`);

const node = (i: number) => `0e5c0000-0000-4000-8000-${String(i).padStart(12, '0')}`;

t.test('the fleet-wide reads come from a replica within its staleness bound', { skip: why ?? false, timeout: 180_000 }, async (t) => {
  const base = await pgTempDir(t);
  const primary = await startPrimary(t, base);
  const replica = await startReplica(t, base, primary);
  t.equal((await replica.sql<{ r: boolean }>('SELECT pg_is_in_recovery() AS r'))[0]!.r, true, 'the replica is a hot standby');

  const dir = programDir(t);
  const MAX_LAG_MS = 3000;
  await writeFile(join(dir, 'server.toml'), [
    '[lifecycle]', 'sweep_interval = "1h"',
    '[database]', `replicas = ["${replica.url}"]`, `replica_max_lag = "${MAX_LAG_MS}ms"`, 'replica_check_interval = "100ms"', '',
  ].join('\n'));
  const server = await startProgram(BIN.server, ['serve', '--config', join(dir, 'server.toml'), '--listen', '127.0.0.1:0', '--data-dir', join(dir, 'data'),
    '--database', primary.url, '--log-level', 'info'], 90_000);
  t.teardown(() => server.stop());
  const api = adminClient(server.url, (await readFile(join(dir, 'data', 'admin.token'), 'utf8')).trim());
  const replicaStatus = async () => (await api('GET', '/api/1/system/status')).json.data.database.replicas[0];

  const inUse = await waitFor(async () => {
    const s = await replicaStatus();
    return s.in_use ? s : undefined;
  }, 'the replica in use', 20_000);
  t.ok(inUse.staleness_ms <= MAX_LAG_MS, `in use, at most ${inUse.staleness_ms} ms behind`);
  t.notMatch(inUse.url, /password/, 'its URL shown without a password');
  // The log line travels through the server's stderr pipe, which may deliver it after the status
  // answer: wait for it, with a bound.
  t.ok(await waitFor(async () => (/"msg":"reading from replica"/.test(server.output.join('\n')) ? true : undefined), 'the log line', 5000),
    'the server says it reads from the replica');

  // Written on the primary, read back from the replica once replayed.
  for (let i = 1; i <= 3; i++) t.equal((await api('POST', '/api/1/nodes', { id: node(i), hostname: `n${i}.replica.test` })).status, 201, `node ${i} registered`);
  await waitFor(async () => ((await api('GET', '/api/1/nodes?per_page=50')).json.total === 3 ? true : undefined), 'the three nodes listed', 10_000);
  // Compliance by group, read from the kept counters on the replica (a read-only snapshot there):
  // the three nodes, generated into the built-in all-nodes group on the primary, once replayed.
  const allNodes = async () => {
    const g = (await api('GET', '/api/1/compliance/groups')).json.data.find((x: { group_id: string }) => x.group_id === 'all-nodes');
    return g.nodes + g.relays + g.agentless;
  };
  t.equal(await waitFor(async () => ((await allNodes()) === 3 ? 3 : undefined), 'the all-nodes group counting three', 15_000), 3, 'compliance by group from the replica');

  // Replay paused: the replica stops moving. Within the bound the lists still come from it, so a
  // node registered now is not in them, while what decides reads the primary and sees it.
  // Staleness counts from the start of the last check the replica passed: read that check just
  // before the pause (a check under way at the pause may still pass; none started after it
  // does). Counted from before the request: the server read its clock no earlier.
  const asked = Date.now();
  const freshBefore = asked - (await replicaStatus()).staleness_ms;
  await replica.sql('SELECT pg_wal_replay_pause()');
  const pausedAt = Date.now();
  t.equal((await api('POST', '/api/1/nodes', { id: node(4), hostname: 'n4.replica.test' })).status, 201, 'a fourth node registered (primary)');
  const again = await api('POST', '/api/1/nodes', { id: node(4), hostname: 'n4.replica.test' });
  t.equal(again.status, 409, `registering it again is refused at once (${again.json?.error?.code}): what decides reads the primary`);
  const during = (await api('GET', '/api/1/nodes?per_page=50')).json;
  const stillInUse = Date.now() - pausedAt < MAX_LAG_MS;
  if (stillInUse) {
    t.equal(during.total, 3, `read ${Date.now() - pausedAt} ms after the pause, within the bound: the list comes from the replica (3 nodes)`);
  } else {
    t.comment(`the list was read ${Date.now() - pausedAt} ms after the pause, past the bound: its source is not asserted`);
  }

  // Past the bound the replica is left out and the primary answers.
  const left = await waitFor(async () => {
    const s = await replicaStatus();
    return s.in_use ? undefined : s;
  }, 'the replica left out past replica_max_lag', 15_000);
  // Not before the bound, counted from the last check it passed (a round under way when the
  // replay paused started before it: under load, well before).
  t.ok(Date.now() - freshBefore >= MAX_LAG_MS,
    `left out ${Date.now() - freshBefore} ms after its last passed check before the pause, ${Date.now() - pausedAt} ms after the pause (bound ${MAX_LAG_MS} ms)`);
  t.ok(left.staleness_ms > MAX_LAG_MS, `its staleness shown: ${left.staleness_ms} ms`);
  t.equal((await api('GET', '/api/1/nodes?per_page=50')).json.total, 4, 'the list comes from the primary: 4 nodes');
  t.equal((await api('GET', `/api/1/nodes/${node(4)}`)).status, 200, 'and the fourth node\'s page');
  // The status judges staleness when asked; the log line comes with the next check (every 100 ms).
  t.ok(await waitFor(async () => (/not reading from replica/.test(server.output.join('\n')) ? true : undefined), 'the log line', 5000),
    'the server says it stopped reading from the replica');

  // Replay resumed: back in use, and it holds everything.
  await replica.sql('SELECT pg_wal_replay_resume()');
  await waitFor(async () => ((await replicaStatus()).in_use ? true : undefined), 'the replica in use again', 15_000);
  t.equal((await api('GET', '/api/1/nodes?per_page=50')).json.total, 4, 'the replica caught up: 4 nodes');

  // The replica gone: the reads go on from the primary.
  await replica.stop();
  await waitFor(async () => ((await replicaStatus()).in_use ? undefined : true), 'a stopped replica left out', 15_000);
  t.equal((await api('GET', '/api/1/nodes?per_page=50')).json.total, 4, 'the primary answers the lists');
  t.equal((await api('GET', '/api/1/compliance')).status, 200, 'and the compliance summary');
  t.notMatch(server.stderr.join(''), /\n\s+at /, 'no stack trace in the server log');
  t.equal(await server.stop(), 0, 'the server stops cleanly');
});
