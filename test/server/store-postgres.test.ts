/**
 * The registry suite on PostgreSQL. Every test gets its own schema (capstan_test_<random>),
 * dropped in teardown, so parallel test files and reruns never see each other's rows. Without
 * a reachable server the whole file is skipped with the reason, so machines without
 * PostgreSQL still pass. CAPSTAN_TEST_PG_URL points it elsewhere.
 */
import { randomBytes } from 'node:crypto';
import t from 'tap';
import pg from 'pg';
import { openStore, type Store } from '@capstan/server/store/index';
import { storeSuite } from './store-suite.js';

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
  const why = `PostgreSQL unavailable at ${shown(url)}: ${reason}`;
  console.log(`# SKIP ${why}`);
  t.plan(0, why);
} else {
  storeSuite(t, {
    async fresh(t) {
      const schema = `capstan_test_${randomBytes(6).toString('hex')}`;
      const stores: Store[] = [];
      t.teardown(async () => {
        for (const s of stores) await s.close();
        await admin((c) => c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`));
      });
      return {
        async open(opts = {}) {
          const s = await openStore({ databaseUrl: url, schema, poolSize: 4, ...opts });
          stores.push(s);
          return s;
        },
        async exec(sql) {
          await admin((c) => c.query(sql), schema);
        },
      };
    },
  });

  t.test('a bad schema name is a configuration error', async (t) => {
    await t.rejects(openStore({ databaseUrl: url, schema: 'x; DROP TABLE nodes' }), { code: 'ERR_CONFIG' });
  });

  t.test('an unreachable database is a transient ERR_STORE', async (t) => {
    await t.rejects(openStore({ databaseUrl: 'postgres://postgres@127.0.0.1:1/none', schema: 'capstan_test_none' }),
      { code: 'ERR_STORE', transient: true });
  });
}
