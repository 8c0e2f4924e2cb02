/**
 * The two stores the store suites run on: SQLite in the test's temporary directory, and
 * PostgreSQL in a schema of its own (`<prefix>_<random>`, dropped in teardown), so parallel test
 * files and reruns never see each other's rows. (Not a .test.ts: a helper.)
 *
 * Migrating a new SQLite database from nothing costs ~0.2 s: sqliteTemplateBackend migrates one
 * file per test file and gives each test using setup() a copy of it (a file copy is the database
 * block for block: tables, triggers and rows are what the migrations left); fresh() still gives an
 * empty database, which the migration tests migrate for real. (On PostgreSQL, CREATE DATABASE …
 * TEMPLATE copies were no faster over the whole suite than a schema migrated per test: dropping a
 * database forces a checkpoint, which every other test file waits on.)
 */
import { randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import tap from 'tap';
import type { Store } from '@capstan/server/store/index';
import { openRegistry } from '@capstan/server/registry/open';
import { programDir } from '../helpers/programs.js';
import { pgAdmin, PG_URL } from './pg.js';
import { registrySuite } from './registry-suite.js';
import { identitySuite } from './identity-store-suite.js';
import { adminsStoreSuite } from './admins-store-suite.js';
import { jobsStoreSuite } from '../jobs/jobs-store-suite.js';
import { bootstrapStoreSuite } from '../jobs/bootstrap-store-suite.js';
import { storeSuite, type Backend, type Db } from './store-suite.js';

/** Closes every store a test opened, at its end. */
function opened(t: { teardown(fn: () => unknown): void }, after?: () => Promise<unknown>) {
  const stores: Store[] = [];
  t.teardown(async () => {
    for (const s of stores) await s.close();
    await after?.();
  });
  return (s: Store) => {
    stores.push(s);
    return s;
  };
}

/**
 * Each test's directory, made once: making it again (t.testdir) empties it, and a test that
 * sets up two stores would have the first one's file deleted under it.
 */
const testDirs = new WeakMap<object, string>();
let databases = 0;

function sqliteDb(t: Parameters<Backend['fresh']>[0], path: string): Db {
  const keep = opened(t);
  return {
    dialect: 'sqlite',
    open: async (opts = {}) => keep(await openRegistry({ sqlitePath: path, ...opts })),
    async exec(sql) {
      const db = new Database(path);
      try {
        db.exec(sql);
      } finally {
        db.close();
      }
    },
    async rows(sql) {
      const db = new Database(path, { readonly: true });
      try {
        return db.prepare(sql).all() as Array<Record<string, unknown>>;
      } finally {
        db.close();
      }
    },
  };
}

/** A path for one more database file in t's directory. */
function sqlitePath(t: Parameters<Backend['fresh']>[0]): string {
  let dir = testDirs.get(t);
  if (dir === undefined) testDirs.set(t, (dir = programDir(t)));
  return join(dir, `capstan-${++databases}.db`);
}

export const sqliteBackend: Backend = {
  fresh: async (t) => sqliteDb(t, sqlitePath(t)),
};

let sqliteMigrated: Promise<string> | undefined;

/**
 * A database file migrated once for the whole file by the store itself, closed (its WAL folded
 * in), removed when the file's tests end: copied, it is a database as a first open leaves it.
 */
export function sqliteTemplate(): Promise<string> {
  sqliteMigrated ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), 'capstan-template-'));
    tap.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const path = join(dir, 'migrated.db');
    await (await openRegistry({ sqlitePath: path })).close();
    return path;
  })();
  return sqliteMigrated;
}

/** A copy of the file sqliteTemplate() made, at `path` (with its WAL, were one left). */
export async function copySqliteTemplate(path: string): Promise<void> {
  const from = await sqliteTemplate();
  for (const suffix of ['-wal', '-shm']) if (existsSync(from + suffix)) copyFileSync(from + suffix, path + suffix);
  copyFileSync(from, path);
}

/** SQLite whose setup() starts from a copy of one migrated file (see the top of this file). */
export const sqliteTemplateBackend: Backend = {
  ...sqliteBackend,
  async migrated(t) {
    const path = sqlitePath(t);
    await copySqliteTemplate(path);
    return sqliteDb(t, path);
  },
};

export function postgresBackend(prefix = 'capstan_test'): Backend {
  return {
    async fresh(t) {
      const schema = `${prefix}_${randomBytes(6).toString('hex')}`;
      const keep = opened(t, () => pgAdmin((c) => c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)));
      return {
        dialect: 'postgres',
        schema,
        open: async (opts = {}) => keep(await openRegistry({ databaseUrl: PG_URL, schema, poolSize: 4, ...opts })),
        async exec(sql) {
          // A test may write before any store created the schema (a database of an older version).
          await pgAdmin((c) => c.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`));
          await pgAdmin((c) => c.query(sql), schema);
        },
        rows: async (sql) => pgAdmin(async (c) => (await c.query(sql)).rows as Array<Record<string, unknown>>, schema),
      };
    },
  };
}

/**
 * The registry's store suites, run whole on one backend: the same tests on both stores. `part`
 * runs one half of them (1: the store's own suite, 2: the rest), so the slower PostgreSQL run
 * can be two test files that run side by side.
 */
export function registryStoreSuites(t: Parameters<typeof storeSuite>[0], backend: Backend, part?: 1 | 2): void {
  if (part !== 2) storeSuite(t, backend);
  if (part === 1) return;
  registrySuite(t, backend);
  identitySuite(t, backend);
  adminsStoreSuite(t, backend);
  jobsStoreSuite(t, backend);
  bootstrapStoreSuite(t, backend);
}
