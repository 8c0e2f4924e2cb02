/**
 * The two stores the store suites run on: SQLite in the test's temporary directory, and
 * PostgreSQL in a schema of its own (`<prefix>_<random>`, dropped in teardown), so parallel test
 * files and reruns never see each other's rows. (Not a .test.ts: a helper.)
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import type { Store } from '@capstan/server/store/index';
import { openRegistry } from '@capstan/server/registry/open';
import { programDir } from '../helpers/programs.js';
import { pgAdmin, PG_URL } from './pg.js';
import { registrySuite } from './registry-suite.js';
import { identitySuite } from './identity-store-suite.js';
import { adminsStoreSuite } from './admins-store-suite.js';
import { jobsStoreSuite } from '../jobs/jobs-store-suite.js';
import { bootstrapStoreSuite } from '../jobs/bootstrap-store-suite.js';
import { storeSuite, type Backend } from './store-suite.js';

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

export const sqliteBackend: Backend = {
  async fresh(t) {
    let dir = testDirs.get(t);
    if (dir === undefined) testDirs.set(t, (dir = programDir(t)));
    const path = join(dir, `capstan-${++databases}.db`);
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
