/**
 * The Postgres migration runner. One transaction (Postgres DDL is transactional) under an
 * advisory lock named after the schema: several server processes starting together on one
 * database serialise here, the first applies what is missing, the others find nothing to do.
 * Without the lock, two concurrent `CREATE TABLE IF NOT EXISTS` can still collide.
 */
import type pg from 'pg';
import { capstanError } from '@capstan/shared/errors';
import { LATEST_SCHEMA_VERSION, MIGRATIONS } from '../migrations/index.js';

export async function migratePostgres(c: pg.PoolClient, schema: string | undefined): Promise<void> {
  await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`capstan.migrate:${schema ?? ''}`]);
  if (schema !== undefined) {
    // Check before creating: CREATE SCHEMA IF NOT EXISTS still needs the CREATE privilege on
    // the database, which a deployment's pre-created schema should not require.
    const ns = await c.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
    if (ns.rowCount === 0) await c.query(`CREATE SCHEMA "${schema}"`);
  }
  await c.query(`CREATE TABLE IF NOT EXISTS schema_version (
    version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`);
  const { rows } = await c.query<{ v: number }>('SELECT coalesce(max(version), 0)::int AS v FROM schema_version');
  const v = rows[0]!.v;
  if (v > LATEST_SCHEMA_VERSION) {
    // Data written by a newer server may use columns or meanings this code does not know.
    throw capstanError('ERR_STARTUP', `database schema version ${v} is newer than this server knows (${LATEST_SCHEMA_VERSION}); upgrade the server`);
  }
  for (const m of MIGRATIONS) {
    if (m.version <= v) continue;
    await c.query(m.postgres);
    await c.query('INSERT INTO schema_version (version) VALUES ($1)', [m.version]);
  }
}
