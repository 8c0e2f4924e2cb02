/**
 * Power loss under a server on PostgreSQL: a cluster of the test's own (test/helpers/pg-cluster.ts,
 * fsync on) with its data directory and the server's on one loop-mounted ext4 image, in a private
 * mount namespace. A relay's backlog is sent up in batches; the power goes among them (server and
 * cluster frozen with SIGSTOP, the image copied, both killed); the cluster and the server start
 * again on the copy and every run log the relay was answered for is stored exactly once. The
 * fault model is checked on the same copy: a file written without fsync just before the cut is
 * lost, and with fsync turned off, rows committed just before a second cut are lost. Skipped with the reason when the machine cannot mount or has no PostgreSQL server
 * binaries (not in CI). See docs/faults.md.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, writeFile, copyFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import pg from 'pg';
import { adminClient, BIN, programDir, requiredInCi, startProgram, waitFor } from '../helpers/programs.js';
import { freePort } from '../relayd/helpers/upstream.js';
import {
  BlackHoleProxy, cannotMount, compareStored, inNs, makeFleet, poll, putAll, q, registerFleet, relayDrained, storedRuns, storedTotal,
} from '../helpers/faults.js';
import { cannotRunCluster, startCluster, type Cluster } from '../helpers/pg-cluster.js';

const why = requiredInCi(cannotMount() || cannotRunCluster());

const fleet = makeFleet('5', 4, 40);

/** Each statement on a connection of its own; the last one's rows. */
async function sql(url: string, ...statements: string[]): Promise<any[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    let rows: any[] = [];
    for (const s of statements) rows = (await c.query(s)).rows;
    return rows;
  } finally {
    await c.end();
  }
}

t.test('power loss under the server (PostgreSQL) mid-backlog: every run log the relay gave up is stored once', { skip: why }, async (t) => {
  const t0 = Date.now();
  const dir = programDir(t);
  // The mount point where the postgres user can reach it (the test directory's parents may not let it).
  const mnt = await mkdtemp(join(tmpdir(), 'capstan-pg-power-'));
  t.teardown(() => rm(mnt, { recursive: true, force: true }));
  const image = join(dir, 'disk.img');
  const after = join(dir, 'after.img');
  execFileSync('truncate', ['-s', '192M', image]);
  execFileSync('mkfs.ext4', ['-q', '-F', image]);
  // commit=600: the journal is committed by fsyncs only, so what is not fsync'd stays in the page cache.
  const mount = (img: string) => `mount -o loop,commit=600 ${q(img)} ${q(mnt)}`;
  const pgData = join(mnt, 'pg');
  const pgPort = await freePort();
  const clusters: Cluster[] = [];
  t.teardown(() => clusters.forEach((c) => c.signalAll('SIGKILL')));
  const first = await startCluster(mount(image), pgData, pgPort, { init: true });
  clusters.push(first);
  t.same(await sql(first.url, 'SHOW fsync'), [{ fsync: 'on' }], 'the cluster runs with fsync on');
  t.comment(`cluster initialised and answering at ${Date.now() - t0} ms`);

  await writeFile(join(dir, 'server.toml'), '[spool]\nmin_free_space = "0"\n[lifecycle]\nsweep_interval = "1h"\n');
  await writeFile(join(dir, 'relayd.toml'), ['[upstream]', 'batch_files = 16', 'concurrency = 2', 'probe_interval = "100ms"', 'timeout = "5s"',
    '[processing]', 'retry_min = "100ms"', 'retry_max = "1s"', 'catchup_interval = "500ms"', ''].join('\n'));
  const port = await freePort();
  const serverArgs = ['serve', '--config', join(dir, 'server.toml'), '--listen', `127.0.0.1:${port}`, '--data-dir', join(mnt, 'data'),
    '--database', first.url, '--log-level', 'warn'];
  const server = await startProgram(BIN.server, serverArgs, 90_000, undefined, first.wrap);
  t.teardown(() => server.signal('SIGKILL'));
  t.comment(`server on the cluster at ${Date.now() - t0} ms`);
  const api = adminClient(server.url, (await readFile(inNs(server, join(mnt, 'data', 'admin.token')), 'utf8')).trim());
  await registerFleet(api, fleet);
  // The server as after a while in service: its own files (keys, admin token) are on the disk.
  execFileSync('sync', ['-f', inNs(server, join(mnt, 'data'))]);

  // A backlog at the relay (its upstream refusing connections), then sent up in batches.
  const gate = new BlackHoleProxy(port);
  await gate.start();
  t.teardown(() => gate.stop());
  gate.refuse();
  const relay = await startProgram(BIN.relayd, ['--config', join(dir, 'relayd.toml'), '--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'),
    '--upstream', `http://127.0.0.1:${gate.port}`, '--log-level', 'error']);
  t.teardown(() => relay.stop());
  const sent = await putAll(relay.url, fleet.files);
  t.equal(sent.acked.length, fleet.files.length, `the relay took all ${fleet.files.length} run logs`);
  t.comment(`backlog spooled at ${Date.now() - t0} ms`);
  gate.heal();
  const atLoss = await poll(async () => {
    const n = await storedTotal(api, fleet);
    return n >= 20 ? n : undefined;
  }, 'the first batches stored', 30_000);

  // The fault model, on the same disk: a file written without fsync just before the power goes.
  const control = Buffer.from('written, never fsync\'d\n');
  await writeFile(inNs(server, join(mnt, 'unsynced')), control);

  // Power loss: server and cluster frozen together, the disk copied, both killed.
  server.proc.kill('SIGSTOP');
  first.signalAll('SIGSTOP');
  await copyFile(image, after);
  server.proc.kill('SIGKILL');
  first.signalAll('SIGKILL');
  await Promise.all([server.exited, first.exited]);
  t.ok(atLoss < fleet.files.length, `power lost with ${atLoss} of ${fleet.files.length} stored (${Date.now() - t0} ms in)`);

  // The disk as it came back: the cluster recovers from its WAL, the server starts on it.
  const second = await startCluster(mount(after), pgData, pgPort, { init: false });
  clusters.push(second);
  t.match(second.stderr.join(''), /database system was (interrupted|not properly shut down)/, 'the cluster recovered from a crash');
  const again = await startProgram(BIN.server, serverArgs, 90_000, undefined, second.wrap);
  t.teardown(() => again.stop());
  const unsynced = await readFile(inNs(again, join(mnt, 'unsynced'))).catch(() => Buffer.alloc(0));
  t.notSame(unsynced, control, `a file written without fsync was lost (${unsynced.length} bytes after the power loss): the loss is real`);

  await waitFor(() => relayDrained(relay.url), 'the relay to drain', 40_000);
  await poll(async () => ((await storedTotal(api, fleet)) >= fleet.files.length ? true : undefined), 'every run stored', 20_000).catch(() => undefined);
  const stored = await storedRuns(api, fleet);
  const { missing, twice, unknown } = compareStored(stored, sent.acked, fleet);
  t.same(missing, [], `all ${sent.acked.length} run logs stored after the power loss`);
  t.same(twice, [], 'none twice');
  t.same(unknown, [], 'nothing unknown');
  t.same(await readdir(join(dir, 'relay', 'failed', 'reports')), [], 'nothing failed at the relay');
  t.same(await readdir(inNs(again, join(mnt, 'data', 'spool', 'failed', 'reports'))), [], 'nothing failed at the server');
  t.notMatch(again.stderr.join(''), /\n\s+at /, 'no stack trace in the restarted server\'s log');
  t.equal(await again.stop(), 0, 'the restarted server stops cleanly');

  // The method sees a database that does not flush: with fsync turned off (a reload), rows
  // committed just before a second power loss are not on the copy.
  await sql(second.url, 'ALTER SYSTEM SET fsync = off', 'SELECT pg_reload_conf()');
  await poll(async () => ((await sql(second.url, 'SHOW fsync'))[0]?.fsync === 'off' ? true : undefined), 'fsync off', 10_000, 100);
  await sql(second.url, 'CREATE TABLE fsync_probe (id int PRIMARY KEY)', ...Array.from({ length: 20 }, (_, i) => `INSERT INTO fsync_probe VALUES (${i})`));
  t.same(await sql(second.url, 'SELECT count(*)::int AS n FROM fsync_probe'), [{ n: 20 }], 'with fsync off, 20 rows committed one by one');
  const lostImage = join(dir, 'lost.img');
  second.signalAll('SIGSTOP');
  await copyFile(after, lostImage);
  second.signalAll('SIGKILL');
  await second.exited;
  const third = await startCluster(mount(lostImage), pgData, pgPort, { init: false });
  clusters.push(third);
  const gone = (await sql(third.url, "SELECT to_regclass('fsync_probe') IS NULL AS gone"))[0]?.gone === true;
  const left = gone ? -1 : (await sql(third.url, 'SELECT count(*)::int AS n FROM fsync_probe'))[0]?.n;
  t.ok(left < 20, `those rows were lost with the power (${left === -1 ? 'the table itself is gone' : `${left} of 20 left`}): a store that did not flush would fail this test`);
  t.equal(await third.stop(), 0, 'the cluster shuts down cleanly');
  t.comment(`done in ${Date.now() - t0} ms`);
});
