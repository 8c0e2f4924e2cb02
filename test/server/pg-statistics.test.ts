/**
 * Planner statistics after bulk writes on PostgreSQL (store/postgres/statistics.ts): a table
 * whose rows changed past the threshold is analysed, one below it is not, nor a kept counters'
 * log; with the defaults a table is analysed again once it has doubled; checks are spaced by the
 * interval, never two at once, off at 0; a failure is told and does not throw; FOLDED_LOGS names
 * every log the migrations make. And policy_bundles is sampled with a statistics target of 10
 * (migration 35).
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import t from 'tap';
import { ANALYZE_DEFAULTS, FOLDED_LOGS, TableStatistics } from '@capstan/server/store/postgres/statistics';
import { PG_URL, pgAdmin, postgresOrSkipFile } from './pg.js';
import { postgresBackend } from './backends.js';

/** A pool stand-in that counts its listings and ANALYZEs, and answers the listing with `due`. */
function fakePool(due: string[], o: { fail?: boolean; lockTaken?: boolean } = {}) {
  const seen: string[] = [];
  let release: () => void = () => undefined;
  let gate: Promise<void> | null = null;
  const query = async (text: string) => {
    if (text.includes('pg_try_advisory_lock')) return { rows: [{ ok: !o.lockTaken }] };
    if (text.includes('pg_advisory_unlock')) return { rows: [] };
    seen.push(text.startsWith('ANALYZE') ? text : 'list');
    if (gate) await gate;
    if (o.fail) throw new Error('connection refused');
    return { rows: text.startsWith('ANALYZE') ? [] : due.map((relname) => ({ relname })) };
  };
  return {
    seen,
    hold() {
      gate = new Promise((r) => (release = r));
    },
    release: () => release(),
    async connect() {
      return { query, release: () => undefined };
    },
  };
}

t.test('checks are spaced by the interval, never two at once, and off at 0', async (t) => {
  let now = 0;
  const pool = fakePool(['policy_group_members']);
  const stats = new TableStatistics(pool as unknown as pg.Pool, { intervalMs: 2000, minRows: 1000, growthPercent: 10 }, () => now);
  pool.hold();
  stats.wrote();
  stats.wrote();
  now = 5000;
  stats.wrote(); // the first is still running
  for (let i = 0; i < 10 && pool.seen.length === 0; i++) await new Promise((r) => setImmediate(r));
  t.same(pool.seen, ['list'], 'one check while one runs');
  pool.release();
  await stats.idle();
  t.same(pool.seen, ['list', 'ANALYZE "policy_group_members"'], 'the table listed is analysed');

  const spaced = fakePool([]);
  const s2 = new TableStatistics(spaced as unknown as pg.Pool, { intervalMs: 2000, minRows: 1000, growthPercent: 10 }, () => now);
  now = 10_000;
  s2.wrote();
  await s2.check();
  now = 11_000;
  s2.wrote();
  t.equal(spaced.seen.filter((q) => q === 'list').length, 2, 'a write 1 s after a check starts none (the second is check() called directly)');
  now = 12_001;
  s2.wrote();
  await s2.stop();
  t.equal(spaced.seen.filter((q) => q === 'list').length, 3, 'one 2 s after does');

  const off = fakePool(['nodes']);
  const s3 = new TableStatistics(off as unknown as pg.Pool, { intervalMs: 0, minRows: 1000, growthPercent: 10 }, () => now);
  s3.wrote();
  await s3.stop();
  t.same(off.seen, [], 'interval 0: never');

  const busy = fakePool(['nodes'], { lockTaken: true });
  t.same(await new TableStatistics(busy as unknown as pg.Pool, { intervalMs: 1, minRows: 0, growthPercent: 0 }).check(), []);
  t.same(busy.seen, [], 'another server holding the lock: this one skips its check');
});

t.test('a failed check is told and thrown at nobody', async (t) => {
  const told: string[] = [];
  const stats = new TableStatistics(fakePool([], { fail: true }) as unknown as pg.Pool, { intervalMs: 1, minRows: 0, growthPercent: 0, onError: (m) => told.push(m) });
  t.same(await stats.check(), []);
  t.match(told, [/not brought up to date/]);
});

t.test('PostgreSQL: the table grown past the threshold is analysed, the other is not', async (t) => {
  if (!(await postgresOrSkipFile(t))) return;
  const schema = `capstan_stats_${randomBytes(6).toString('hex')}`;
  await pgAdmin((c) => c.query(`CREATE SCHEMA ${schema}`));
  t.teardown(() => pgAdmin((c) => c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)));
  const pool = new pg.Pool({ connectionString: PG_URL, max: 2, options: `-c search_path=${schema}` });
  t.teardown(() => pool.end());
  // kept_rules_log: one of the kept counters' logs, read whole and emptied by each fold.
  await pool.query('CREATE TABLE grown (n integer PRIMARY KEY); CREATE TABLE small (n integer PRIMARY KEY); CREATE TABLE kept_rules_log (n integer); ANALYZE grown; ANALYZE small; ANALYZE kept_rules_log');
  const analyses = async () => Object.fromEntries((await pool.query<{ relname: string; n: string }>(
    'SELECT relname, analyze_count AS n FROM pg_stat_user_tables WHERE schemaname = current_schema()')).rows.map((r) => [r.relname, Number(r.n)]));
  const before = await analyses();
  // Counters reach pg_stat_user_tables when a connection flushes them: each statement here is
  // made to flush them at its transaction's end.
  const flushed = (...statements: string[]) => pgAdmin(async (c) => {
    for (const sql of statements) {
      await c.query('SELECT pg_stat_force_next_flush()');
      await c.query(sql);
    }
  }, schema);
  await flushed('INSERT INTO grown SELECT generate_series(1, 5000)', 'INSERT INTO small SELECT generate_series(1, 10)', 'INSERT INTO kept_rules_log SELECT generate_series(1, 5000)');
  const stats = new TableStatistics(pool, { intervalMs: 1, minRows: 1000, growthPercent: 10 });
  let done: string[] = [];
  for (let i = 0; i < 100 && !done.includes('grown'); i++) {
    done = await stats.check();
    if (!done.includes('grown')) await new Promise((r) => setTimeout(r, 100));
  }
  t.same(done, ['grown'], 'only the grown table, once its counters were flushed');
  const after = await analyses();
  t.equal(after.grown, before.grown! + 1, 'grown analysed once');
  t.equal(after.small, before.small, 'small left alone');
  t.equal(after.kept_rules_log, before.kept_rules_log, 'a kept counters\' log grown as much left alone');
  t.same(await stats.check(), [], 'nothing is due right after');
  // Rows rewritten in place move no count: no ANALYZE for them.
  await flushed('UPDATE grown SET n = n + 100000');
  const updated = async () => Number((await pool.query("SELECT n_tup_upd FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname = 'grown'")).rows[0]?.n_tup_upd ?? 0);
  for (let i = 0; i < 100 && (await updated()) < 5000; i++) await new Promise((r) => setTimeout(r, 100));
  t.equal(await updated(), 5000, 'the rewrite is counted where the check looks');
  t.same(await stats.check(), [], 'rewritten rows are not growth');
  t.equal((await analyses()).grown, after.grown, 'grown not analysed again');
  // With the defaults a table is analysed again once it has doubled, not after growing by 80 %.
  const byDefault = new TableStatistics(pool, { ...ANALYZE_DEFAULTS, intervalMs: 1 });
  const inserted = async () => Number((await pool.query("SELECT n_tup_ins FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname = 'grown'")).rows[0]?.n_tup_ins ?? 0);
  await flushed('INSERT INTO grown SELECT generate_series(200001, 204000)');
  for (let i = 0; i < 100 && (await inserted()) < 9000; i++) await new Promise((r) => setTimeout(r, 100));
  t.equal(await inserted(), 9000, 'the 4,000 rows are counted where the check looks');
  t.same(await byDefault.check(), [], '5,000 → 9,000 rows: not due');
  await flushed('INSERT INTO grown SELECT generate_series(300001, 302500)');
  let again: string[] = [];
  for (let i = 0; i < 100 && !again.includes('grown'); i++) {
    again = await byDefault.check();
    if (!again.includes('grown')) await new Promise((r) => setTimeout(r, 100));
  }
  t.same(again, ['grown'], '5,000 → 11,500 rows (past 1,000 + 100 %): analysed');
  t.equal((await analyses()).grown, after.grown! + 1, 'grown analysed once more');
});

t.test('PostgreSQL: policy_bundles is analysed from a small sample', async (t) => {
  if (!(await postgresOrSkipFile(t))) return;
  const db = await postgresBackend('capstan_stats').fresh(t);
  await db.open();
  const rows = await db.rows!("SELECT a.attname, a.attstattarget FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relname = 'policy_bundles' AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum");
  t.same(rows.map((r) => [r.attname, Number(r.attstattarget)]), [['node_id', 10], ['config_id', 10], ['generated_at', 10], ['bundle', 10]], 'every column at 10 (ANALYZE reads 3,000 rows, not 30,000)');
  // Every kept counters' log the migrations make is one the checks leave alone.
  const logs = await db.rows!("SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r' AND relname LIKE 'kept\\_%\\_log' ORDER BY relname");
  t.same(logs.map((r) => String(r.relname)).sort(), [...FOLDED_LOGS].sort(), 'FOLDED_LOGS names every kept_*_log table');
});
