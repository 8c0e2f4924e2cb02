/**
 * Admin API: subscriptions to the event stream (webhooks, e-mail) and their messages
 * (docs/events.md):
 *   GET /api/1/subscriptions · POST /api/1/subscriptions · GET|PATCH|DELETE /api/1/subscriptions/<id>
 *   GET /api/1/deliveries?subscription=<id>&state=pending|delivered|dead · GET /api/1/deliveries/<id>
 *   POST /api/1/deliveries/<id>/retry   a dead message sent again
 * A webhook's signing secret is in the answer that creates it, and never again.
 */
import type { FastifyInstance } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import { readJson } from '@capstan/toolkit/http/app';
import type { Reads } from '../../reads.js';
import type { DeliveryState } from '../../reads.js';
import { subscriptionView, type SubscriptionRequest, type SubscriptionService } from '../../notify/service.js';
import { actorOf } from '../actor.js';
import { bodyObject, paging, single, type Query } from '../params.js';

const unknownSub = (id: string) => capstanError('ERR_NOT_FOUND', `no subscription ${id}`);

/** The fields a subscription body may carry (anything else is a typo the caller wants to hear about). */
const FIELDS = ['id', 'name', 'kind', 'url', 'to', 'secret', 'types', 'min_severity', 'filter', 'group_window_ms', 'enabled'] as const;

function deliveryId(v: string): number {
  if (!/^\d{1,15}$/.test(v)) throw capstanError('ERR_NOT_FOUND', `no delivery ${v}`);
  return Number(v);
}

export function subscriptionRoutes(app: FastifyInstance, store: Reads, service: SubscriptionService): void {
  app.get('/api/1/subscriptions', async () => {
    const data = (await store.notify.listSubscriptions()).map(subscriptionView);
    return { data, total: data.length };
  });

  app.post('/api/1/subscriptions', async (req, reply) =>
    reply.code(201).send({ data: await service.create(bodyObject(await readJson(req), FIELDS) as SubscriptionRequest, actorOf(req)) }));

  app.get<{ Params: { id: string } }>('/api/1/subscriptions/:id', async (req) => {
    const s = await store.notify.getSubscription(req.params.id);
    if (!s) throw unknownSub(req.params.id);
    return { data: subscriptionView(s) };
  });

  app.patch<{ Params: { id: string } }>('/api/1/subscriptions/:id', async (req) =>
    ({ data: await service.update(req.params.id, bodyObject(await readJson(req), FIELDS) as SubscriptionRequest, actorOf(req)) }));

  app.delete<{ Params: { id: string } }>('/api/1/subscriptions/:id', async (req, reply) => {
    await service.remove(req.params.id, actorOf(req));
    return reply.code(204).send();
  });

  app.get<{ Querystring: Query }>('/api/1/deliveries', async (req) => {
    const { page, per_page } = paging(req.query, 100);
    const sub = single(req.query, 'subscription');
    const state = single(req.query, 'state') as DeliveryState | undefined;
    return store.notify.listDeliveries({ ...(sub !== undefined && { subscription_id: sub }), ...(state !== undefined && { state }) }, page, per_page);
  });

  app.get<{ Params: { id: string } }>('/api/1/deliveries/:id', async (req) => {
    const d = await store.notify.getDelivery(deliveryId(req.params.id));
    if (!d) throw capstanError('ERR_NOT_FOUND', `no delivery ${req.params.id}`);
    return { data: { ...d, events: await store.getEvents(d.event_ids) } };
  });

  app.post<{ Params: { id: string } }>('/api/1/deliveries/:id/retry', async (req) =>
    ({ data: await service.retry(deliveryId(req.params.id), actorOf(req)) }));
}
