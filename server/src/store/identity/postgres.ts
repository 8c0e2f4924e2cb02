/**
 * The identity tables on PostgreSQL (see types.ts). Changes to the keyring (first key,
 * rotation) take a transaction-scoped advisory lock named after the schema, so servers sharing
 * the database serialise there: two first starts store one keyring, two rotations one after the
 * other (the partial unique index on `active` is the backstop). Nonces rely on the primary key:
 * the same nonce presented to two servers at once is inserted by one of them only.
 */
import type pg from 'pg';
import {
  MAX_NONCES, type IdentityInitial, type IdentityKeyRecord, type IdentityKeyRow, type IdentityStore, type IdentityTokenRow,
} from './types.js';
import { KEY_COLUMNS, keyRecord, keyRow } from './rows.js';
import { type PostgresDb, postgresRows } from '../postgres/db.js';

const LOCK = "SELECT pg_advisory_xact_lock(hashtext('capstan.identity:' || current_schema()))";
const asKeyRow = (r: Record<string, unknown>) => keyRow(r, postgresRows);
const asKeyRecord = (r: Record<string, unknown>) => keyRecord(r, postgresRows);

const UPSERT_TOKEN = `INSERT INTO identity_tokens (node_id, kid, jti, iat, exp, forced_after)
  SELECT $1, $2, $3, $4, $5, $6 WHERE EXISTS (SELECT 1 FROM nodes WHERE id = $1)
  ON CONFLICT (node_id) DO UPDATE SET kid = excluded.kid, jti = excluded.jti, iat = excluded.iat, exp = excluded.exp`;

export class PostgresIdentityStore implements IdentityStore {
  constructor(private readonly db: PostgresDb) {}

  private async insertKey(c: pg.PoolClient, k: IdentityKeyRecord): Promise<void> {
    await c.query(`INSERT INTO identity_keys (kid, alg, active, public_jwk, sealed_private, created_at, retired_at, max_exp)
      VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, [k.kid, k.alg, k.active, k.public_jwk, k.sealed_private, k.created_at, k.retired_at, k.max_exp]);
  }

  async initKeyring(initial: () => IdentityInitial): Promise<boolean> {
    return this.db.tx('identity keyring initialisation', async (c) => {
      await c.query(LOCK);
      if ((await c.query('SELECT 1 FROM identity_keys LIMIT 1')).rowCount! > 0) return false;
      const init = initial();
      for (const k of init.keys) await this.insertKey(c, k);
      for (const t of init.tokens) await c.query(UPSERT_TOKEN, [t.node_id, t.kid, t.jti, t.iat, t.exp, t.forced_after]);
      return true;
    });
  }

  async listKeys(): Promise<IdentityKeyRow[]> {
    return (await this.db.query('identity key list', `SELECT ${KEY_COLUMNS} FROM identity_keys ORDER BY created_at, kid`)).rows.map(asKeyRow);
  }

  async getKey(kid: string): Promise<IdentityKeyRow | null> {
    const { rows } = await this.db.query('identity key read', `SELECT ${KEY_COLUMNS} FROM identity_keys WHERE kid = $1`, [kid]);
    return rows[0] ? asKeyRow(rows[0]) : null;
  }

  async allKeys(): Promise<IdentityKeyRecord[]> {
    return (await this.db.query('identity key list', `SELECT ${KEY_COLUMNS}, public_jwk, sealed_private FROM identity_keys ORDER BY created_at, kid`)).rows.map(asKeyRecord);
  }

  async activeKey(): Promise<IdentityKeyRecord | null> {
    const { rows } = await this.db.query('active identity key read', `SELECT ${KEY_COLUMNS}, public_jwk, sealed_private FROM identity_keys WHERE active`);
    return rows[0] ? asKeyRecord(rows[0]) : null;
  }

  async publishedKeys(nowSec: number): Promise<string[]> {
    const { rows } = await this.db.query<{ public_jwk: string }>('JWKS read', 'SELECT public_jwk FROM identity_keys WHERE active OR max_exp > $1 ORDER BY created_at, kid', [nowSec]);
    return rows.map((r) => r.public_jwk);
  }

  async addActiveKey(key: Omit<IdentityKeyRecord, 'active' | 'retired_at' | 'max_exp'>): Promise<void> {
    await this.db.tx('identity key rotation', async (c) => {
      await c.query(LOCK);
      await c.query('UPDATE identity_keys SET active = false, retired_at = $1 WHERE active', [key.created_at]);
      await this.insertKey(c, { ...key, active: true, retired_at: null, max_exp: 0 });
    });
  }

  async deleteKey(kid: string): Promise<boolean> {
    return (await this.db.query('identity key deletion', 'DELETE FROM identity_keys WHERE kid = $1', [kid])).rowCount! > 0;
  }

  async nodesUsingKey(kid: string, nowSec: number): Promise<number> {
    const { rows } = await this.db.query<{ n: number }>('identity key use count', 'SELECT count(*)::int AS n FROM identity_tokens WHERE kid = $1 AND exp > $2', [kid, nowSec]);
    return rows[0]!.n;
  }

  async recordToken(t: Omit<IdentityTokenRow, 'forced_after'>): Promise<boolean> {
    return this.db.tx('node token record', async (c) => {
      const r = await c.query(UPSERT_TOKEN, [t.node_id, t.kid, t.jti, t.iat, t.exp, 0]);
      await c.query('UPDATE identity_keys SET max_exp = greatest(max_exp, $1) WHERE kid = $2', [t.exp, t.kid]);
      return r.rowCount! > 0;
    });
  }

  async getToken(nodeId: string): Promise<IdentityTokenRow | null> {
    const { rows } = await this.db.query('node token read', 'SELECT node_id, kid, jti, iat, exp, forced_after FROM identity_tokens WHERE node_id = $1', [nodeId]);
    const r = rows[0];
    return r ? { node_id: r.node_id, kid: r.kid, jti: r.jti, iat: Number(r.iat), exp: Number(r.exp), forced_after: Number(r.forced_after) } : null;
  }

  async forceRenewal(nodeIds: string[], atSec: number): Promise<number> {
    if (nodeIds.length === 0) return 0;
    const r = await this.db.query('forced renewal', `INSERT INTO identity_tokens (node_id, kid, jti, iat, exp, forced_after)
      SELECT id, '', '', 0, 0, $2 FROM nodes WHERE id = ANY($1::text[])
      ON CONFLICT (node_id) DO UPDATE SET forced_after = excluded.forced_after`, [nodeIds, atSec]);
    return r.rowCount!;
  }

  async forcedRenewals(sinceSec: number): Promise<Map<string, number>> {
    const { rows } = await this.db.query('forced renewals read', 'SELECT node_id, forced_after FROM identity_tokens WHERE forced_after > $1', [sinceSec]);
    return new Map(rows.map((r) => [String(r.node_id), Number(r.forced_after)]));
  }

  async rememberNonce(nonce: string, untilSec: number, nowSec: number): Promise<boolean> {
    return this.db.tx('renewal nonce check', async (c) => {
      await c.query('DELETE FROM identity_nonces WHERE until < $1', [nowSec]);
      const { rows } = await c.query<{ n: number }>('SELECT count(*)::int AS n FROM identity_nonces');
      if (rows[0]!.n >= MAX_NONCES) return false;
      const r = await c.query('INSERT INTO identity_nonces (nonce, until) VALUES ($1, $2) ON CONFLICT DO NOTHING', [nonce, untilSec]);
      return r.rowCount === 1;
    });
  }
}
