// @ts-check
/**
 * PostgreSQL for the benchmarks: the same server the test suite uses (CAPSTAN_BENCH_PG_URL, else
 * CAPSTAN_TEST_PG_URL, else postgres://postgres@127.0.0.1:5432/test), a fresh database or schema
 * per measurement, dropped afterwards. Unreachable → the PostgreSQL figures say why they are missing.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';

export const PG_URL = process.env.CAPSTAN_BENCH_PG_URL ?? process.env.CAPSTAN_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** @param {string} url */
export function shown(url) {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparsable url)';
  }
}

/**
 * @template T
 * @param {string} url
 * @param {(c: pg.Client) => Promise<T>} fn
 */
async function withClient(url, fn) {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end().catch(() => undefined);
  }
}

/** null when reachable, else the reason. @param {string} url */
export async function pgUnavailable(url = PG_URL) {
  try {
    await withClient(url, (c) => c.query('SELECT 1'));
    return null;
  } catch (err) {
    return `PostgreSQL unavailable at ${shown(url)}: ${/** @type {Error} */ (err).message || String(err)}`;
  }
}

/** @param {string} url */
export async function pgVersion(url = PG_URL) {
  return withClient(url, async (c) => String((await c.query('SHOW server_version')).rows[0].server_version));
}

/**
 * Write out what PostgreSQL still holds dirty (a checkpoint), so that the next benchmark's fsyncs
 * do not compete with the previous one's deferred writes. Errors are ignored: it only helps.
 * @param {string} url
 */
export async function pgCheckpoint(url = PG_URL) {
  await withClient(url, (c) => c.query('CHECKPOINT')).catch(() => undefined);
}

/** A new empty database (for a server process, which takes a URL and uses its default schema). */
export async function freshDatabase(url = PG_URL) {
  const name = `capstan_bench_${randomBytes(6).toString('hex')}`;
  await withClient(url, (c) => c.query(`CREATE DATABASE ${name}`));
  const u = new URL(url);
  u.pathname = `/${name}`;
  return {
    url: u.toString(),
    name,
    drop: () => withClient(url, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => undefined),
  };
}

/** A schema name for an in-process store (openRegistry creates it), dropped afterwards. */
export function freshSchema(url = PG_URL) {
  const schema = `capstan_bench_${randomBytes(6).toString('hex')}`;
  return {
    schema,
    drop: () => withClient(url, (c) => c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)).then(() => undefined),
  };
}
