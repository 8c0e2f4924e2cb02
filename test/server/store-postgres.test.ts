/**
 * The registry suite on PostgreSQL. Every test gets its own schema (capstan_test_<random>),
 * dropped in teardown, so parallel test files and reruns never see each other's rows. Without
 * a reachable server the whole file is skipped with the reason, so machines without
 * PostgreSQL still pass. CAPSTAN_TEST_PG_URL points it elsewhere.
 */
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { requiredInCi } from '../helpers/programs.js';
import pg from 'pg';
import { type Store } from '@capstan/server/store/index';
import { openRegistry } from '@capstan/server/registry/open';
import { registrySuite } from './registry-suite.js';
import { identitySuite } from './identity-store-suite.js';
import { adminsStoreSuite } from './admins-store-suite.js';
import { jobsStoreSuite } from '../jobs/jobs-store-suite.js';
import { bootstrapStoreSuite } from '../jobs/bootstrap-store-suite.js';
import { run, storeSuite, type Backend } from './store-suite.js';

const url = process.env.CAPSTAN_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** The URL without its password, for messages. */
function shown(u: string): string {
  try {
    const parsed = new URL(u);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '(unparsable url)';
  }
}

async function unreachable(): Promise<string | undefined> {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  try {
    await c.connect();
    await c.query('SELECT 1');
    return undefined;
  } catch (err) {
    return (err as Error).message || String(err);
  } finally {
    await c.end().catch(() => undefined);
  }
}

async function admin<T>(fn: (c: pg.Client) => Promise<T>, schema?: string): Promise<T> {
  const c = new pg.Client({ connectionString: url, ...(schema ? { options: `-c search_path=${schema}` } : {}) });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

const reason = await unreachable();
if (reason !== undefined) {
  const why = requiredInCi(`PostgreSQL unavailable at ${shown(url)}: ${reason}`, '.ci/run starts the local cluster') as string;
  console.log(`# SKIP ${why}`);
  t.plan(0, why);
} else {
  const backend: Backend = {
    async fresh(t) {
      const schema = `capstan_test_${randomBytes(6).toString('hex')}`;
      const stores: Store[] = [];
      t.teardown(async () => {
        for (const s of stores) await s.close();
        await admin((c) => c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`));
      });
      return {
        dialect: 'postgres',
        schema,
        async open(opts = {}) {
          const s = await openRegistry({ databaseUrl: url, schema, poolSize: 4, ...opts });
          stores.push(s);
          return s;
        },
        async exec(sql) {
          // A test may write before any store created the schema (a database of an older version).
          await admin((c) => c.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`));
          await admin((c) => c.query(sql), schema);
        },
      };
    },
  };
  storeSuite(t, backend);
  registrySuite(t, backend);
  identitySuite(t, backend);
  adminsStoreSuite(t, backend);
  jobsStoreSuite(t, backend);
  bootstrapStoreSuite(t, backend);

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

  t.test('a bad schema name is a configuration error', async (t) => {
    await t.rejects(openRegistry({ databaseUrl: url, schema: 'x; DROP TABLE nodes' }), { code: 'ERR_CONFIG' });
  });

  t.test('an unreachable database is a transient ERR_STORE', async (t) => {
    await t.rejects(openRegistry({ databaseUrl: 'postgres://postgres@127.0.0.1:1/none', schema: 'capstan_test_none' }),
      { code: 'ERR_STORE', transient: true });
  });
}
