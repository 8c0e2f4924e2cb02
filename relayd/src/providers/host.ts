/**
 * The relay as a provider host (issue 8). It asks its upstream which managers it hosts
 * (GET /relay-api/1/providers/<node_id>/managers), polls each from here — inside the network it
 * discovers, with credentials referenced from this host's environment — and posts each poll's
 * outcome upstream (POST …/managers/<id>/discovery). Only outbound calls, through the same
 * upstream client (TLS pinning, CA) as the forwarded files. A sub-relay's calls reach the
 * server through the routes below, passed up unchanged.
 */
import type { FastifyInstance } from 'fastify';
import { Poller, type ManagerSpec } from '@capstan/shared/providers/index';
import { capstanError, readBody, type Logger } from '../shared.js';
import type { Upstream } from '../forward/upstream.js';

export const PROVIDERS_PATH = '/relay-api/1/providers';
const MAX_DISCOVERY_BYTES = 100 * 1024 * 1024;
const ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

export interface ProviderHostOptions {
  upstream: Upstream;
  relayId: string;
  refreshMs: number;
  timeoutMs: number;
  log: Logger;
  env?: NodeJS.ProcessEnv;
}

export function providerHost(o: ProviderHostOptions): Poller {
  const base = `${PROVIDERS_PATH}/${encodeURIComponent(o.relayId)}/managers`;
  return new Poller({
    refreshMs: o.refreshMs,
    log: o.log,
    env: o.env ?? process.env,
    managers: async () => {
      const res = await o.upstream.request({ method: 'GET', path: base, headers: { accept: 'application/json' }, timeoutMs: o.timeoutMs });
      const text = await res.body.text();
      if (res.statusCode !== 200) throw capstanError('ERR_UPSTREAM', `upstream answered ${res.statusCode} for the managers of ${o.relayId}`);
      const specs = (JSON.parse(text) as { data: ManagerSpec[] }).data;
      if (!Array.isArray(specs)) throw capstanError('ERR_UPSTREAM', 'upstream sent no manager list');
      return specs;
    },
    report: async (spec, outcome) => {
      const res = await o.upstream.request({
        method: 'POST', path: `${base}/${encodeURIComponent(spec.id)}/discovery`, timeoutMs: o.timeoutMs,
        headers: { 'content-type': 'application/json' }, body: Buffer.from(JSON.stringify(outcome)),
      });
      const text = await res.body.text();
      if (res.statusCode !== 200) throw capstanError('ERR_UPSTREAM', `upstream answered ${res.statusCode} to discovery of ${spec.id}: ${text.slice(0, 300)}`);
      o.log.debug({ manager: spec.id, result: text.slice(0, 300) }, 'discovery posted upstream');
    },
  });
}

/** Sub-relays' provider calls, passed to the upstream as they came (status and body back as is). */
export function providerForwardRoutes(app: FastifyInstance, upstream: Upstream, timeoutMs: number): void {
  const pass = async (method: 'GET' | 'POST', path: string, body: Buffer | undefined) => {
    try {
      const res = await upstream.request({
        method, path, timeoutMs,
        headers: { accept: 'application/json', ...(body && { 'content-type': 'application/json' }) },
        ...(body && { body }),
      });
      return { status: res.statusCode, text: await res.body.text() };
    } catch (err) {
      throw capstanError('ERR_UPSTREAM', `upstream unreachable: ${(err as Error).message}`, { cause: err });
    }
  };
  const check = (...ids: string[]) => {
    for (const id of ids) if (!ID.test(id)) throw capstanError('ERR_BAD_REQUEST', 'invalid id');
  };
  app.get<{ Params: { relay: string } }>(`${PROVIDERS_PATH}/:relay/managers`, async (req, reply) => {
    check(req.params.relay);
    const r = await pass('GET', `${PROVIDERS_PATH}/${req.params.relay}/managers`, undefined);
    return reply.code(r.status).type('application/json').send(r.text);
  });
  app.post<{ Params: { relay: string; id: string } }>(`${PROVIDERS_PATH}/:relay/managers/:id/discovery`, async (req, reply) => {
    check(req.params.relay, req.params.id);
    const body = await readBody(req, MAX_DISCOVERY_BYTES, 'discovery');
    const r = await pass('POST', `${PROVIDERS_PATH}/${req.params.relay}/managers/${req.params.id}/discovery`, body);
    return reply.code(r.status).type('application/json').send(r.text);
  });
}
