/**
 * The two stores the store suites run on: SQLite in the test's temporary directory, and
 * PostgreSQL in a schema of its own (`<prefix>_<random>`, dropped in teardown), so parallel test
 * files and reruns never see each other's rows. (Not a .test.ts: a helper.)
 *
 * Migrating a new SQLite database from nothing costs ~0.2 s: sqliteTemplateBackend migrates one
 * file per test file and gives each test using setup() a copy of it (a file copy is the database
 * block for block: tables, triggers and rows are what the migrations left); fresh() still gives an
 * empty database, which the migration tests migrate for real.
 *
 * On PostgreSQL a schema migrates in ~0.45 s and drops in ~0.15 s. postgresBackend's setup()
 * reuses instead: after its test a schema whose definitions are still those the migrations made
 * (a digest of them) is emptied back to the rows the migrations seed (DELETE, then pg_dump's
 * INSERTs of the file's first migrated schema) and handed to the next test; any other is dropped.
 * Without pg_dump every schema is migrated and dropped. fresh() is always a new, empty schema.
 * (CREATE DATABASE … TEMPLATE copies were no faster over the whole suite than a schema migrated
 * per test: dropping a database forces a checkpoint, which every other test file waits on. A
 * schema replayed from pg_dump's whole output took 0.3–0.45 s, little less than the migrations.)
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
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

/** A schema's name: `prefix_` and twelve hex digits, so that every name of a prefix has one length. */
const schemaName = (prefix: string) => `${prefix}_${randomBytes(6).toString('hex')}`;

/** `schema` dropped. */
const dropSchema = (schema: string) => pgAdmin((c) => c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`));

/** The Db of `schema` on PostgreSQL; `done` runs when t ends, after its stores closed. */
function pgDb(t: Parameters<Backend['fresh']>[0], schema: string, done: () => Promise<unknown>): Db {
  const keep = opened(t, done);
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
}

/**
 * The rows the migrations seed, as pg_dump writes them (INSERTs and the sequences' values) from
 * the file's first migrated schema `name`; null when pg_dump cannot dump them (then every schema
 * is dropped after its test and each test migrates its own).
 */
let pgSeeds: Promise<{ name: string; sql: string } | null> | undefined;
/** Each schema setup() gave out, with the digest of its definitions as the migrations left them. */
const pgMade = new Map<string, string>();
/** Schemas emptied back to their seeded rows, by prefix, for the next test of this file. */
const pgSpare = new Map<string, string[]>();

/**
 * The definitions of schema $1 as their catalog rows' versions (each row's id and xmin): every
 * DDL statement on the schema (CREATE, ALTER, DROP, CREATE OR REPLACE of a function or a view, a
 * sequence altered, a trigger disabled) writes new versions of those rows, while writing,
 * deleting and analysing rows in its tables does not.
 */
const DIGEST = `WITH r AS (SELECT oid FROM pg_class WHERE relnamespace = $1::regnamespace)
  SELECT md5(string_agg(x, ',' ORDER BY x)) AS digest FROM (
    SELECT concat('c', oid, ':', xmin) FROM pg_class WHERE relnamespace = $1::regnamespace
    UNION ALL SELECT concat('a', attrelid, '.', attnum, ':', xmin) FROM pg_attribute WHERE attrelid IN (SELECT oid FROM r)
    UNION ALL SELECT concat('d', oid, ':', xmin) FROM pg_attrdef WHERE adrelid IN (SELECT oid FROM r)
    UNION ALL SELECT concat('i', indexrelid, ':', xmin) FROM pg_index WHERE indrelid IN (SELECT oid FROM r)
    UNION ALL SELECT concat('k', oid, ':', xmin) FROM pg_constraint WHERE connamespace = $1::regnamespace
    UNION ALL SELECT concat('t', oid, ':', xmin) FROM pg_trigger WHERE tgrelid IN (SELECT oid FROM r)
    UNION ALL SELECT concat('s', seqrelid, ':', xmin) FROM pg_sequence WHERE seqrelid IN (SELECT oid FROM r)
    UNION ALL SELECT concat('v', oid, ':', xmin) FROM pg_rewrite WHERE ev_class IN (SELECT oid FROM r)
    UNION ALL SELECT concat('f', oid, ':', xmin) FROM pg_proc WHERE pronamespace = $1::regnamespace) s(x)`;

/** A schema the store migrates itself, with its digest; the file's first gives the seeded rows. */
async function pgMigrate(schema: string): Promise<void> {
  await (await openRegistry({ databaseUrl: PG_URL, schema, poolSize: 1 })).close();
  pgMade.set(schema, (await pgAdmin((c) => c.query(DIGEST, [schema]))).rows[0].digest as string);
  pgSeeds ??= promisify(execFile)('pg_dump', ['--dbname', PG_URL, '--schema', schema, '--data-only', '--inserts', '--no-owner', '--no-privileges'], {
    encoding: 'utf8', maxBuffer: 64 * 1024 * 1024,
  }).then(
    // pg_dump's \restrict lines are for psql alone.
    ({ stdout }) => ({ name: schema, sql: stdout.replace(/^\\(un)?restrict .*$/gm, '') }),
    (err: Error) => {
      console.log(`# pg_dump could not dump a migrated schema (${err.message.split('\n')[0]}): each test migrates its own`);
      return null;
    },
  );
  await pgSeeds;
}

/**
 * After its test, `schema` emptied back to its seeded rows for the next test of `prefix` when its
 * definitions are those the migrations made; dropped otherwise (a test that changed them, or a
 * lock still held by a store the test did not close).
 */
async function recycle(prefix: string, schema: string): Promise<void> {
  const seeds = await pgSeeds;
  const kept = seeds != null && await pgAdmin(async (c) => {
    if ((await c.query(DIGEST, [schema])).rows[0].digest !== pgMade.get(schema)) return false;
    await c.query(`SET lock_timeout = '5s'`);
    const { rows } = await c.query(`SELECT string_agg(format('DELETE FROM %I.%I', schemaname, tablename), '; ') AS deletes FROM pg_tables WHERE schemaname = $1`, [schema]);
    // DELETE, not TRUNCATE: a TRUNCATE gives every table and index new files, which costs as much
    // as the migrations. Triggers and foreign keys are off for this transaction (replica role),
    // so that no kept counter moves while the rows go and the seeded ones come back.
    await c.query('BEGIN');
    await c.query(`SET LOCAL session_replication_role = replica; ${rows[0].deletes as string}`);
    await c.query(seeds.sql.split(seeds.name).join(schema));
    await c.query('COMMIT');
    return true;
  }).catch(() => false);
  if (kept) pgSpare.set(prefix, [...(pgSpare.get(prefix) ?? []), schema]);
  else {
    pgMade.delete(schema);
    await dropSchema(schema);
  }
}

/** Every spare schema dropped when the file's tests end. */
tap.teardown(async () => {
  const all = [...pgSpare.values()].flat();
  pgSpare.clear();
  if (all.length > 0) await pgAdmin((c) => c.query(`DROP SCHEMA IF EXISTS ${all.join(', ')} CASCADE`));
});

export function postgresBackend(prefix = 'capstan_test'): Backend {
  return {
    async fresh(t) {
      const schema = schemaName(prefix);
      return pgDb(t, schema, () => dropSchema(schema));
    },
    async migrated(t) {
      const schema = pgSpare.get(prefix)?.shift() ?? schemaName(prefix);
      const db = pgDb(t, schema, () => recycle(prefix, schema));
      if (!pgMade.has(schema)) await pgMigrate(schema);
      return db;
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
