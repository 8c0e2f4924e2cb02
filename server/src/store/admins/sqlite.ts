/** Named admins and the audit log on SQLite (see types.ts). */
import { capstanError } from '@capstan/shared/errors';
import type { AdminInsert, AdminRecord, AdminStore, AuditInsert, AuditQuery, AuditRecord } from './types.js';
import type { WriteOptions } from '../write-options.js';
import { ADMIN_COLUMNS, AUDIT_COLUMNS, adminFromRow, auditFromRow, auditWhere } from './rows.js';
import type { SqliteDb } from '../sqlite/db.js';

type Row = Record<string, unknown>;

export class SqliteAdminStore implements AdminStore {
  constructor(private readonly db: SqliteDb) {}

  async createAdmin(a: AdminInsert): Promise<AdminRecord> {
    return this.db.write('create admin', () => {
      const old = this.db.prepare('SELECT revoked_at FROM admins WHERE name = ?').get(a.name) as Row | undefined;
      if (old && old.revoked_at === null) throw capstanError('ERR_CONFLICT', `admin ${a.name} exists`);
      this.db.prepare('DELETE FROM admins WHERE name = ?').run(a.name);
      this.db.prepare(`INSERT INTO admins (name, role, token_digest, created_at, expires_at) VALUES (?, ?, ?, ?, ?)`)
        .run(a.name, a.role, a.token_digest, a.created_at, a.expires_at);
      return adminFromRow(this.db.prepare(`SELECT ${ADMIN_COLUMNS} FROM admins WHERE name = ?`).get(a.name) as Row);
    });
  }

  async listAdmins(): Promise<AdminRecord[]> {
    return this.db.read('list admins', () => (this.db.prepare(`SELECT ${ADMIN_COLUMNS} FROM admins ORDER BY name`).all() as Row[]).map(adminFromRow));
  }

  async getAdmin(name: string): Promise<AdminRecord | null> {
    const r = this.db.read('get admin', () => this.db.prepare(`SELECT ${ADMIN_COLUMNS} FROM admins WHERE name = ?`).get(name) as Row | undefined);
    return r ? adminFromRow(r) : null;
  }

  async adminByDigest(digest: string): Promise<(AdminRecord & { token_digest: string }) | null> {
    const r = this.db.read('find admin', () => this.db.prepare(`SELECT ${ADMIN_COLUMNS}, token_digest FROM admins WHERE token_digest = ?`).get(digest) as Row | undefined);
    return r ? { ...adminFromRow(r), token_digest: String(r.token_digest) } : null;
  }

  async revokeAdmin(name: string, at: string): Promise<boolean> {
    return this.db.write('revoke admin', () => this.db.prepare('UPDATE admins SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL').run(at, name).changes > 0);
  }

  async replaceToken(name: string, digest: string): Promise<AdminRecord | null> {
    return this.db.write('replace admin token', () => {
      if (this.db.prepare('UPDATE admins SET token_digest = ? WHERE name = ? AND revoked_at IS NULL').run(digest, name).changes === 0) return null;
      return adminFromRow(this.db.prepare(`SELECT ${ADMIN_COLUMNS} FROM admins WHERE name = ?`).get(name) as Row);
    });
  }

  async touchAdmin(name: string, at: string): Promise<void> {
    this.db.write('touch admin', () => this.db.prepare('UPDATE admins SET last_used_at = ? WHERE name = ?').run(at, name));
  }

  async endConsoleSignIn(sid: string, expiresAt: string, now: string): Promise<void> {
    this.db.write('end console sign-in', () => {
      this.db.prepare('DELETE FROM console_signouts WHERE expires_at < ?').run(now);
      this.db.prepare('INSERT INTO console_signouts (sid, expires_at) VALUES (?, ?) ON CONFLICT (sid) DO NOTHING').run(sid, expiresAt);
    });
  }

  async consoleSignInEnded(sid: string, now: string): Promise<boolean> {
    return this.db.read('console sign-in ended', () => this.db.prepare('SELECT 1 FROM console_signouts WHERE sid = ? AND expires_at >= ?').get(sid, now) !== undefined);
  }

  async insertAudit(r: AuditInsert, opts: WriteOptions = {}): Promise<void> {
    // Written before this returns unless grouped: callers may record without waiting (a refused
    // sign-in is audited as its answer goes out), and what they recorded must be there at once.
    const insert = () => this.db.stmt(`INSERT INTO audit_log (at, admin, role, actor_kind, actor, action, target, method, path, address, status, error, before_state, after_state)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`).run(r.at, r.admin, r.role, r.actor_kind, r.actor, r.action, r.target, r.method, r.path, r.address, r.status, r.error,
      r.before === null || r.before === undefined ? null : JSON.stringify(r.before), r.after === null || r.after === undefined ? null : JSON.stringify(r.after));
    if (opts.grouped) await this.db.writeGrouped('record audit', insert);
    else this.db.write('record audit', insert);
  }

  async listAudit(q: AuditQuery): Promise<{ rows: AuditRecord[]; total: number }> {
    const values: unknown[] = [];
    const where = auditWhere(q, (v) => (values.push(v), '?'));
    return this.db.read('list audit', () => {
      const total = Number((this.db.prepare(`SELECT count(*) AS n FROM audit_log ${where}`).get(...values) as Row).n);
      const rows = this.db.prepare(`SELECT ${AUDIT_COLUMNS} FROM audit_log ${where} ORDER BY at DESC, id DESC LIMIT ? OFFSET ?`)
        .all(...values, q.per_page, (q.page - 1) * q.per_page) as Row[];
      return { rows: rows.map(auditFromRow), total };
    });
  }

  async deleteAuditBefore(before: string, limit: number): Promise<number> {
    return this.db.write('delete audit', () => this.db.prepare('DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE at < ? ORDER BY at LIMIT ?)').run(before, limit).changes);
  }

  async trimAudit(keep: number, limit: number): Promise<number> {
    return this.db.write('trim audit', () => {
      const edge = this.db.prepare('SELECT id FROM audit_log ORDER BY id DESC LIMIT 1 OFFSET ?').get(keep) as Row | undefined;
      if (!edge) return 0;
      return this.db.prepare('DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE id <= ? ORDER BY id LIMIT ?)').run(edge.id, limit).changes;
    });
  }
}
