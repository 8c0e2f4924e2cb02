/**
 * Who may call system/* and remote-run/*: a loopback client, or one that shows the admin token
 * (`Authorization: Bearer <token>`). RUDDER keeps these behind Apache (system/* is never proxied,
 * remote-run only for the relay's own policy server); Capstan has no Apache in front, so the
 * relay checks for itself.
 */
import { timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { capstanError } from '@capstan/shared/errors';

export function isLoopback(address: string | undefined): boolean {
  if (!address) return false;
  if (address === '::1') return true;
  const v4 = address.startsWith('::ffff:') ? address.slice(7) : address;
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(v4);
}

/** Constant-time comparison of the bearer token (no early exit on the first differing byte). */
export function tokenMatches(header: string | undefined, token: string | null): boolean {
  if (!token || !header) return false;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!m) return false;
  const a = Buffer.from(m[1]!);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** A preHandler that refuses (403 ERR_FORBIDDEN) anyone neither local nor holding the token. */
export function adminOnly(token: () => string | null, loopbackIsAdmin = true) {
  return async (req: FastifyRequest): Promise<void> => {
    if (loopbackIsAdmin && isLoopback(req.socket.remoteAddress)) return;
    if (tokenMatches(req.headers.authorization, token())) return;
    throw capstanError('ERR_FORBIDDEN', 'this endpoint answers loopback clients or the admin token only');
  };
}
