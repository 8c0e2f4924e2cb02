/**
 * Named admins and the audit log in the store (both backends, migrations 16 and 17). An admin's token is
 * never stored: only its sha256 digest, looked up when a request presents the token. The audit
 * log is append-only for the API; the lifecycle sweep deletes what is older than
 * `retention.audit` and what is above `retention.audit_max_rows`.
 */
import type { WriteOptions } from '../write-options.js';
import { lookup, REFUSE, STRIP, type NulRules } from '../guard.js';

export type AdminRole = 'admin' | 'operator' | 'viewer';
export const ADMIN_ROLES: readonly AdminRole[] = ['viewer', 'operator', 'admin'];

export interface AdminRecord {
  name: string;
  role: AdminRole;
  created_at: string;
  expires_at: string | null;
  revoked_at: string | null;
  last_used_at: string | null;
}

export interface AdminInsert {
  name: string;
  role: AdminRole;
  /** sha256 hex of the token. */
  token_digest: string;
  created_at: string;
  expires_at: string | null;
}

/** Who made a recorded change (server/src/audit/actor.ts). */
export type AuditActorKind = 'admin' | 'node' | 'relay' | 'system';

export interface AuditInsert {
  at: string;
  /** The admin who acted; null when the caller was not authenticated (a 401) or was not an admin. */
  admin: string | null;
  role: AdminRole | null;
  /** What kind of actor made the change, and its name (an admin's, a node's id, `sweep`). */
  actor_kind: AuditActorKind;
  actor: string | null;
  action: string;
  target: string | null;
  method: string;
  path: string;
  address: string;
  status: number;
  /** The error code of a refused or failed request. */
  error: string | null;
  /** The object before and after the change (null: it did not exist / no longer exists, or not recorded). */
  before: unknown;
  after: unknown;
}

export interface AuditRecord extends AuditInsert {
  id: number;
}

export interface AuditQuery {
  from?: string;
  to?: string;
  admin?: string;
  /** Any actor by name: an admin, a node or relay id, or a part of the server (`sweep`). */
  actor?: string;
  action?: string;
  target?: string;
  /** ok: status below 400; error: 400 and above. */
  result?: 'ok' | 'error';
  page: number;
  per_page: number;
}

export interface AdminStore {
  /**
   * A new admin. ERR_CONFLICT when the name is taken by an admin not revoked; a revoked name may
   * be given again (its row is replaced: the audit log keeps the history by name).
   */
  createAdmin(a: AdminInsert): Promise<AdminRecord>;
  listAdmins(): Promise<AdminRecord[]>;
  getAdmin(name: string): Promise<AdminRecord | null>;
  /** The admin holding a token with this digest (revoked and expired ones too: the caller decides). */
  adminByDigest(digest: string): Promise<(AdminRecord & { token_digest: string }) | null>;
  /** Revoke; false when unknown or revoked already. */
  revokeAdmin(name: string, at: string): Promise<boolean>;
  /** Replace the token of an admin not revoked; null when there is none. */
  replaceToken(name: string, digest: string): Promise<AdminRecord | null>;
  touchAdmin(name: string, at: string): Promise<void>;
  /** Record a console sign-out until `expiresAt` (RFC 3339), dropping those expired before `now`. */
  endConsoleSignIn(sid: string, expiresAt: string, now: string): Promise<void>;
  /** Whether a console sign-in was ended (and has not expired since). */
  consoleSignInEnded(sid: string, now: string): Promise<boolean>;

  insertAudit(r: AuditInsert, opts?: WriteOptions): Promise<void>;
  /** Newest first. */
  listAudit(q: AuditQuery): Promise<{ rows: AuditRecord[]; total: number }>;
  /** Delete up to `limit` records older than `before`; returns how many. */
  deleteAuditBefore(before: string, limit: number): Promise<number>;
  /** Delete up to `limit` of the oldest records beyond the newest `keep`; returns how many. */
  trimAudit(keep: number, limit: number): Promise<number>;
}

/** How each admins method treats U+0000 (guard.ts). */
export const ADMINS_NUL: NulRules<AdminStore> = {
  createAdmin: REFUSE,
  listAdmins: REFUSE,
  getAdmin: lookup([0], () => null),
  adminByDigest: lookup([0], () => null),
  revokeAdmin: lookup([0], () => false),
  replaceToken: lookup([0], () => null),
  touchAdmin: lookup([0], () => undefined),
  // Sign-in ids are base64url made by the server: one with U+0000 was never made, so never ended.
  endConsoleSignIn: REFUSE,
  consoleSignInEnded: lookup([0], () => false),
  insertAudit: STRIP,
  listAudit: lookup([0], () => ({ rows: [], total: 0 })),
  deleteAuditBefore: REFUSE,
  trimAudit: REFUSE,
};
