/**
 * The two registry backends for the providers' store suite: a SQLite file per test, and a
 * PostgreSQL schema per test (dropped in teardown) when a server answers at CAPSTAN_TEST_PG_URL
 * (default postgres://postgres@127.0.0.1:5432/test). Not named `.test.ts`.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import pg from 'pg';
import { requiredInCi, programDir } from '../helpers/programs.js';
import { type Store } from '@capstan/server/store/index';
import { openRegistry } from '@capstan/server/registry/open';

export type Open = (t: Test, opts?: { now?: () => Date }) => Promise<Store>;

export const sqliteBackend: Open = async (t, opts = {}) => {
  // Its own temp dir: programDir(t) would empty the test's fixture dir on a second call.
  const dir = mkdtempSync(join(tmpdir(), 'capstan-providers-'));
  const store = await openRegistry({ sqlitePath: join(dir, 'capstan.db'), ...opts });
  t.teardown(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return store;
};

const url = process.env.CAPSTAN_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** The PostgreSQL backend, or the reason it is unavailable. */
export async function postgresBackend(): Promise<Open | string> {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  try {
    await c.connect();
    await c.query('SELECT 1');
  } catch (err) {
    return requiredInCi(`PostgreSQL unavailable: ${(err as Error).message}`, '.ci/run starts the local cluster') as string;
  } finally {
    await c.end().catch(() => undefined);
  }
  return async (t, opts = {}) => {
    const schema = `capstan_test_${randomBytes(6).toString('hex')}`;
    const store = await openRegistry({ databaseUrl: url, schema, poolSize: 4, ...opts });
    t.teardown(async () => {
      await store.close();
      const a = new pg.Client({ connectionString: url });
      await a.connect();
      try {
        await a.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      } finally {
        await a.end();
      }
    });
    return store;
  };
}
