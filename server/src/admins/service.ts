/**
 * The door for named admins: creating one (its token shown once, only its digest stored),
 * revoking one and giving one a new token, each recorded in the audit log with who acted (the
 * token never is). Who may call which route is in api/access.ts.
 */
import { parseDuration } from '@capstan/shared/config';
import { capstanError } from '@capstan/shared/errors';
import { ADMIN_ROLES, type AdminRecord, type AdminRole } from '../store/admins/types.js';
import type { Store } from '../store/store.js';
import { parseRfc3339 } from '../store/time.js';
import type { Actor } from '../audit/actor.js';
import type { AuditLog } from '../audit/log.js';
import { BOOTSTRAP_ADMIN, newToken, tokenDigest } from './tokens.js';

/** Admin names: what a CLI flag and a log line carry without quoting. */
const NAME = /^[a-z0-9][a-z0-9._@-]{0,63}$/;
/** The longest lifetime a token may be given (`expires`): 10 years. */
export const MAX_LIFETIME_MS = 10 * 365 * 86_400_000;

const bad = (message: string, field?: string) => capstanError('ERR_BAD_REQUEST', message, field ? { details: { field } } : {});

/** `expires`: an RFC 3339 time or a duration from now (`90d`, `12h`), in the future, at most 10 years ahead. */
export function parseExpires(v: unknown, now: Date): string | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'string') throw bad('expires must be an RFC 3339 time or a duration such as 90d', 'expires');
  const at = parseRfc3339(v);
  const ms = at !== undefined ? at - now.getTime() : parseDuration(v);
  if (ms === null || /^\d+$/.test(v.trim())) throw bad('expires must be an RFC 3339 time or a duration such as 90d', 'expires');
  if (ms <= 0) throw bad('expires must be in the future', 'expires');
  if (ms > MAX_LIFETIME_MS) throw bad('expires must be at most 10 years ahead', 'expires');
  return new Date(now.getTime() + ms).toISOString();
}

function checkName(name: unknown): string {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw bad('name must be 1 to 64 characters: lowercase letters, digits, ".", "_", "@", "-", starting with a letter or digit', 'name');
  }
  return name;
}

/** An admin as shown and recorded: never its token or digest. */
export const adminView = (a: AdminRecord) => ({
  name: a.name, role: a.role, created_at: a.created_at, expires_at: a.expires_at, revoked_at: a.revoked_at, last_used_at: a.last_used_at,
});

export class AdminService {
  private readonly now: () => Date;

  constructor(private readonly deps: { store: Store; audit?: AuditLog; now?: () => Date }) {
    this.now = deps.now ?? (() => new Date());
  }

  /** A new admin `{name, role, expires?}`; answers it with its token, shown this once. */
  async create(body: { name?: unknown; role?: unknown; expires?: unknown }, actor: Actor): Promise<ReturnType<typeof adminView> & { token: string }> {
    const name = checkName(body.name);
    if (name === BOOTSTRAP_ADMIN) throw capstanError('ERR_CONFLICT', `${BOOTSTRAP_ADMIN} is the bootstrap admin's reserved name`);
    if (typeof body.role !== 'string' || !ADMIN_ROLES.includes(body.role as AdminRole)) throw bad(`role must be one of ${ADMIN_ROLES.join(', ')}`, 'role');
    const at = this.now();
    const token = newToken();
    const a = await this.deps.store.admins.createAdmin({
      name, role: body.role as AdminRole, token_digest: tokenDigest(token), created_at: at.toISOString(), expires_at: parseExpires(body.expires, at),
    });
    await this.deps.audit?.record(actor, { action: 'admin.create', target: name, before: null, after: adminView(a) });
    return { ...adminView(a), token };
  }

  async revoke(name: string, actor: Actor): Promise<void> {
    const admins = this.deps.store.admins;
    if (name === BOOTSTRAP_ADMIN) throw capstanError('ERR_CONFLICT', 'the bootstrap admin is revoked by replacing the admin.token file');
    const before = await admins.getAdmin(name);
    if (!(await admins.revokeAdmin(name, this.now().toISOString()))) {
      throw before ? capstanError('ERR_CONFLICT', `admin ${name} is revoked already`) : capstanError('ERR_NOT_FOUND', `admin ${name} does not exist`);
    }
    await this.deps.audit?.record(actor, { action: 'admin.revoke', target: name, before: before && adminView(before), after: adminView((await admins.getAdmin(name))!) });
  }

  /** A new token for an admin not revoked; the old one stops working at once. */
  async newToken(name: string, actor: Actor): Promise<ReturnType<typeof adminView> & { token: string }> {
    const admins = this.deps.store.admins;
    if (name === BOOTSTRAP_ADMIN) throw capstanError('ERR_CONFLICT', "the bootstrap admin's token is the admin.token file");
    const token = newToken();
    const a = await admins.replaceToken(name, tokenDigest(token));
    if (!a) throw (await admins.getAdmin(name)) ? capstanError('ERR_CONFLICT', `admin ${name} is revoked`) : capstanError('ERR_NOT_FOUND', `admin ${name} does not exist`);
    await this.deps.audit?.record(actor, { action: 'admin.token', target: name, before: null, after: adminView(a) });
    return { ...adminView(a), token };
  }
}
