/**
 * Who is calling the admin API.
 *
 * - The bootstrap admin: the token written to <data-dir>/admin.token (0600) on first start, the
 *   admin named `admin` with role `admin` (a reserved name).
 * - Named admins (POST /api/1/admins): random 32-byte tokens, stored as their sha256 digest
 *   only, with a role, an optional expiry and a revocation time.
 *
 * A request's principal is set from its bearer token or its console sign-in cookie (the console's
 * adminAuthentication, with resolveToken below), then the role check (access.ts) reads
 * `req.principal`.
 */
import { randomBytes, timingSafeEqual, createHash } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '@capstan/shared/log';
import type { AdminRole, AdminStore } from '../reads.js';

export type Role = AdminRole;

export interface Principal {
  name: string;
  role: Role;
  /** Absent: the token does not expire. */
  expiresAt?: string;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Who is calling, once an authenticator has recognised them (admin API only). */
    principal?: Principal;
  }
}

/** The bootstrap admin's name and role: no named admin may take the name. */
export { BOOTSTRAP_ADMIN, newToken, tokenDigest } from '../admins/tokens.js';
import { BOOTSTRAP_ADMIN, tokenDigest } from '../admins/tokens.js';

const RANK: Record<Role, number> = { viewer: 0, operator: 1, admin: 2 };

/** Does `role` include everything `needed` may do? */
export const roleAllows = (role: Role, needed: Role): boolean => RANK[role] >= RANK[needed];

export async function ensureAdminToken(dataDir: string): Promise<string> {
  const path = join(dataDir, 'admin.token');
  try {
    const token = (await readFile(path, 'utf8')).trim();
    if (token.length >= 16) return token;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const token = randomBytes(32).toString('base64url');
  // 'wx' so two server processes starting at once cannot overwrite each other's token.
  await writeFile(path, `${token}\n`, { mode: 0o600, flag: 'wx' }).catch(async (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EEXIST') throw err;
  });
  return (await readFile(path, 'utf8')).trim();
}

/** A new admin token: 32 random bytes, base64url. */

export interface TokenResolverDeps {
  /** The bootstrap admin's token (admin.token). */
  adminToken: string;
  admins: AdminStore;
  log?: Logger;
  now?: () => Date;
  /** last_used_at is written at most this often per admin (default 60 s): not one write per GET. */
  touchEveryMs?: number;
}

export type ResolveToken = (token: string) => Promise<Principal | null>;

/**
 * The principal a token stands for, or null (unknown, revoked or expired). The digest is looked
 * up, then compared again in constant time with what the store returned.
 */
export function tokenResolver(deps: TokenResolverDeps): ResolveToken {
  const bootstrap = createHash('sha256').update(deps.adminToken).digest();
  const now = deps.now ?? (() => new Date());
  const touchEvery = deps.touchEveryMs ?? 60_000;
  const touched = new Map<string, number>();
  return async (token) => {
    const digest = createHash('sha256').update(token).digest();
    if (timingSafeEqual(digest, bootstrap)) return { name: BOOTSTRAP_ADMIN, role: 'admin' };
    const hex = digest.toString('hex');
    const a = await deps.admins.adminByDigest(hex);
    if (!a || !timingSafeEqual(Buffer.from(a.token_digest, 'hex'), digest)) return null;
    const t = now();
    if (a.revoked_at !== null || (a.expires_at !== null && Date.parse(a.expires_at) <= t.getTime())) return null;
    const last = touched.get(a.name) ?? 0;
    if (t.getTime() - last >= touchEvery) {
      touched.set(a.name, t.getTime());
      if (touched.size > 10_000) touched.clear();
      // Best effort: a failed write of last_used_at does not refuse the request.
      await deps.admins.touchAdmin(a.name, t.toISOString()).catch((err) => deps.log?.warn({ err }, 'cannot record admin use'));
    }
    return { name: a.name, role: a.role, ...(a.expires_at !== null && { expiresAt: a.expires_at }) };
  };
}
