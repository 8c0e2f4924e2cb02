// The managers store suite on SQLite, and on PostgreSQL when one answers (else skipped with the reason).
import t from 'tap';
import { postgresBackend, sqliteBackend } from './backends.js';
import { managersStoreSuite } from './managers-store-suite.js';

t.test('sqlite', async (t) => managersStoreSuite(t, sqliteBackend));
const pg = await postgresBackend();
if (typeof pg === 'string') {
  console.log(`# SKIP postgres: ${pg}`);
  t.test('postgres', { skip: pg }, async () => undefined);
} else {
  t.test('postgres', async (t) => managersStoreSuite(t, pg));
}
