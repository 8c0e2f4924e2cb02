/**
 * The benchmarks' measure of the database's CPU counts the backends that end inside the window
 * (a pool closes a connection idle for 10 s): through what the postmaster collected from them,
 * less what they had used before it. The arithmetic (bench/src/proc-cpu.ts), then a real
 * connection that works and closes between two samples (bench/lib/postgres.mjs).
 * The second part skips with the reason when PostgreSQL is unreachable (fails when CI=true).
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import t from 'tap';
import { processSetDelta } from '@capstan/bench/proc-cpu';
import { ROOT } from '../helpers/programs.js';
import { PG_URL, postgresOrSkipFile } from '../server/pg.js';

t.test('a process started, ended or living through the window', async (t) => {
  const a = { live: new Map([[10, 5], [11, 2]]), ended: 100 };
  // 10 went on (5 → 7); 11 ended at 3.5 (the parent collected 3.5, 1.5 of it inside the window);
  // 12 started and used 4; 13 started and ended with 0.25.
  const b = { live: new Map([[10, 7], [12, 4]]), ended: 100 + 3.5 + 0.25 };
  t.equal(processSetDelta(a, b), 2 + 1.5 + 4 + 0.25);
  t.equal(processSetDelta(a, a), 0, 'nothing moved');
});

type Sample = { procs: Map<number, { kind: 'backend' | 'shared'; seconds: number }>; ended: number } | null;
const { pgCpuSample, pgCpuDelta } = (await import(pathToFileURL(resolve(ROOT, 'bench/lib/postgres.mjs')).href)) as {
  pgCpuSample: (name: string, url?: string) => Promise<Sample>;
  pgCpuDelta: (a: Sample, b: Sample) => { backend: number; shared: number } | null;
};

t.test("the ingest and fleet benchmarks' samples: backends and shared processes apart", async (t) => {
  const a: Sample = { procs: new Map([[10, { kind: 'backend', seconds: 5 }], [11, { kind: 'backend', seconds: 2 }], [20, { kind: 'shared', seconds: 1 }]]), ended: 50 };
  // Backend 10 went on (+2), 11 closed at 3.5 (+1.5 in the window), 12 opened (+4), the
  // checkpointer (20) went on (+0.5), and a connection opened and closed in the window used 0.25.
  const b: Sample = { procs: new Map([[10, { kind: 'backend', seconds: 7 }], [12, { kind: 'backend', seconds: 4 }], [20, { kind: 'shared', seconds: 1.5 }]]), ended: 50 + 3.5 + 0.25 };
  t.same(pgCpuDelta(a, b), { backend: 7.75, shared: 0.5 });
  t.equal(pgCpuDelta(null, b), null, 'no sample: no figure');
});

t.test('PostgreSQL: a connection closed inside the window is counted', async (t) => {
  if (!(await postgresOrSkipFile(t))) return;
  const name = new URL(PG_URL).pathname.slice(1);
  const before = await pgCpuSample(name, PG_URL);
  t.ok(before, 'the server runs on this machine');
  const c = new pg.Client({ connectionString: PG_URL });
  await c.connect();
  const { rows } = await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  // About half a second of a core in the backend, then the connection closes.
  await c.query('SELECT count(*) FROM generate_series(1, 8000000)');
  await c.end();
  // The postmaster collects its child once the backend has exited.
  for (let i = 0; i < 100 && existsSync(`/proc/${rows[0]!.pid}`); i++) await new Promise((r) => setTimeout(r, 50));
  t.notOk(existsSync(`/proc/${rows[0]!.pid}`), 'the backend has exited');
  const d = pgCpuDelta(before, await pgCpuSample(name, PG_URL));
  t.ok(d && d.backend >= 0.2, `the closed backend's CPU counted: ${d?.backend} s`);
});

type Wal = { wal_records: number; wal_fpi: number; wal_bytes: number; checkpoints_timed: number; checkpoints_req: number; buffers_backend: number };
const { pgWalSample, pgWalDelta, pgSettings } = (await import(pathToFileURL(resolve(ROOT, 'bench/lib/postgres.mjs')).href)) as {
  pgWalSample: (url?: string) => Promise<Wal>;
  pgWalDelta: (a: Wal | null, b: Wal | null) => Wal | null;
  pgSettings: (url?: string) => Promise<Record<string, string>>;
};

t.test("PostgreSQL: the fleet run's WAL figures and the settings it reports", async (t) => {
  if (!(await postgresOrSkipFile(t))) return;
  const settings = await pgSettings(PG_URL);
  t.same(Object.keys(settings).sort(), ['autovacuum', 'checkpoint_timeout', 'max_wal_size', 'shared_buffers', 'synchronous_commit', 'wal_compression']);
  t.match(settings.shared_buffers, /^\d+ MB$/, `sizes in MB: shared_buffers ${settings.shared_buffers}`);
  const before = await pgWalSample(PG_URL);
  // About 4 MB of rows written and committed in a table of its own, dropped after.
  const table = `capstan_wal_${process.pid}`;
  const c = new pg.Client({ connectionString: PG_URL });
  await c.connect();
  try {
    await c.query(`CREATE TABLE ${table} (x text)`);
    await c.query(`INSERT INTO ${table} SELECT repeat('x', 100) FROM generate_series(1, 30000)`);
  } finally {
    await c.query(`DROP TABLE IF EXISTS ${table}`).catch(() => undefined);
    await c.end();
  }
  const d = pgWalDelta(before, await pgWalSample(PG_URL));
  t.ok(d && d.wal_bytes >= 3_000_000 && d.wal_records >= 30_000, `the rows' WAL counted: ${d?.wal_bytes} bytes, ${d?.wal_records} records`);
  t.equal(pgWalDelta(null, before), null, 'no sample: no figure');
});
