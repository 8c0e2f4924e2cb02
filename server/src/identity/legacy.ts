/**
 * The identity state of servers before migration 4: a separate SQLite file, <data-dir>/identity.db,
 * private keys in clear. Read once at the first start on a registry without a keyring, imported
 * (keys sealed) and renamed to identity.db.imported, so it is never imported twice.
 */
import { existsSync, renameSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import type BetterSqlite3 from 'better-sqlite3';
import { capstanError } from '@capstan/shared/errors';
import type { IdentityTokenRow } from '../store/identity/types.js';

export interface LegacyKey {
  kid: string;
  alg: string;
  private_jwk: string;
  public_jwk: string;
  active: boolean;
  created_at: string;
  retired_at: string | null;
  max_exp: number;
}

export interface LegacyIdentity {
  keys: LegacyKey[];
  tokens: IdentityTokenRow[];
}

export function readLegacyIdentity(path: string): LegacyIdentity | null {
  if (!existsSync(path)) return null;
  try {
    return readTables(path);
  } catch (err) {
    throw capstanError('ERR_STARTUP', `cannot import the old identity state ${path}: ${(err as Error).message} (move it away to start with a new keyring)`, { cause: err });
  }
}

function readTables(path: string): LegacyIdentity {
  // Loaded only here, for the one start that finds the old file: a server on PostgreSQL then never
  // loads the SQLite addon at all.
  const Database = createRequire(import.meta.url)('better-sqlite3') as typeof BetterSqlite3;
  // Read-write, so a WAL left by an unclean stop is replayed; nothing is written.
  const db = new Database(path, { fileMustExist: true });
  try {
    const keys = (db.prepare('SELECT kid, alg, private_jwk, public_jwk, active, created_at, retired_at, max_exp FROM signing_keys ORDER BY created_at, kid').all() as Array<Record<string, unknown>>)
      .map((r) => ({
        kid: r.kid as string,
        alg: r.alg as string,
        private_jwk: r.private_jwk as string,
        public_jwk: r.public_jwk as string,
        active: r.active === 1,
        created_at: r.created_at as string,
        retired_at: (r.retired_at as string | null) ?? null,
        max_exp: Number(r.max_exp),
      }));
    const tokens = (db.prepare("SELECT node_id, kid, jti, iat, exp, forced_after FROM node_tokens WHERE kid <> '' OR forced_after > 0").all() as IdentityTokenRow[]);
    return { keys, tokens };
  } finally {
    db.close();
  }
}

/** identity.db → identity.db.imported (its WAL and shared-memory files, emptied by the close, go). */
export function retireLegacyIdentity(path: string): string {
  const to = `${path}.imported`;
  renameSync(path, to);
  for (const ext of ['-wal', '-shm']) rmSync(`${path}${ext}`, { force: true });
  return to;
}
