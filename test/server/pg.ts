/**
 * PostgreSQL for server tests that start real programs: one schema per test (dropped in
 * teardown), selected through the URL's `options`, so a server process needs no extra flag.
 * Without a reachable server the caller skips with the reason. CAPSTAN_TEST_PG_URL points it
 * elsewhere. (Not a .test.ts: a helper.)
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { Test } from 'tap';
import { requiredInCi } from '../helpers/programs.js';

export const PG_URL = process.env.CAPSTAN_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/**
 * Why PostgreSQL cannot be used here, or undefined when it can. In CI (`CI=true`) an unreachable
 * PostgreSQL throws instead: the store suite's second half is a contract, not an option there.
 */
export async function pgUnavailable(): Promise<string | undefined> {
  const c = new pg.Client({ connectionString: PG_URL, connectionTimeoutMillis: 3000 });
  let why: string | undefined;
  try {
    await c.connect();
    await c.query('SELECT 1');
  } catch (err) {
    why = `PostgreSQL unavailable at ${PG_URL.replace(/\/\/[^@]*@/, '//')}: ${(err as Error).message || String(err)}`;
  } finally {
    await c.end().catch(() => undefined);
  }
  return requiredInCi(why ?? false, '.ci/run starts the local cluster') || undefined;
}

/**
 * For a file whose every test needs PostgreSQL: true when it can run; else the file is planned
 * empty with the reason, printed (in CI pgUnavailable throws instead).
 */
export async function postgresOrSkipFile(t: Test): Promise<boolean> {
  const why = await pgUnavailable();
  if (why === undefined) return true;
  console.log(`# SKIP ${why}`);
  t.plan(0, why);
  return false;
}

/** A client of its own for `fn`, in `schema` when one is named. */
export async function pgAdmin<T>(fn: (c: pg.Client) => Promise<T>, schema?: string): Promise<T> {
  const c = new pg.Client({ connectionString: PG_URL, ...(schema ? { options: `-c search_path=${schema}` } : {}) });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** A fresh schema and the database URL that selects it. */
export async function freshSchemaUrl(t: Test): Promise<string> {
  const schema = `capstan_e2e_${randomBytes(6).toString('hex')}`;
  await pgAdmin((c) => c.query(`CREATE SCHEMA ${schema}`));
  t.teardown(() => pgAdmin((c) => c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)));
  const u = new URL(PG_URL);
  u.searchParams.set('options', `-c search_path=${schema}`);
  return u.toString();
}
