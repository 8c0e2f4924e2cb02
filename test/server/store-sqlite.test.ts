// The registry suite on the embedded backend: one SQLite file per test in programDir(t).
import { join } from 'node:path';
import t from 'tap';
import Database from 'better-sqlite3';
import { openRegistry } from '@capstan/server/registry/open';
import { registryStoreSuites, sqliteBackend } from './backends.js';
import { programDir } from '../helpers/programs.js';

const backend = sqliteBackend;
registryStoreSuites(t, backend);

t.test('the database file is in WAL mode, so readers never wait for the ingest', async (t) => {
  const path = join(programDir(t), 'capstan.db');
  const store = await openRegistry({ sqlitePath: path });
  t.teardown(() => store.close());
  const db = new Database(path, { readonly: true });
  t.teardown(() => db.close());
  t.equal(db.pragma('journal_mode', { simple: true }), 'wal');
});

t.test('a path that cannot be opened is a start-up error', async (t) => {
  await t.rejects(openRegistry({ sqlitePath: join(programDir(t), 'missing', 'dir', 'capstan.db') }), { code: 'ERR_STARTUP' });
  await t.rejects(openRegistry({}), { code: 'ERR_CONFIG' });
});
