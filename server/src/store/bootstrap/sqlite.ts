/** Bootstrap credentials, host keys and enrollment tokens on SQLite (see types.ts). */
import { capstanError } from '@capstan/shared/errors';
import type { BootstrapStore, CredentialRecord, EnrolTokenInsert, EnrolTokenUse, HostKeyRecord, SealedCredential } from './types.js';
import { credentialFromRow, hostKeyFromRow, publicCredential } from './rows.js';
import { type SqliteDb, sqliteRows } from '../sqlite/db.js';

type Row = Record<string, unknown>;
const utc = (s: string) => new Date(s).toISOString();
const asCredential = (r: Row) => credentialFromRow(r, sqliteRows);
const asHostKey = (r: Row) => hostKeyFromRow(r, sqliteRows);

export class SqliteBootstrapStore implements BootstrapStore {
  constructor(private readonly db: SqliteDb) {}

  async createCredential(c: SealedCredential): Promise<CredentialRecord> {
    return this.db.write('create credential', () => {
      if (this.db.prepare('SELECT 1 FROM ssh_credentials WHERE id = ?').get(c.id)) throw capstanError('ERR_CONFLICT', `credential ${c.id} exists`);
      this.db.prepare('INSERT INTO ssh_credentials (id, user, port, selectors, fingerprint, has_password, sealed, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
        .run(c.id, c.user, c.port, JSON.stringify(c.selectors), c.fingerprint, c.has_password ? 1 : 0, c.sealed, utc(c.created_at));
      return publicCredential(asCredential(this.db.prepare('SELECT * FROM ssh_credentials WHERE id = ?').get(c.id) as Row));
    });
  }

  async listCredentials(): Promise<CredentialRecord[]> {
    return this.db.read('list credentials', () => (this.db.prepare('SELECT * FROM ssh_credentials ORDER BY id').all() as Row[]).map((r) => publicCredential(asCredential(r))));
  }

  async getSealedCredential(id: string): Promise<SealedCredential | null> {
    return this.db.read('get credential', () => {
      const r = this.db.prepare('SELECT * FROM ssh_credentials WHERE id = ?').get(id) as Row | undefined;
      return r ? asCredential(r) : null;
    });
  }

  async deleteCredential(id: string): Promise<boolean> {
    return this.db.write('delete credential', () => this.db.prepare('DELETE FROM ssh_credentials WHERE id = ?').run(id).changes > 0);
  }

  async getHostKey(nodeId: string): Promise<HostKeyRecord | null> {
    return this.db.read('get host key', () => {
      const r = this.db.prepare('SELECT * FROM node_host_keys WHERE node_id = ?').get(nodeId) as Row | undefined;
      return r ? asHostKey(r) : null;
    });
  }

  async pinHostKey(key: HostKeyRecord): Promise<HostKeyRecord> {
    return this.db.write('pin host key', () => {
      this.db.prepare('INSERT INTO node_host_keys (node_id, algorithm, fingerprint, pinned_at, job_id) VALUES (?, ?, ?, ?, ?) ON CONFLICT (node_id) DO NOTHING')
        .run(key.node_id, key.algorithm, key.fingerprint, utc(key.pinned_at), key.job_id);
      return asHostKey(this.db.prepare('SELECT * FROM node_host_keys WHERE node_id = ?').get(key.node_id) as Row);
    });
  }

  async clearHostKey(nodeId: string): Promise<boolean> {
    return this.db.write('clear host key', () => this.db.prepare('DELETE FROM node_host_keys WHERE node_id = ?').run(nodeId).changes > 0);
  }

  async putEnrolToken(t: EnrolTokenInsert): Promise<void> {
    this.db.write('put enrol token', () => {
      this.db.prepare('INSERT INTO enrol_tokens (digest, job_id, node_id, expires_at) VALUES (?, ?, ?, ?)').run(t.digest, t.job_id, t.node_id, utc(t.expires_at));
    });
  }

  async useEnrolToken(digest: string, at: string, usedBy: string): Promise<EnrolTokenUse | null> {
    return this.db.write('use enrol token', () => {
      const r = this.db.prepare('UPDATE enrol_tokens SET used_at = ?, used_by = ? WHERE digest = ? AND used_at IS NULL AND expires_at > ? RETURNING job_id, node_id')
        .get(utc(at), usedBy, digest, utc(at)) as Row | undefined;
      return r ? { job_id: String(r.job_id), node_id: String(r.node_id) } : null;
    });
  }

  async enrolledBy(jobId: string, nodeId: string): Promise<string | null> {
    return this.db.read('enrol token state', () => {
      const r = this.db.prepare('SELECT used_by FROM enrol_tokens WHERE job_id = ? AND node_id = ? AND used_at IS NOT NULL').get(jobId, nodeId) as Row | undefined;
      return r ? String(r.used_by) : null;
    });
  }

  async deleteEnrolTokensBefore(before: string, limit: number): Promise<number> {
    return this.db.write('delete enrol tokens', () => this.db.prepare('DELETE FROM enrol_tokens WHERE digest IN (SELECT digest FROM enrol_tokens WHERE expires_at < ? LIMIT ?)').run(utc(before), limit).changes);
  }
}
