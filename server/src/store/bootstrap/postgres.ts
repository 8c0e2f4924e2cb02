/** Bootstrap credentials, host keys and enrollment tokens on PostgreSQL (see types.ts). */
import { capstanError } from '@capstan/shared/errors';
import type { BootstrapStore, CredentialRecord, EnrolTokenInsert, EnrolTokenUse, HostKeyRecord, SealedCredential } from './types.js';
import { credentialFromRow, hostKeyFromRow, publicCredential } from './rows.js';
import { type PostgresDb, postgresRows } from '../postgres/db.js';

type Row = Record<string, unknown>;
const utc = (s: string) => new Date(s).toISOString();
const CREDENTIAL_COLUMNS = 'id, "user", port, selectors, fingerprint, has_password, sealed, created_at';
const asCredential = (r: Row) => credentialFromRow(r, postgresRows);
const asHostKey = (r: Row) => hostKeyFromRow(r, postgresRows);

export class PostgresBootstrapStore implements BootstrapStore {
  constructor(private readonly db: PostgresDb) {}

  async createCredential(c: SealedCredential): Promise<CredentialRecord> {
    const r = await this.db.query<Row>('create credential', `INSERT INTO ssh_credentials (${CREDENTIAL_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
      ON CONFLICT (id) DO NOTHING RETURNING ${CREDENTIAL_COLUMNS}`,
    [c.id, c.user, c.port, JSON.stringify(c.selectors), c.fingerprint, c.has_password, c.sealed, utc(c.created_at)]);
    if (r.rowCount === 0) throw capstanError('ERR_CONFLICT', `credential ${c.id} exists`);
    return publicCredential(asCredential(r.rows[0]!));
  }

  async listCredentials(): Promise<CredentialRecord[]> {
    const r = await this.db.query<Row>('list credentials', `SELECT ${CREDENTIAL_COLUMNS} FROM ssh_credentials ORDER BY id`, []);
    return r.rows.map((x) => publicCredential(asCredential(x)));
  }

  async getSealedCredential(id: string): Promise<SealedCredential | null> {
    const r = await this.db.query<Row>('get credential', `SELECT ${CREDENTIAL_COLUMNS} FROM ssh_credentials WHERE id = $1`, [id]);
    return r.rows[0] ? asCredential(r.rows[0]) : null;
  }

  async deleteCredential(id: string): Promise<boolean> {
    return ((await this.db.query<Row>('delete credential', 'DELETE FROM ssh_credentials WHERE id = $1', [id])).rowCount ?? 0) > 0;
  }

  async getHostKey(nodeId: string): Promise<HostKeyRecord | null> {
    const r = await this.db.query<Row>('get host key', 'SELECT * FROM node_host_keys WHERE node_id = $1', [nodeId]);
    return r.rows[0] ? asHostKey(r.rows[0]) : null;
  }

  async pinHostKey(key: HostKeyRecord): Promise<HostKeyRecord> {
    await this.db.query<Row>('pin host key', `INSERT INTO node_host_keys (node_id, algorithm, fingerprint, pinned_at, job_id) VALUES ($1, $2, $3, $4, $5)
      ON CONFLICT (node_id) DO NOTHING`, [key.node_id, key.algorithm, key.fingerprint, utc(key.pinned_at), key.job_id]);
    return (await this.getHostKey(key.node_id))!;
  }

  async clearHostKey(nodeId: string): Promise<boolean> {
    return ((await this.db.query<Row>('clear host key', 'DELETE FROM node_host_keys WHERE node_id = $1', [nodeId])).rowCount ?? 0) > 0;
  }

  async putEnrolToken(t: EnrolTokenInsert): Promise<void> {
    await this.db.query<Row>('put enrol token', 'INSERT INTO enrol_tokens (digest, job_id, node_id, expires_at) VALUES ($1, $2, $3, $4)', [t.digest, t.job_id, t.node_id, utc(t.expires_at)]);
  }

  async useEnrolToken(digest: string, at: string, usedBy: string): Promise<EnrolTokenUse | null> {
    // One conditional update: of two inventories racing with one token, one wins.
    const r = await this.db.query<Row>('use enrol token', `UPDATE enrol_tokens SET used_at = $2, used_by = $3
      WHERE digest = $1 AND used_at IS NULL AND expires_at > $2 RETURNING job_id, node_id`, [digest, utc(at), usedBy]);
    return r.rows[0] ? { job_id: String(r.rows[0].job_id), node_id: String(r.rows[0].node_id) } : null;
  }

  async enrolledBy(jobId: string, nodeId: string): Promise<string | null> {
    const r = await this.db.query<Row>('enrol token state', 'SELECT used_by FROM enrol_tokens WHERE job_id = $1 AND node_id = $2 AND used_at IS NOT NULL', [jobId, nodeId]);
    return r.rows[0] ? String(r.rows[0].used_by) : null;
  }

  async deleteEnrolTokensBefore(before: string, limit: number): Promise<number> {
    const r = await this.db.query<Row>('delete enrol tokens', 'DELETE FROM enrol_tokens WHERE digest IN (SELECT digest FROM enrol_tokens WHERE expires_at < $1 LIMIT $2)', [utc(before), limit]);
    return r.rowCount ?? 0;
  }
}
