/**
 * The SQLite migration runner. Everything happens in one IMMEDIATE transaction: it takes the
 * write lock before reading the version, so two servers starting on one file cannot both apply
 * a migration, and a migration that fails leaves the previous schema intact (SQLite DDL is
 * transactional).
 */
import { capstanError } from '@capstan/shared/errors';
import { LATEST_SCHEMA_VERSION, MIGRATIONS } from '../migrations/index.js';
import type { SqliteDb } from './db.js';

export function migrateSqlite(store: SqliteDb): void {
  const db = store.handle;
  store.write('migrate', () => {
    db.exec('CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL) STRICT');
    const { v } = db.prepare('SELECT coalesce(max(version), 0) AS v FROM schema_version').get() as { v: number };
    if (v > LATEST_SCHEMA_VERSION) {
      // A newer server has been here (and was rolled back?): its data may use columns or
      // meanings this code does not know. Refusing is the only safe answer.
      throw capstanError('ERR_STARTUP', `database schema version ${v} is newer than this server knows (${LATEST_SCHEMA_VERSION}); upgrade the server`);
    }
    const record = db.prepare('INSERT INTO schema_version (version, applied_at) VALUES (?, ?)');
    for (const m of MIGRATIONS) {
      if (m.version <= v) continue;
      db.exec(m.sqlite);
      record.run(m.version, store.now().toISOString());
    }
  });
}
