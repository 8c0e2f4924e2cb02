/** Bootstrap credentials, host keys and enrollment tokens on SQLite (see ../bootstrap-types.ts). */
import type Database from 'better-sqlite3';
import { capstanError } from '@capstan/shared';
import { storeError } from '../errors.js';
import type { BootstrapStore, CredentialRecord, EnrolTokenInsert, EnrolTokenUse, HostKeyRecord, SealedCredential } from '../bootstrap-types.js';

type Row = Record<string, unknown>;
const utc = (s: string) => new Date(s).toISOString();

function credentialFromRow(r: Row): SealedCredential {
  return {
    id: String(r.id),
    user: String(r.user),
    port: Number(r.port),
    selectors: JSON.parse(String(r.selectors)) as string[],
    fingerprint: (r.fingerprint as string | null) ?? null,
    has_password: r.has_password === 1,
    created_at: String(r.created_at),
    sealed: String(r.sealed),
  };
}

export const publicCredential = ({ sealed: _s, ...c }: SealedCredential): CredentialRecord => c;

function hostKeyFromRow(r: Row): HostKeyRecord {
  return { node_id: String(r.node_id), algorithm: String(r.algorithm), fingerprint: String(r.fingerprint), pinned_at: String(r.pinned_at), job_id: (r.job_id as string | null) ?? null };
}

export class SqliteBootstrapStore implements BootstrapStore {
  constructor(private readonly db: () => Database.Database) {}

  private run<T>(what: string, fn: (db: Database.Database) => T): T {
    const db = this.db();
    try {
      return db.transaction(() => fn(db)).immediate();
    } catch (err) {
      if ((err as { code?: string }).code?.startsWith('ERR_')) throw err;
      throw storeError(what, err);
    }
  }

  async createCredential(c: SealedCredential): Promise<CredentialRecord> {
    return this.run('create credential', (db) => {
      if (db.prepare('SELECT 1 FROM ssh_credentials WHERE id = ?').get(c.id)) throw capstanError('ERR_CONFLICT', `credential ${c.id} exists`);
      db.prepare('INSERT INTO ssh_credentials (id, user, port, selectors, fingerprint, has_password, sealed, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
        .run(c.id, c.user, c.port, JSON.stringify(c.selectors), c.fingerprint, c.has_password ? 1 : 0, c.sealed, utc(c.created_at));
      return publicCredential(credentialFromRow(db.prepare('SELECT * FROM ssh_credentials WHERE id = ?').get(c.id) as Row));
    });
  }

  async listCredentials(): Promise<CredentialRecord[]> {
    return this.run('list credentials', (db) => (db.prepare('SELECT * FROM ssh_credentials ORDER BY id').all() as Row[]).map((r) => publicCredential(credentialFromRow(r))));
  }

  async getSealedCredential(id: string): Promise<SealedCredential | null> {
    return this.run('get credential', (db) => {
      const r = db.prepare('SELECT * FROM ssh_credentials WHERE id = ?').get(id) as Row | undefined;
      return r ? credentialFromRow(r) : null;
    });
  }

  async deleteCredential(id: string): Promise<boolean> {
    return this.run('delete credential', (db) => db.prepare('DELETE FROM ssh_credentials WHERE id = ?').run(id).changes > 0);
  }

  async getHostKey(nodeId: string): Promise<HostKeyRecord | null> {
    return this.run('get host key', (db) => {
      const r = db.prepare('SELECT * FROM node_host_keys WHERE node_id = ?').get(nodeId) as Row | undefined;
      return r ? hostKeyFromRow(r) : null;
    });
  }

  async pinHostKey(key: HostKeyRecord): Promise<HostKeyRecord> {
    return this.run('pin host key', (db) => {
      db.prepare('INSERT INTO node_host_keys (node_id, algorithm, fingerprint, pinned_at, job_id) VALUES (?, ?, ?, ?, ?) ON CONFLICT (node_id) DO NOTHING')
        .run(key.node_id, key.algorithm, key.fingerprint, utc(key.pinned_at), key.job_id);
      return hostKeyFromRow(db.prepare('SELECT * FROM node_host_keys WHERE node_id = ?').get(key.node_id) as Row);
    });
  }

  async clearHostKey(nodeId: string): Promise<boolean> {
    return this.run('clear host key', (db) => db.prepare('DELETE FROM node_host_keys WHERE node_id = ?').run(nodeId).changes > 0);
  }

  async putEnrolToken(t: EnrolTokenInsert): Promise<void> {
    this.run('put enrol token', (db) => {
      db.prepare('INSERT INTO enrol_tokens (digest, job_id, node_id, expires_at) VALUES (?, ?, ?, ?)').run(t.digest, t.job_id, t.node_id, utc(t.expires_at));
    });
  }

  async useEnrolToken(digest: string, at: string, usedBy: string): Promise<EnrolTokenUse | null> {
    return this.run('use enrol token', (db) => {
      const r = db.prepare('UPDATE enrol_tokens SET used_at = ?, used_by = ? WHERE digest = ? AND used_at IS NULL AND expires_at > ? RETURNING job_id, node_id')
        .get(utc(at), usedBy, digest, utc(at)) as Row | undefined;
      return r ? { job_id: String(r.job_id), node_id: String(r.node_id) } : null;
    });
  }

  async enrolledBy(jobId: string, nodeId: string): Promise<string | null> {
    return this.run('enrol token state', (db) => {
      const r = db.prepare('SELECT used_by FROM enrol_tokens WHERE job_id = ? AND node_id = ? AND used_at IS NOT NULL').get(jobId, nodeId) as Row | undefined;
      return r ? String(r.used_by) : null;
    });
  }

  async deleteEnrolTokensBefore(before: string, limit: number): Promise<number> {
    return this.run('delete enrol tokens', (db) => db.prepare('DELETE FROM enrol_tokens WHERE digest IN (SELECT digest FROM enrol_tokens WHERE expires_at < ? LIMIT ?)').run(utc(before), limit).changes);
  }
}
