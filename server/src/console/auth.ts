/**
 * Authentication of the admin API: `Authorization: Bearer <token>`, or the console's sign-in
 * cookie. A write made with the cookie (any method but GET and HEAD) must also carry the
 * sign-in's CSRF token in `X-CSRF-Token`: the cookie goes with any request the browser makes,
 * the header only with the console's own. Either way the token is resolved on every request and
 * the principal set on `req.principal` (what role checks and the audit trail read).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import type { ResolveToken } from './principal.js';
import { cookieValue, type ConsoleSignIns } from './signin.js';

export interface AdminAuthDeps {
  resolveToken: ResolveToken;
  /** Console sign-ins (absent: bearer tokens only). */
  signIns?: ConsoleSignIns;
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

export function adminAuthentication(deps: AdminAuthDeps): (req: FastifyRequest, reply: FastifyReply) => Promise<void> {
  return async (req, reply) => {
    const h = req.headers.authorization;
    if (h !== undefined) {
      const m = /^Bearer\s+(\S+)$/i.exec(h);
      if (!m) throw capstanError('ERR_UNAUTHORIZED', 'missing bearer token');
      const principal = await deps.resolveToken(m[1]!);
      if (!principal) throw capstanError('ERR_UNAUTHORIZED', 'invalid token');
      req.principal = principal;
      return;
    }
    const signIns = deps.signIns;
    const value = signIns && cookieValue(req.headers.cookie);
    if (!signIns || value === undefined) throw capstanError('ERR_UNAUTHORIZED', 'missing bearer token');
    const opened = await signIns.open(value);
    if (!opened) {
      reply.header('set-cookie', signIns.setCookie(null));
      throw capstanError('ERR_UNAUTHORIZED', 'the console sign-in has expired or ended: sign in again');
    }
    if (!SAFE_METHODS.has(req.method) && !signIns.csrfMatches(opened.sid, req.headers['x-csrf-token'])) {
      throw capstanError('ERR_CSRF', 'a write made with the console sign-in needs its X-CSRF-Token header');
    }
    const principal = await deps.resolveToken(opened.token);
    if (!principal) {
      reply.header('set-cookie', signIns.setCookie(null));
      throw capstanError('ERR_UNAUTHORIZED', 'the token this sign-in was made with is no longer valid: sign in again');
    }
    req.principal = principal;
  };
}
