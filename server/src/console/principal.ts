/**
 * Who makes an admin request: the principal a token resolves to. Today the only token is the
 * admin token (one principal, `admin`, role `admin`); named admins with roles resolve their own
 * tokens through the same `ResolveToken` shape, so the console and the API take either.
 */
import { createHash, timingSafeEqual } from 'node:crypto';

export type Role = 'admin' | 'operator' | 'viewer';

export interface Principal {
  name: string;
  role: Role;
  /** When the token stops being valid (named admins' tokens may expire), ISO 8601. */
  expiresAt?: string;
}

/** Resolve a bearer token to its principal; null when no principal holds it. */
export type ResolveToken = (token: string) => Promise<Principal | null>;

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the admin API's authentication (bearer token or console sign-in). */
    principal?: Principal;
  }
}

const digest = (s: string) => createHash('sha256').update(s).digest();

/** The single admin token as a ResolveToken: compared in constant time (digests of equal length). */
export function adminTokenResolver(adminToken: string): ResolveToken {
  const expected = digest(adminToken);
  return async (token) => (timingSafeEqual(digest(token), expected) ? { name: 'admin', role: 'admin' } : null);
}
