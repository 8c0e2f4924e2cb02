/**
 * The actor of an admin request, made once from its principal and carried into the domain. The
 * changes the domain makes for it (object before and after) are held on it until the answer is
 * known; the audit hook (access.ts) then writes them with the request and its status.
 */
import type { FastifyRequest } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import type { Actor } from '../audit/actor.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The admin acting through this request, once actorOf has made it. */
    actor?: Actor;
  }
}

export function actorOf(req: FastifyRequest): Actor {
  if (req.actor) return req.actor;
  const p = req.principal;
  if (!p) throw capstanError('ERR_UNAUTHORIZED', 'missing bearer token');
  req.actor = {
    kind: 'admin', name: p.name, role: p.role,
    request: { method: req.method, path: req.url.length > 2048 ? req.url.slice(0, 2048) : req.url, address: req.ip },
    pending: [],
  };
  return req.actor;
}
