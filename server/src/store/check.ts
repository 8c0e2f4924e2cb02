/**
 * `capstan-server serve --test`: is the configured database reachable? A look only: nothing is
 * created or migrated (SQLite: a database file not made yet is fine, the first start makes it).
 */
import { access } from 'node:fs/promises';
import { capstanError } from '@capstan/shared/errors';

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

/** Connection-level failures of PostgreSQL (or of the way to it): they pass; a wrong password or database does not. */
const UNAVAILABLE = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'ENOTFOUND', '57P03', '57P01', '53300']);

/**
 * Did opening the database fail because it did not answer (yet), rather than because it refused
 * us? Follows `cause` links; pg's connection timeout is a plain Error with that message.
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  for (let e = err, depth = 0; e && typeof e === 'object' && depth < 8; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && UNAVAILABLE.has(code)) return true;
    const message = (e as { message?: unknown }).message;
    if (typeof message === 'string' && /^Connection terminated due to connection timeout|^timeout expired/.test(message)) return true;
    const errors = (e as { errors?: unknown }).errors;
    if (Array.isArray(errors) && errors.some((x) => isDatabaseUnavailable(x))) return true;
  }
  return false;
}

/** What was checked, for the ok line; a coded ERR_STORE naming the database when unreachable. */
export async function checkDatabase(opts: { databaseUrl?: string; sqlitePath: string; timeoutMs: number }): Promise<string> {
  if (opts.databaseUrl) {
    // Each driver is loaded for the database it checks: a command line starts faster without the other.
    const { default: pg } = await import('pg');
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
  const { default: Database } = await import('better-sqlite3');
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
