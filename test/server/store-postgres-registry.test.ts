/**
 * The registry suite on PostgreSQL, its second half: registry, identity, admins, jobs and
 * bootstrap records (store-postgres.test.ts runs the store's own suite). Every test gets its own
 * schema, dropped in teardown; without a reachable server the file is skipped with the reason.
 */
import t from 'tap';
import { postgresBackend, registryStoreSuites } from './backends.js';
import { postgresOrSkipFile } from './pg.js';

if (await postgresOrSkipFile(t)) registryStoreSuites(t, postgresBackend(), 2);
