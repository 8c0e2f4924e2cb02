/**
 * How database failures leave the store. Callers decide a spooled file's fate with
 * `isTransient`, so the distinction matters: a database that is down, locked or full is worth a
 * retry (ERR_STORE, transient); a value the database refuses (a constraint, an invalid byte
 * sequence) will be refused again, and retrying it forever would wedge the spool (permanent).
 */
import { capstanError, isCapstanError } from '@capstan/shared/errors';

// Postgres SQLSTATE classes 22 (data exception) and 23 (integrity constraint); SQLite's
// equivalents. Everything else (connections, locks, disk, bugs) counts as transient.
const REFUSED_VALUE = /^(22|23)[0-9A-Z]{3}$|^SQLITE_(CONSTRAINT|TOOBIG|MISMATCH|RANGE)/;

export function storeError(what: string, err: unknown): Error {
  if (isCapstanError(err)) return err;
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && REFUSED_VALUE.test(code)) {
    return capstanError('ERR_BAD_REQUEST', `${what}: value refused by the database (${code})`, { cause: err });
  }
  return capstanError('ERR_STORE', `${what} failed${typeof code === 'string' ? ` (${code})` : ''}`, { cause: err });
}
