/** Named admins and the audit log on PostgreSQL (see types.ts). */
import { capstanError } from '@capstan/shared/errors';
import type { AdminInsert, AdminRecord, AdminStore, AuditInsert, AuditQuery, AuditRecord } from './types.js';
import type { WriteOptions } from '../write-options.js';
import { ADMIN_COLUMNS, AUDIT_COLUMNS, adminFromRow, auditFromRow, auditWhere } from './rows.js';
import type { PostgresDb } from '../postgres/db.js';

type Row = Record<string, unknown>;

export class PostgresAdminStore implements AdminStore {
  constructor(private readonly db: PostgresDb) {}

  async createAdmin(a: AdminInsert): Promise<AdminRecord> {
    // One statement: a revoked row of the same name is replaced, a live one is left alone.
    const r = await this.db.query<Row>('create admin', `INSERT INTO admins (name, role, token_digest, created_at, expires_at, revoked_at, last_used_at)
      VALUES ($1, $2, $3, $4, $5, NULL, NULL)
      ON CONFLICT (name) DO UPDATE SET role = EXCLUDED.role, token_digest = EXCLUDED.token_digest, created_at = EXCLUDED.created_at,
        expires_at = EXCLUDED.expires_at, revoked_at = NULL, last_used_at = NULL
      WHERE admins.revoked_at IS NOT NULL
      RETURNING ${ADMIN_COLUMNS}`, [a.name, a.role, a.token_digest, a.created_at, a.expires_at]);
    if (r.rowCount === 0) throw capstanError('ERR_CONFLICT', `admin ${a.name} exists`);
    return adminFromRow(r.rows[0]!);
  }

  async listAdmins(): Promise<AdminRecord[]> {
    return (await this.db.query<Row>('list admins', `SELECT ${ADMIN_COLUMNS} FROM admins ORDER BY name COLLATE "C"`, [])).rows.map(adminFromRow);
  }

  async getAdmin(name: string): Promise<AdminRecord | null> {
    const r = await this.db.query<Row>('get admin', `SELECT ${ADMIN_COLUMNS} FROM admins WHERE name = $1`, [name]);
    return r.rows[0] ? adminFromRow(r.rows[0]) : null;
  }

  async adminByDigest(digest: string): Promise<(AdminRecord & { token_digest: string }) | null> {
    const r = await this.db.query<Row>('find admin', `SELECT ${ADMIN_COLUMNS}, token_digest FROM admins WHERE token_digest = $1`, [digest]);
    return r.rows[0] ? { ...adminFromRow(r.rows[0]), token_digest: String(r.rows[0].token_digest) } : null;
  }

  async revokeAdmin(name: string, at: string): Promise<boolean> {
    return ((await this.db.query<Row>('revoke admin', 'UPDATE admins SET revoked_at = $1 WHERE name = $2 AND revoked_at IS NULL', [at, name])).rowCount ?? 0) > 0;
  }

  async replaceToken(name: string, digest: string): Promise<AdminRecord | null> {
    const r = await this.db.query<Row>('replace admin token', `UPDATE admins SET token_digest = $1 WHERE name = $2 AND revoked_at IS NULL RETURNING ${ADMIN_COLUMNS}`, [digest, name]);
    return r.rows[0] ? adminFromRow(r.rows[0]) : null;
  }

  async touchAdmin(name: string, at: string): Promise<void> {
    await this.db.query<Row>('touch admin', 'UPDATE admins SET last_used_at = $1 WHERE name = $2', [at, name]);
  }

  async endConsoleSignIn(sid: string, expiresAt: string, now: string): Promise<void> {
    await this.db.query<Row>('end console sign-in', 'DELETE FROM console_signouts WHERE expires_at < $1', [now]);
    await this.db.query<Row>('end console sign-in', 'INSERT INTO console_signouts (sid, expires_at) VALUES ($1, $2) ON CONFLICT (sid) DO NOTHING', [sid, expiresAt]);
  }

  async consoleSignInEnded(sid: string, now: string): Promise<boolean> {
    return (await this.db.query<Row>('console sign-in ended', 'SELECT 1 FROM console_signouts WHERE sid = $1 AND expires_at >= $2', [sid, now])).rows.length > 0;
  }

  async insertAudit(r: AuditInsert, _opts?: WriteOptions): Promise<void> {
    await this.db.query<Row>('record audit', `INSERT INTO audit_log (at, admin, role, actor_kind, actor, action, target, method, path, address, status, error, before_state, after_state)
      VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
    [r.at, r.admin, r.role, r.actor_kind, r.actor, r.action, r.target, r.method, r.path, r.address, r.status, r.error,
      r.before === null || r.before === undefined ? null : JSON.stringify(r.before), r.after === null || r.after === undefined ? null : JSON.stringify(r.after)]);
  }

  async listAudit(q: AuditQuery): Promise<{ rows: AuditRecord[]; total: number }> {
    const values: unknown[] = [];
    const where = auditWhere(q, (v) => (values.push(v), `$${values.length}`));
    const total = Number((await this.db.query<Row>('count audit', `SELECT count(*) AS n FROM audit_log ${where}`, values)).rows[0]!.n);
    const n = values.length;
    const r = await this.db.query<Row>('list audit', `SELECT ${AUDIT_COLUMNS} FROM audit_log ${where} ORDER BY at DESC, id DESC LIMIT $${n + 1} OFFSET $${n + 2}`,
      [...values, q.per_page, (q.page - 1) * q.per_page]);
    return { rows: r.rows.map(auditFromRow), total };
  }

  async deleteAuditBefore(before: string, limit: number): Promise<number> {
    const r = await this.db.query<Row>('delete audit', 'DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE at < $1 ORDER BY at LIMIT $2)', [before, limit]);
    return r.rowCount ?? 0;
  }

  async trimAudit(keep: number, limit: number): Promise<number> {
    const edge = await this.db.query<Row>('trim audit', 'SELECT id FROM audit_log ORDER BY id DESC LIMIT 1 OFFSET $1', [keep]);
    if (!edge.rows[0]) return 0;
    const r = await this.db.query<Row>('trim audit', 'DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE id <= $1 ORDER BY id LIMIT $2)', [edge.rows[0].id, limit]);
    return r.rowCount ?? 0;
  }
}
