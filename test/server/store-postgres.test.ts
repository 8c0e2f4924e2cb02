/**
 * The registry suite on PostgreSQL, the store's own half (the other half is in
 * store-postgres-registry.test.ts). Every test gets its own schema (capstan_test_<random>),
 * dropped in teardown, so parallel test files and reruns never see each other's rows. Without
 * a reachable server the whole file is skipped with the reason, so machines without
 * PostgreSQL still pass. CAPSTAN_TEST_PG_URL points it elsewhere.
 */
import t from 'tap';
import { openRegistry } from '@capstan/server/registry/open';
import { run } from './store-suite.js';
import { postgresBackend, registryStoreSuites } from './backends.js';
import { pgAdmin, postgresOrSkipFile, PG_URL } from './pg.js';
import { EVENTS_LOCK_KEY } from '@capstan/server/store/events/rows';
import { waitFor } from '../helpers/programs.js';
import pg from 'pg';

const url = PG_URL;
const admin = pgAdmin;

if (await postgresOrSkipFile(t)) {
  const backend = postgresBackend();
  registryStoreSuites(t, backend, 1);

  t.test('runs are partitioned by day: partitions are made ahead, expired days are dropped whole', async (t) => {
    const db = await backend.fresh(t);
    const store = await db.open();
    const schema = db.schema!;
    const partitions = async () => (await admin((c) => c.query<{ name: string }>(
      "SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'runs'::regclass ORDER BY 1"), schema)).rows.map((r) => r.name);
    t.same(await partitions(), ['runs_default']);
    await store.prepareRunStorage(new Date('2024-05-02T22:00:00Z'));
    t.same(await partitions(), ['runs_default', 'runs_p20240502', 'runs_p20240503', 'runs_p20240504']);
    await store.createNode({ id: 'n1', hostname: 'h' });
    await store.insertRun(run('n1', '2024-05-02T10:00:00Z'));
    await store.insertRun(run('n1', '2024-05-06T10:00:00Z'));
    const where = async () => (await admin((c) => c.query<{ p: string }>('SELECT tableoid::regclass::text AS p FROM runs ORDER BY started_at_utc'), schema)).rows.map((r) => r.p);
    t.same(await where(), ['runs_p20240502', 'runs_default']);
    t.equal(await store.deleteRunsBefore('2024-05-04T00:00:00Z', 100), 1);
    t.same(await partitions(), ['runs_default', 'runs_p20240504'], 'two expired days dropped, the empty one too');
    // A day whose runs already sit in the default partition gets none; nothing fails.
    await store.prepareRunStorage(new Date('2024-05-06T01:00:00Z'));
    t.same(await partitions(), ['runs_default', 'runs_p20240504', 'runs_p20240507', 'runs_p20240508']);
    t.same(await where(), ['runs_default']);
  });

  t.test('an event gets its id once it holds the events lock, so ids follow the order of commits', async (t) => {
    const db = await backend.fresh(t);
    const store = await db.open();
    const schema = db.schema!;
    const other = new pg.Client({ connectionString: PG_URL, options: `-c search_path=${schema}` });
    await other.connect();
    t.teardown(() => other.end());
    // Another writer holds the lock and has not taken its id yet.
    const otherPid = Number((await other.query('SELECT pg_backend_pid() AS pid')).rows[0].pid);
    await other.query('BEGIN');
    await other.query('SELECT pg_advisory_xact_lock($1)', [EVENTS_LOCK_KEY]);
    let settled = false;
    const ours = store.insertEvents([{ at: '2024-05-02T10:00:00Z', type: 'node.accepted', severity: 'info', node_id: 'n1', data: {} }])
      .finally(() => { settled = true; });
    // An insert of events this holder blocks: the store's (the lock is one per database, so a
    // writer of another test could match too; the test is then weaker, never wrong).
    await waitFor(async () => (await admin((c) => c.query(
      "SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)) AND query LIKE '%INSERT INTO events%'", [otherPid]))).rowCount || undefined,
      'the store waiting on the events lock');
    t.notOk(settled, 'the write waits for the lock');
    const { rows } = await other.query<{ id: string }>(
      "INSERT INTO events (at, type, severity, node_id, data) VALUES (now(), 'node.deleted', 'info', 'n2', '{}') RETURNING id");
    await other.query('COMMIT');
    const [id] = await ours;
    t.ok(id! > Number(rows[0]!.id), `the waiting write's id (${id}) comes after the holder's (${rows[0]!.id})`);
    t.same((await store.listEvents({ after: 0 }, 10)).map((e) => e.node_id), ['n2', 'n1'], 'read in the order they committed');
  });

  t.test('a bad schema name is a configuration error', async (t) => {
    await t.rejects(openRegistry({ databaseUrl: url, schema: 'x; DROP TABLE nodes' }), { code: 'ERR_CONFIG' });
  });

  t.test('an unreachable database is a transient ERR_STORE', async (t) => {
    await t.rejects(openRegistry({ databaseUrl: 'postgres://postgres@127.0.0.1:1/none', schema: 'capstan_test_none' }),
      { code: 'ERR_STORE', transient: true });
  });
}
