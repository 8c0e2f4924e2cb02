/**
 * The findings, events and outbox suite (findings-suite.ts) on both stores: a SQLite file per
 * test, and a PostgreSQL schema per test (dropped in teardown) when a server answers at
 * CAPSTAN_TEST_PG_URL, else skipped with the reason (in CI it must answer). A file of its own, so
 * that the registry's store files keep within the per-file time limit.
 */
import t from 'tap';
import { postgresBackend, sqliteBackend } from './backends.js';
import { findingsSuite } from './findings-suite.js';
import { pgUnavailable } from './pg.js';

t.test('SQLite', async (t) => findingsSuite(t, sqliteBackend));

t.test('PostgreSQL', async (t) => {
  const why = await pgUnavailable();
  if (why) return t.plan(0, why);
  findingsSuite(t, postgresBackend('capstan_findings'));
});
