/**
 * Admin API: patch campaigns under /api/1/campaigns (see docs/campaigns.md).
 *   POST /api/1/campaigns                          create (targets resolved, waves split) → 201 {data}
 *   GET  /api/1/campaigns[?state=&page=&per_page=] newest first
 *   GET  /api/1/campaigns/<id>                     the campaign: spec, waves, per-node results
 *   GET  /api/1/campaigns/<id>/report              summary, waves, per-node from→to, exit codes, output
 *   POST /api/1/campaigns/<id>/cancel              cancel its running wave and the rest
 */
import type { FastifyInstance } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import { readJson } from '@capstan/toolkit/http/app';
import { parseCampaignRequest } from '../../campaigns/plan.js';
import { CAMPAIGN_STATES, type CampaignService, type CampaignState } from '../../campaigns/service.js';
import { actorOf } from '../actor.js';
import { paging, single, type Query } from '../params.js';

export interface CampaignRouteDeps {
  /** The door for campaigns (campaigns/service.ts): reads, creating and cancelling them. */
  service: CampaignService;
}

export function campaignRoutes(app: FastifyInstance, deps: CampaignRouteDeps): void {
  app.post('/api/1/campaigns', async (req, reply) => {
    const request = parseCampaignRequest(await readJson(req), deps.service.limits);
    return reply.code(201).send({ data: await deps.service.create(request, actorOf(req)) });
  });

  app.get<{ Querystring: Query }>('/api/1/campaigns', async (req) => {
    const q = req.query;
    for (const k of Object.keys(q)) if (!['state', 'page', 'per_page'].includes(k)) throw capstanError('ERR_BAD_REQUEST', `unknown parameter ${k}`);
    const state = single(q, 'state');
    if (state !== undefined && !CAMPAIGN_STATES.includes(state as CampaignState)) throw capstanError('ERR_BAD_REQUEST', `state must be one of ${CAMPAIGN_STATES.join(', ')}`);
    const { page, per_page } = paging(q, 50);
    return { ...(await deps.service.list(page, per_page, state as CampaignState | undefined)), page, per_page };
  });

  app.get<{ Params: { id: string } }>('/api/1/campaigns/:id', async (req) => ({ data: await deps.service.get(req.params.id) }));

  app.get<{ Params: { id: string } }>('/api/1/campaigns/:id/report', async (req) => ({ data: await deps.service.report(req.params.id) }));

  app.post<{ Params: { id: string } }>('/api/1/campaigns/:id/cancel', async (req) => ({ data: await deps.service.cancel(req.params.id, actorOf(req)) }));
}
