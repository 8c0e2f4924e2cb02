/** What the two backends share about admins and the audit log: row mapping and the audit filter. */
import type { AdminRecord, AdminRole, AuditQuery, AuditRecord } from './types.js';
import { toUtcIso } from '../time.js';

type Row = Record<string, unknown>;

/** Timestamps come back as text (SQLite) or Date (PostgreSQL). */
export const isoOrNull = (v: unknown): string | null =>
  v === null || v === undefined ? null : v instanceof Date ? v.toISOString() : new Date(String(v)).toISOString();

export const ADMIN_COLUMNS = 'name, role, created_at, expires_at, revoked_at, last_used_at';
export const AUDIT_COLUMNS = 'id, at, admin, role, actor_kind, actor, action, target, method, path, address, status, error, before_state, after_state';

/** before/after as stored: JSON text (SQLite) or jsonb (PostgreSQL, parsed by the driver). */
const json = (v: unknown): unknown => (v === null || v === undefined ? null : typeof v === 'string' ? JSON.parse(v) : v);

export function adminFromRow(r: Row): AdminRecord {
  return {
    name: String(r.name),
    role: r.role as AdminRole,
    created_at: isoOrNull(r.created_at)!,
    expires_at: isoOrNull(r.expires_at),
    revoked_at: isoOrNull(r.revoked_at),
    last_used_at: isoOrNull(r.last_used_at),
  };
}

export function auditFromRow(r: Row): AuditRecord {
  return {
    id: Number(r.id),
    at: isoOrNull(r.at)!,
    admin: (r.admin as string | null) ?? null,
    role: (r.role as AdminRole | null) ?? null,
    actor_kind: (r.actor_kind as AuditRecord['actor_kind'] | null) ?? 'admin',
    actor: (r.actor as string | null) ?? (r.admin as string | null) ?? null,
    action: String(r.action),
    target: (r.target as string | null) ?? null,
    method: String(r.method),
    path: String(r.path),
    address: String(r.address),
    status: Number(r.status),
    error: (r.error as string | null) ?? null,
    before: json(r.before_state),
    after: json(r.after_state),
  };
}

/** The WHERE clause of an audit query, with `param` naming each value in the dialect's style. */
export function auditWhere(q: AuditQuery, param: (v: unknown) => string): string {
  const where: string[] = [];
  if (q.from !== undefined) where.push(`at >= ${param(toUtcIso(q.from, 'from'))}`);
  if (q.to !== undefined) where.push(`at < ${param(toUtcIso(q.to, 'to'))}`);
  if (q.admin !== undefined) where.push(`admin = ${param(q.admin)}`);
  if (q.actor !== undefined) where.push(`actor = ${param(q.actor)}`);
  if (q.action !== undefined) where.push(`action = ${param(q.action)}`);
  if (q.target !== undefined) where.push(`target = ${param(q.target)}`);
  if (q.result === 'ok') where.push('status < 400');
  if (q.result === 'error') where.push('status >= 400');
  return where.length ? `WHERE ${where.join(' AND ')}` : '';
}
