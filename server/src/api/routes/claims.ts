/**
 * A node's claim on a discovered instance (providers/claims.ts, docs/providers.md):
 *   GET  /api/1/nodes/<id>/claim           the cloud identity its inventory names and the row it matches
 *   POST /api/1/nodes/<id>/claim/confirm   admin: the node takes over that discovered row
 */
import type { FastifyInstance } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import type { NodeRegistry } from '../../registry/nodes.js';
import type { Reads } from '../../reads.js';
import { confirmClaim, nodeClaim } from '../../providers/claims.js';
import { actorOf } from '../actor.js';
import { listView } from '../node-view.js';

export function claimRoutes(app: FastifyInstance, store: Reads, nodes: NodeRegistry): void {
  app.get<{ Params: { id: string } }>('/api/1/nodes/:id/claim', async (req) => {
    const claim = await nodeClaim(store, req.params.id);
    if (!claim) throw capstanError('ERR_NOT_FOUND', `node ${req.params.id} has no open claim on a cloud identity`);
    return { data: claim };
  });

  app.post<{ Params: { id: string } }>('/api/1/nodes/:id/claim/confirm', async (req) => {
    return { data: listView(await confirmClaim(store, nodes, req.params.id, actorOf(req))) };
  });
}
