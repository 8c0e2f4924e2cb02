/**
 * The findings, events and outbox suite (findings-suite.ts) on both stores: a SQLite file per
 * test, and a PostgreSQL schema per test (dropped in teardown) when a server answers at
 * CAPSTAN_TEST_PG_URL, else skipped with the reason (in CI it must answer). A file of its own, so
 * that the registry's store files keep within the per-file time limit.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import t from 'tap';
import type { Store } from '@capstan/server/store/index';
import { openRegistry } from '@capstan/server/registry/open';
import { programDir } from '../helpers/programs.js';
import { findingsSuite } from './findings-suite.js';
import { pgAdmin, pgUnavailable, PG_URL } from './pg.js';
import type { Backend } from './store-suite.js';

const sqlite: Backend = {
  async fresh(t) {
    const path = join(programDir(t), 'capstan.db');
    const stores: Store[] = [];
    t.teardown(async () => {
      for (const s of stores) await s.close();
    });
    return {
      dialect: 'sqlite',
      async open(opts = {}) {
        const s = await openRegistry({ sqlitePath: path, ...opts });
        stores.push(s);
        return s;
      },
      async exec() {
        throw new Error('not needed here');
      },
    };
  },
};

const postgres: Backend = {
  async fresh(t) {
    const schema = `capstan_findings_${randomBytes(6).toString('hex')}`;
    const stores: Store[] = [];
    t.teardown(async () => {
      for (const s of stores) await s.close();
      await pgAdmin((c) => c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`));
    });
    return {
      dialect: 'postgres',
      schema,
      async open(opts = {}) {
        const s = await openRegistry({ databaseUrl: PG_URL, schema, poolSize: 4, ...opts });
        stores.push(s);
        return s;
      },
      async exec() {
        throw new Error('not needed here');
      },
    };
  },
};

t.test('SQLite', async (t) => findingsSuite(t, sqlite));

t.test('PostgreSQL', async (t) => {
  const why = await pgUnavailable();
  if (why) return t.plan(0, why);
  findingsSuite(t, postgres);
});
