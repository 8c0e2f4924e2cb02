/**
 * RUDDER's system routes with its JSON envelope (R/src/api.rs `ApiResponse`, fields in its order):
 * `{"data":…,"result":"success","action":"…"}`, or `{"result":"error","action":"…","errorDetails":"…"}`
 * with HTTP 500. Answer loopback clients or the admin token only (see ../access.ts).
 */
import type { FastifyInstance, FastifyReply } from 'fastify';
import { CAPSTAN_VERSION } from '@capstan/shared/protocol';
import { adminOnly } from '../access.js';
import type { RelayContext } from '../context.js';

export function success(reply: FastifyReply, action: string, data?: unknown): FastifyReply {
  return reply.code(200).send(data === undefined ? { result: 'success', action } : { data, result: 'success', action });
}

export function failure(reply: FastifyReply, action: string, details: string): FastifyReply {
  return reply.code(500).send({ result: 'error', action, errorDetails: details });
}

export function systemRoutes(app: FastifyInstance, ctx: RelayContext): void {
  const api = '/rudder/relay-api/1/system';
  const preHandler = adminOnly(ctx.adminToken, ctx.loopbackIsAdmin ?? true);

  app.get(`${api}/info`, { preHandler }, async (_req, reply) =>
    success(reply, 'getSystemInfo', {
      'major-version': CAPSTAN_VERSION.split('.').slice(0, 2).join('.'),
      'full-version': CAPSTAN_VERSION,
      'node-id': ctx.config.general.node_id,
    }),
  );

  app.get(`${api}/status`, { preHandler }, async (_req, reply) => success(reply, 'getStatus', await ctx.status()));

  app.post(`${api}/reload`, { preHandler }, async (_req, reply) => {
    try {
      await ctx.reload();
    } catch (err) {
      ctx.log.warn({ err }, 'reload failed');
      return failure(reply, 'reloadConfiguration', (err as Error).message);
    }
    return success(reply, 'reloadConfiguration');
  });
}
