/**
 * Admin API: change requests (server/src/policy/reviews.ts).
 *   POST /api/1/change-requests                       propose {title, description?, directives?, groups?, rules?, delete?}
 *   GET  /api/1/change-requests?status=&page=         newest first
 *   GET  /api/1/change-requests/<id>                  with its impact, reviews and `stale` objects
 *   GET  /api/1/change-requests/<id>/nodes/<node>     one node's directives before and after
 *   POST /api/1/change-requests/<id>/approve|reject   {comment?}: another admin than its author
 *   POST /api/1/change-requests/<id>/deploy           apply exactly what was reviewed (409 ERR_CHANGE_STALE when its objects changed)
 */
import type { FastifyInstance } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import { readJson } from '@capstan/toolkit/http/app';
import type { ChangeRequestService } from '../../policy/reviews.js';
import type { PlanBounds } from '../../policy/plan-memory.js';
import type { PlanBudget } from '../plan-budget.js';
import { CHANGE_REQUEST_STATUSES, type ChangeRequestStatus } from '../../reads.js';
import { actorOf } from '../actor.js';
import { bodyObject, paging, single, type Query } from '../params.js';
import { namingField } from './policies.js';

/**
 * A proposal's impact is a plan, and a node's diff renders every node the request reaches: both
 * run under the plans' budget ([policy] plan_*, api/plan-budget.ts), as POST /api/1/policy/plan.
 */
export function changeRequestRoutes(app: FastifyInstance, reviews: ChangeRequestService, budget?: PlanBudget): void {
  app.post('/api/1/change-requests', async (req, reply) => namingField(reply, async () => {
    const body = await readJson(req);
    const actor = actorOf(req);
    const data = budget ? await budget.run(`${actor.kind}:${actor.name}`, (b) => reviews.propose(body, actor, b)) : await reviews.propose(body, actor);
    return reply.code(201).send({ data });
  }));

  app.get<{ Querystring: Query }>('/api/1/change-requests', async (req) => {
    const { page, per_page } = paging(req.query, 50);
    const status = single(req.query, 'status');
    if (status !== undefined && !CHANGE_REQUEST_STATUSES.includes(status as ChangeRequestStatus)) {
      throw capstanError('ERR_BAD_REQUEST', `status must be one of ${CHANGE_REQUEST_STATUSES.join(', ')}`);
    }
    const res = await reviews.list(status as ChangeRequestStatus | undefined, page, per_page);
    // The list leaves out the impact's node lists (the request's own page has them).
    return { data: res.data.map(({ impact, ...r }) => ({ ...r, nodes_total: (impact as { nodes_total?: number }).nodes_total ?? 0 })), total: res.total, page, per_page };
  });

  app.get<{ Params: { id: string } }>('/api/1/change-requests/:id', async (req) => ({ data: await reviews.get(req.params.id) }));
  app.get<{ Params: { id: string; node: string } }>('/api/1/change-requests/:id/nodes/:node', async (req) => {
    const actor = actorOf(req);
    const diff = (b?: PlanBounds) => reviews.nodeDiff(req.params.id, req.params.node, b);
    return { data: budget ? await budget.run(`${actor.kind}:${actor.name}`, diff) : await diff() };
  });

  for (const verdict of ['approve', 'reject'] as const) {
    app.post<{ Params: { id: string } }>(`/api/1/change-requests/:id/${verdict}`, async (req) => {
      const body = bodyObject((await readJson(req)) ?? {}, ['comment']);
      return { data: await reviews.review(req.params.id, verdict === 'approve' ? 'approved' : 'rejected', body.comment, actorOf(req)) };
    });
  }
  app.post<{ Params: { id: string } }>('/api/1/change-requests/:id/deploy', async (req) => ({ data: await reviews.deploy(req.params.id, actorOf(req)) }));
}
