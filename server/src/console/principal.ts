/**
 * Who makes an admin request: the principal a token resolves to. Today the only token is the
 * admin token (one principal, `admin`, role `admin`); named admins with roles resolve their own
 * tokens through the same `ResolveToken` shape, so the console and the API take either.
 */
import { createHash, timingSafeEqual } from 'node:crypto';

// One principal type for the API and the console: api/auth.ts owns it (with req.principal).
export type { Principal, ResolveToken, Role } from '../api/auth.js';
import type { ResolveToken } from '../api/auth.js';

const digest = (s: string) => createHash('sha256').update(s).digest();

/** The single admin token as a ResolveToken: compared in constant time (digests of equal length). */
export function adminTokenResolver(adminToken: string): ResolveToken {
  const expected = digest(adminToken);
  return async (token) => (timingSafeEqual(digest(token), expected) ? { name: 'admin', role: 'admin' } : null);
}
