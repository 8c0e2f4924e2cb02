/**
 * The vulnerabilities suite (vulns-store-suite.ts) on both stores: a SQLite file per test, and a
 * PostgreSQL schema per test (dropped in teardown) when a server answers, else skipped with the reason.
 */
import t from 'tap';
import { postgresBackend, sqliteBackend } from './backends.js';
import { pgUnavailable } from './pg.js';
import { vulnsStoreSuite } from './vulns-store-suite.js';

t.test('SQLite', async (t) => vulnsStoreSuite(t, sqliteBackend));

t.test('PostgreSQL', async (t) => {
  const why = await pgUnavailable();
  if (why) return t.plan(0, why);
  vulnsStoreSuite(t, postgresBackend('capstan_vulns'));
});
