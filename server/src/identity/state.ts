/**
 * The identity state of one server: the signing keyring, the current token of each node (kid,
 * jti, times, forced renewal) and the renewal nonces seen. It lives in its own SQLite file,
 * <data-dir>/identity.db, created 0600 because it holds private keys: the keyring is the
 * server's secret, not registry data, and keeping it out of the shared database means a database
 * dump or a read-only replica never carries the keys that sign node identities.
 */
import { chmodSync, closeSync, openSync } from 'node:fs';
import Database from 'better-sqlite3';
import type { SigningKey, TokenAlg } from '@capstan/shared';

type JWK = SigningKey['publicJwk'];

export interface KeyRow {
  kid: string;
  alg: TokenAlg;
  active: boolean;
  created_at: string;
  /** When another key became active (null for the active key). */
  retired_at: string | null;
  /** Latest `exp` (epoch seconds) of any token this key signed; 0 when none. */
  max_exp: number;
}

export interface NodeTokenRow {
  node_id: string;
  kid: string;
  jti: string;
  iat: number;
  exp: number;
  /** Tokens issued before this time (epoch seconds) are refused by the server; 0 = none. */
  forced_after: number;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS signing_keys (
  kid TEXT PRIMARY KEY,
  alg TEXT NOT NULL,
  private_jwk TEXT NOT NULL,
  public_jwk TEXT NOT NULL,
  active INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL,
  retired_at TEXT,
  max_exp INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE UNIQUE INDEX IF NOT EXISTS signing_keys_one_active ON signing_keys (active) WHERE active = 1;
CREATE TABLE IF NOT EXISTS node_tokens (
  node_id TEXT PRIMARY KEY,
  kid TEXT NOT NULL,
  jti TEXT NOT NULL,
  iat INTEGER NOT NULL,
  exp INTEGER NOT NULL,
  forced_after INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX IF NOT EXISTS node_tokens_kid ON node_tokens (kid, exp);
CREATE TABLE IF NOT EXISTS renew_nonces (
  nonce TEXT PRIMARY KEY,
  until INTEGER NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS renew_nonces_until ON renew_nonces (until);
`;

/** Nonces kept at most (each lives the renewal window, 5 min): beyond it, renewals are refused. */
export const MAX_NONCES = 1_000_000;

export class IdentityState {
  private readonly db: Database.Database;

  constructor(path: string) {
    // Create the file 0600 before SQLite opens it (SQLite would create it with the umask).
    closeSync(openSync(path, 'a', 0o600));
    chmodSync(path, 0o600);
    this.db = new Database(path);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('busy_timeout = 5000');
    this.db.exec(SCHEMA);
  }

  close(): void {
    this.db.close();
  }

  private static keyRow(r: Record<string, unknown>): KeyRow {
    return {
      kid: r.kid as string,
      alg: r.alg as TokenAlg,
      active: r.active === 1,
      created_at: r.created_at as string,
      retired_at: (r.retired_at as string | null) ?? null,
      max_exp: r.max_exp as number,
    };
  }

  listKeys(): KeyRow[] {
    return (this.db.prepare('SELECT kid, alg, active, created_at, retired_at, max_exp FROM signing_keys ORDER BY created_at, kid').all() as Record<string, unknown>[]).map(IdentityState.keyRow);
  }

  /** Public JWKs of the active key and of every key that signed a token not yet expired. */
  publishedJwks(nowSec: number): JWK[] {
    const rows = this.db.prepare('SELECT public_jwk FROM signing_keys WHERE active = 1 OR max_exp > ? ORDER BY created_at, kid').all(nowSec) as { public_jwk: string }[];
    return rows.map((r) => JSON.parse(r.public_jwk) as JWK);
  }

  activeKey(): SigningKey | null {
    const r = this.db.prepare('SELECT kid, alg, private_jwk, public_jwk FROM signing_keys WHERE active = 1').get() as Record<string, string> | undefined;
    return r ? { kid: r.kid!, alg: r.alg as TokenAlg, privateJwk: JSON.parse(r.private_jwk!) as JWK, publicJwk: JSON.parse(r.public_jwk!) as JWK } : null;
  }

  /** Store a key and make it the active one; the previous active key is retired, not removed. */
  addActiveKey(key: SigningKey, at: string): void {
    this.db.transaction(() => {
      this.db.prepare('UPDATE signing_keys SET active = 0, retired_at = ? WHERE active = 1').run(at);
      this.db.prepare('INSERT INTO signing_keys (kid, alg, private_jwk, public_jwk, active, created_at) VALUES (?, ?, ?, ?, 1, ?)')
        .run(key.kid, key.alg, JSON.stringify(key.privateJwk), JSON.stringify(key.publicJwk), at);
    }).immediate();
  }

  /** Nodes whose current, unexpired token this key signed. */
  nodesUsingKey(kid: string, nowSec: number): number {
    return (this.db.prepare('SELECT count(*) AS n FROM node_tokens WHERE kid = ? AND exp > ?').get(kid, nowSec) as { n: number }).n;
  }

  deleteKey(kid: string): boolean {
    return this.db.prepare('DELETE FROM signing_keys WHERE kid = ?').run(kid).changes > 0;
  }

  getKey(kid: string): KeyRow | null {
    const r = this.db.prepare('SELECT kid, alg, active, created_at, retired_at, max_exp FROM signing_keys WHERE kid = ?').get(kid) as Record<string, unknown> | undefined;
    return r ? IdentityState.keyRow(r) : null;
  }

  /** Record a node's new token (keeps a pending forced renewal time: it is older than the token). */
  recordToken(t: Omit<NodeTokenRow, 'forced_after'>): void {
    this.db.transaction(() => {
      this.db.prepare(`INSERT INTO node_tokens (node_id, kid, jti, iat, exp) VALUES (?, ?, ?, ?, ?)
        ON CONFLICT (node_id) DO UPDATE SET kid = excluded.kid, jti = excluded.jti, iat = excluded.iat, exp = excluded.exp`)
        .run(t.node_id, t.kid, t.jti, t.iat, t.exp);
      this.db.prepare('UPDATE signing_keys SET max_exp = max(max_exp, ?) WHERE kid = ?').run(t.exp, t.kid);
    })();
  }

  getToken(nodeId: string): NodeTokenRow | null {
    return (this.db.prepare('SELECT node_id, kid, jti, iat, exp, forced_after FROM node_tokens WHERE node_id = ?').get(nodeId) as NodeTokenRow | undefined) ?? null;
  }

  /** Tokens of this node issued before `atSec` are refused from now on. */
  forceRenewal(nodeId: string, atSec: number): void {
    this.db.prepare(`INSERT INTO node_tokens (node_id, kid, jti, iat, exp, forced_after) VALUES (?, '', '', 0, 0, ?)
      ON CONFLICT (node_id) DO UPDATE SET forced_after = excluded.forced_after`).run(nodeId, atSec);
  }

  forgetNode(nodeId: string): void {
    this.db.prepare('DELETE FROM node_tokens WHERE node_id = ?').run(nodeId);
  }

  /** Remember a renewal nonce until `untilSec`; false when it was seen already (a replay). */
  rememberNonce(nonce: string, untilSec: number, nowSec: number): boolean {
    return this.db.transaction(() => {
      this.db.prepare('DELETE FROM renew_nonces WHERE until < ?').run(nowSec);
      const { n } = this.db.prepare('SELECT count(*) AS n FROM renew_nonces').get() as { n: number };
      if (n >= MAX_NONCES) return false;
      return this.db.prepare('INSERT INTO renew_nonces (nonce, until) VALUES (?, ?) ON CONFLICT DO NOTHING').run(nonce, untilSec).changes === 1;
    }).immediate();
  }
}
