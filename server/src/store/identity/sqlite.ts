/**
 * The identity tables on SQLite (see types.ts). Writes are IMMEDIATE transactions like the
 * rest of the store: two processes on one file serialise on the write lock, so `initKeyring`
 * stores one keyring however many start at once.
 */
import {
  MAX_NONCES, type IdentityInitial, type IdentityKeyRecord, type IdentityKeyRow, type IdentityStore, type IdentityTokenRow,
} from './types.js';
import { KEY_COLUMNS, keyRecord, keyRow } from './rows.js';
import { type SqliteDb, sqliteRows } from '../sqlite/db.js';

const asKeyRow = (r: Record<string, unknown>) => keyRow(r, sqliteRows);
const asKeyRecord = (r: Record<string, unknown>) => keyRecord(r, sqliteRows);

export class SqliteIdentityStore implements IdentityStore {
  constructor(private readonly db: SqliteDb) {}

  private insertKey(k: IdentityKeyRecord): void {
    this.db.prepare(`INSERT INTO identity_keys (kid, alg, active, public_jwk, sealed_private, created_at, retired_at, max_exp)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?)`).run(k.kid, k.alg, k.active ? 1 : 0, k.public_jwk, k.sealed_private, k.created_at, k.retired_at, k.max_exp);
  }

  private upsertToken(t: IdentityTokenRow): number {
    return this.db.prepare(`INSERT INTO identity_tokens (node_id, kid, jti, iat, exp, forced_after)
      SELECT ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM nodes WHERE id = ?)
      ON CONFLICT (node_id) DO UPDATE SET kid = excluded.kid, jti = excluded.jti, iat = excluded.iat, exp = excluded.exp`)
      .run(t.node_id, t.kid, t.jti, t.iat, t.exp, t.forced_after, t.node_id).changes;
  }

  async initKeyring(initial: () => IdentityInitial): Promise<boolean> {
    return this.db.write('identity keyring initialisation', () => {
      if (this.db.prepare('SELECT 1 FROM identity_keys LIMIT 1').get()) return false;
      const init = initial();
      for (const k of init.keys) this.insertKey(k);
      for (const t of init.tokens) this.upsertToken(t);
      return true;
    });
  }

  async listKeys(): Promise<IdentityKeyRow[]> {
    return this.db.read('identity key list', () =>
      (this.db.prepare(`SELECT ${KEY_COLUMNS} FROM identity_keys ORDER BY created_at, kid`).all() as Record<string, unknown>[]).map(asKeyRow));
  }

  async getKey(kid: string): Promise<IdentityKeyRow | null> {
    return this.db.read('identity key read', () => {
      const r = this.db.prepare(`SELECT ${KEY_COLUMNS} FROM identity_keys WHERE kid = ?`).get(kid) as Record<string, unknown> | undefined;
      return r ? asKeyRow(r) : null;
    });
  }

  async allKeys(): Promise<IdentityKeyRecord[]> {
    return this.db.read('identity key list', () =>
      (this.db.prepare(`SELECT ${KEY_COLUMNS}, public_jwk, sealed_private FROM identity_keys ORDER BY created_at, kid`).all() as Record<string, unknown>[]).map(asKeyRecord));
  }

  async activeKey(): Promise<IdentityKeyRecord | null> {
    return this.db.read('active identity key read', () => {
      const r = this.db.prepare(`SELECT ${KEY_COLUMNS}, public_jwk, sealed_private FROM identity_keys WHERE active = 1`).get() as Record<string, unknown> | undefined;
      return r ? asKeyRecord(r) : null;
    });
  }

  async publishedKeys(nowSec: number): Promise<string[]> {
    return this.db.read('JWKS read', () =>
      (this.db.prepare('SELECT public_jwk FROM identity_keys WHERE active = 1 OR max_exp > ? ORDER BY created_at, kid').all(nowSec) as { public_jwk: string }[]).map((r) => r.public_jwk));
  }

  async addActiveKey(key: Omit<IdentityKeyRecord, 'active' | 'retired_at' | 'max_exp'>): Promise<void> {
    this.db.write('identity key rotation', () => {
      this.db.prepare('UPDATE identity_keys SET active = 0, retired_at = ? WHERE active = 1').run(key.created_at);
      this.insertKey({ ...key, active: true, retired_at: null, max_exp: 0 });
    });
  }

  async deleteKey(kid: string): Promise<boolean> {
    return this.db.write('identity key deletion', () => this.db.prepare('DELETE FROM identity_keys WHERE kid = ?').run(kid).changes > 0);
  }

  async nodesUsingKey(kid: string, nowSec: number): Promise<number> {
    return this.db.read('identity key use count', () =>
      (this.db.prepare('SELECT count(*) AS n FROM identity_tokens WHERE kid = ? AND exp > ?').get(kid, nowSec) as { n: number }).n);
  }

  async recordToken(t: Omit<IdentityTokenRow, 'forced_after'>): Promise<boolean> {
    return this.db.write('node token record', () => {
      const n = this.upsertToken({ ...t, forced_after: 0 });
      this.db.prepare('UPDATE identity_keys SET max_exp = max(max_exp, ?) WHERE kid = ?').run(t.exp, t.kid);
      return n > 0;
    });
  }

  async getToken(nodeId: string): Promise<IdentityTokenRow | null> {
    return this.db.read('node token read', () => {
      const r = this.db.prepare('SELECT node_id, kid, jti, iat, exp, forced_after FROM identity_tokens WHERE node_id = ?').get(nodeId) as IdentityTokenRow | undefined;
      return r ?? null;
    });
  }

  async forceRenewal(nodeIds: string[], atSec: number): Promise<number> {
    if (nodeIds.length === 0) return 0;
    return this.db.write('forced renewal', () => {
      const st = this.db.prepare(`INSERT INTO identity_tokens (node_id, kid, jti, iat, exp, forced_after)
        SELECT ?, '', '', 0, 0, ? WHERE EXISTS (SELECT 1 FROM nodes WHERE id = ?)
        ON CONFLICT (node_id) DO UPDATE SET forced_after = excluded.forced_after`);
      let n = 0;
      for (const id of nodeIds) n += st.run(id, atSec, id).changes;
      return n;
    });
  }

  async forcedRenewals(sinceSec: number): Promise<Map<string, number>> {
    return this.db.read('forced renewals read', () => {
      const rows = this.db.prepare('SELECT node_id, forced_after FROM identity_tokens WHERE forced_after > ?').all(sinceSec) as Array<{ node_id: string; forced_after: number }>;
      return new Map(rows.map((r) => [r.node_id, r.forced_after]));
    });
  }

  async rememberNonce(nonce: string, untilSec: number, nowSec: number): Promise<boolean> {
    return this.db.write('renewal nonce check', () => {
      this.db.prepare('DELETE FROM identity_nonces WHERE until < ?').run(nowSec);
      const { n } = this.db.prepare('SELECT count(*) AS n FROM identity_nonces').get() as { n: number };
      if (n >= MAX_NONCES) return false;
      return this.db.prepare('INSERT INTO identity_nonces (nonce, until) VALUES (?, ?) ON CONFLICT DO NOTHING').run(nonce, untilSec).changes === 1;
    });
  }
}
