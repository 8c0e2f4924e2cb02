/**
 * The server's registry store, as the benchmarks use it. Every benchmark reaches the store through
 * this file, so a move of the store's files inside the server changes one file here. The
 * databases the benchmarks fill are made here too: a fresh one at the current schema for each
 * run, gone afterwards, so no run measures what a previous one left.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { type Store } from '@capstan/server/store/index';
import { openRegistry } from '@capstan/server/registry/open';

export { openRegistry } from '@capstan/server/registry/open';
export { type ChangeQuery, type NodeFilter, type NodeListQuery, type Store } from '@capstan/server/store/index';
export { NODE_COLUMNS } from '@capstan/server/store/nodes/records';
export { packOutcomes } from '@capstan/server/store/runs/outcomes';

/** An SQLite database at the current schema (`path`, in the temporary `dir`), removed after `fn`. */
export async function withSqlite<T>(prefix: string, fn: (path: string, dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  try {
    const path = join(dir, 'capstan.db');
    await (await openRegistry({ sqlitePath: path })).close();
    return await fn(path, dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The store on an SQLite database loaded behind its back (in bulk), closed after `fn`. */
export async function withSqliteStore<T>(path: string, fn: (store: Store) => Promise<T>): Promise<T> {
  const store = await openRegistry({ sqlitePath: path });
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

/**
 * A PostgreSQL schema of its own, at the current schema: the store on it, and a client whose
 * search_path is that schema, to load it in bulk. Dropped after `fn`.
 */
export async function withPostgres<T>(
  databaseUrl: string,
  o: { schemaPrefix: string; poolSize: number },
  fn: (store: Store, admin: pg.Client, schema: string) => Promise<T>,
): Promise<T> {
  const schema = `${o.schemaPrefix}${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: databaseUrl });
  await admin.connect();
  try {
    const store = await openRegistry({ databaseUrl, schema, poolSize: o.poolSize });
    try {
      await admin.query(`SET search_path = ${schema}`);
      return await fn(store, admin, schema);
    } finally {
      await store.close();
    }
  } finally {
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined);
    await admin.end();
  }
}
