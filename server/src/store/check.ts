/**
 * `capstan-server serve --test`: is the configured database reachable? A look only: nothing is
 * created or migrated (SQLite: a database file not made yet is fine, the first start makes it).
 */
import { access } from 'node:fs/promises';
import Database from 'better-sqlite3';
import pg from 'pg';
import { capstanError } from '@capstan/shared';

/** The URL as it may be printed: no password. */
export function shownUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(a database url that is not a url)';
  }
}

/** What was checked, for the ok line; a coded ERR_STORE naming the database when unreachable. */
export async function checkDatabase(opts: { databaseUrl?: string; sqlitePath: string; timeoutMs: number }): Promise<string> {
  if (opts.databaseUrl) {
    const client = new pg.Client({ connectionString: opts.databaseUrl, connectionTimeoutMillis: opts.timeoutMs });
    // An unreachable server is reported by connect(); without a listener a late socket error would throw.
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.query('SELECT 1');
      return `database ${shownUrl(opts.databaseUrl)} reachable`;
    } catch (err) {
      const why = (err as Error).message || (err as { code?: string }).code || String(err);
      throw capstanError('ERR_STORE', `database ${shownUrl(opts.databaseUrl)} unreachable: ${why}`, { cause: err });
    } finally {
      await client.end().catch(() => undefined);
    }
  }
  if (!(await access(opts.sqlitePath).then(() => true, () => false))) return `database ${opts.sqlitePath} will be made at the first start`;
  try {
    const db = new Database(opts.sqlitePath, { readonly: true, fileMustExist: true, timeout: opts.timeoutMs });
    try {
      db.prepare('SELECT count(*) FROM sqlite_master').get();
    } finally {
      db.close();
    }
    return `database ${opts.sqlitePath} readable`;
  } catch (err) {
    throw capstanError('ERR_STORE', `database ${opts.sqlitePath} unreadable: ${(err as Error).message}`, { cause: err });
  }
}
