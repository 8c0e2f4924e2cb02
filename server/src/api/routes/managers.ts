/**
 * Managers: discovery sources and the nodes they hold.
 * Admin API (bearer token), under /api/1/managers:
 *   GET / · POST / · GET /<id> · PUT /<id> · DELETE /<id>?nodes=keep|delete|state:<state>
 *   POST /<id>/test   connection test: {reachable, error?} with the cloud's error
 *   POST /<id>/poll   poll a server-hosted manager now
 * Relay-facing, beside the other relay→upstream calls (outbound from the relay, relayed
 * unchanged by intermediate relays), with the relay's own token (`Authorization: Bearer`, a token
 * with `capstan_role: "relay"` naming <relay-id>; identity/relay-auth.ts) unless
 * `[identity] require_relay_token = false`. The answer holds credential *references* only, and a
 * relay may only post for the managers assigned to it:
 *   GET  /relay-api/1/providers/<relay-id>/managers
 *   POST /relay-api/1/providers/<relay-id>/managers/<id>/discovery   {instances} | {error}
 */
import type { FastifyInstance } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import { readJson } from '@capstan/toolkit/http/app';
import { driverFor, PROVIDER_ID, type ManagerSpec } from '@capstan/toolkit/providers/index';
import type { Reads } from '../../reads.js';
import type { ManagerService } from '../../providers/service.js';
import { relayActor } from '../../audit/actor.js';
import { actorOf } from '../actor.js';
import type { RelayAuthorizer } from '../../identity/relay-auth.js';
import {
  managerView, parseNodesChoice, recordToSpec, MAX_INSTANCES_PER_POLL,
} from '../../providers/managers.js';

export const RELAY_PROVIDERS_PATH = '/relay-api/1/providers';
/** A discovery post: ~1 kB per instance at most. */
const MAX_DISCOVERY_BYTES = MAX_INSTANCES_PER_POLL * 1024;

export interface ManagerRouteDeps {
  store: Reads;
  /** The door for managers (providers/service.ts). */
  service: ManagerService;
  /** Poll a server-hosted manager now (absent: the server hosts no providers). */
  pollNow?: (id: string) => Promise<void>;
  /** Where `env` credential references of server-hosted managers are read. */
  env?: NodeJS.ProcessEnv;
}

async function mustGet(store: Reads, id: string) {
  const m = await store.managers.getManager(id);
  if (!m) throw capstanError('ERR_MANAGER_UNKNOWN', `manager ${id} is unknown`);
  return m;
}

export function managerAdminRoutes(app: FastifyInstance, deps: ManagerRouteDeps): void {
  const { store, service } = deps;

  app.get('/api/1/managers', async () => ({ data: (await store.managers.listManagers()).map(managerView) }));

  app.post('/api/1/managers', async (req, reply) => reply.code(201).send({ data: managerView(await service.create(await readJson(req), actorOf(req))) }));

  app.get<{ Params: { id: string } }>('/api/1/managers/:id', async (req) => ({ data: managerView(await mustGet(store, req.params.id)) }));

  app.put<{ Params: { id: string } }>('/api/1/managers/:id', async (req) => ({ data: managerView(await service.update(req.params.id, await readJson(req), actorOf(req))) }));

  app.delete<{ Params: { id: string }; Querystring: { nodes?: string } }>('/api/1/managers/:id', async (req) => {
    const choice = parseNodesChoice(req.query.nodes);
    return { data: await service.delete(req.params.id, choice, actorOf(req)) };
  });

  app.post<{ Params: { id: string } }>('/api/1/managers/:id/test', async (req) => {
    const m = await mustGet(store, req.params.id);
    if (m.provider !== 'server') {
      // The credentials live on the relay, which only connects outward: its last poll is the
      // test (a failed poll posts the cloud's error). Unknown until the relay's first poll.
      return {
        data: m.last_poll_at === null
          ? { reachable: null, hosted_by: m.provider, error: 'the hosting relay has not polled this manager yet' }
          : { reachable: m.last_poll_error === null, hosted_by: m.provider, as_of: m.last_poll_at, ...(m.last_poll_error !== null && { error: m.last_poll_error }) },
      };
    }
    const driver = await driverFor(recordToSpec(m), { env: deps.env ?? process.env });
    return { data: await driver.test(AbortSignal.timeout(60_000)) };
  });

  app.post<{ Params: { id: string } }>('/api/1/managers/:id/poll', async (req) => {
    const m = await mustGet(store, req.params.id);
    if (m.provider !== 'server' || !deps.pollNow) throw capstanError('ERR_CONFLICT', `manager ${m.id} is not polled by this server (provider ${m.provider})`);
    await deps.pollNow(m.id);
    return { data: managerView(await mustGet(store, m.id)) };
  });
}

export function managerRelayRoutes(app: FastifyInstance, store: Reads, service: ManagerService, authorizeRelay?: RelayAuthorizer): void {
  const relayId = async (id: string, authorization: string | string[] | undefined) => {
    if (!PROVIDER_ID.test(id) || id === 'server') throw capstanError('ERR_BAD_REQUEST', 'invalid relay id');
    if (authorizeRelay) await authorizeRelay(authorization, id);
    return id;
  };

  app.get<{ Params: { relay: string } }>(`${RELAY_PROVIDERS_PATH}/:relay/managers`, async (req) => {
    const specs: ManagerSpec[] = (await store.managers.listManagers(await relayId(req.params.relay, req.headers.authorization))).map(recordToSpec);
    return { data: specs };
  });

  app.post<{ Params: { relay: string; id: string } }>(`${RELAY_PROVIDERS_PATH}/:relay/managers/:id/discovery`, async (req) => {
    const relay = await relayId(req.params.relay, req.headers.authorization);
    const m = await store.managers.getManager(req.params.id);
    // The same answer for unknown and not-yours: a relay learns nothing of others' managers.
    if (!m || m.provider !== relay) throw capstanError('ERR_MANAGER_UNKNOWN', `relay ${relay} hosts no manager ${req.params.id}`);
    const body = await readJson(req, MAX_DISCOVERY_BYTES) as Record<string, unknown> | undefined;
    if (!body || typeof body !== 'object') throw capstanError('ERR_BAD_REQUEST', 'body must be {instances} or {error}');
    let outcome: { instances: unknown[] } | { error: string };
    if (typeof body.error === 'string') outcome = { error: body.error };
    else if (Array.isArray(body.instances)) outcome = { instances: body.instances };
    else throw capstanError('ERR_BAD_REQUEST', 'body must be {instances: [...]} or {error: "..."}');
    // The server's clock, like every contact time: a relay's clock is not trusted for lifecycle times.
    return { data: await service.poll(m.id, outcome, relayActor(relay)) };
  });
}
