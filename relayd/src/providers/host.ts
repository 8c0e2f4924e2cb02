/**
 * The relay as a provider host. It asks its upstream which managers it hosts
 * (GET /relay-api/1/providers/<node_id>/managers), polls each from here — inside the network it
 * discovers, with credentials referenced from this host's environment — and posts each poll's
 * outcome upstream (POST …/managers/<id>/discovery). Only outbound calls, through the same
 * upstream client (TLS pinning, CA) as the forwarded files, with the relay's own token
 * (identity/own.ts): the server answers only the relay the path names. A refused token (401) is
 * renewed and the call made once more. A sub-relay's calls reach the server through the routes
 * below, passed up unchanged, its token included.
 */
import type { FastifyInstance } from 'fastify';
import { Poller, type ManagerSpec } from '@capstan/toolkit/providers/index';
import { capstanError } from '@capstan/shared/errors';
import { type Logger } from '@capstan/shared/log';
import { readBody } from '@capstan/toolkit/http/app';
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
  /** The relay's token header (`{}` when it has none); absent: none is sent. */
  auth?: () => Promise<Record<string, string>>;
  /** The upstream refused the token: renew it before the next use. */
  refused?: () => void;
}

type Answer = { status: number; text: string };

/** One call with the relay's token; a 401 renews the token and tries once more. */
async function withToken(o: ProviderHostOptions, call: (auth: Record<string, string>) => Promise<Answer>): Promise<Answer> {
  const first = await call((await o.auth?.()) ?? {});
  if (first.status !== 401 || !o.auth || !o.refused) return first;
  o.refused();
  return call(await o.auth());
}

export function providerHost(o: ProviderHostOptions): Poller {
  const base = `${PROVIDERS_PATH}/${encodeURIComponent(o.relayId)}/managers`;
  return new Poller({
    refreshMs: o.refreshMs,
    log: o.log,
    env: o.env ?? process.env,
    managers: async () => {
      const { status, text } = await withToken(o, async (auth) => {
        const res = await o.upstream.request({ method: 'GET', path: base, headers: { accept: 'application/json', ...auth }, timeoutMs: o.timeoutMs });
        return { status: res.statusCode, text: await res.body.text() };
      });
      if (status !== 200) throw capstanError('ERR_UPSTREAM', `upstream answered ${status} for the managers of ${o.relayId}: ${text.slice(0, 300)}`);
      let specs: unknown;
      try {
        specs = (JSON.parse(text) as { data?: unknown }).data;
      } catch {
        specs = undefined;
      }
      if (!Array.isArray(specs)) throw capstanError('ERR_UPSTREAM', 'upstream sent no manager list');
      return specs as ManagerSpec[];
    },
    report: async (spec, outcome) => {
      const body = Buffer.from(JSON.stringify(outcome));
      const { status, text } = await withToken(o, async (auth) => {
        const res = await o.upstream.request({
          method: 'POST', path: `${base}/${encodeURIComponent(spec.id)}/discovery`, timeoutMs: o.timeoutMs,
          headers: { 'content-type': 'application/json', ...auth }, body,
        });
        return { status: res.statusCode, text: await res.body.text() };
      });
      if (status !== 200) throw capstanError('ERR_UPSTREAM', `upstream answered ${status} to discovery of ${spec.id}: ${text.slice(0, 300)}`);
      o.log.debug({ manager: spec.id, result: text.slice(0, 300) }, 'discovery posted upstream');
    },
  });
}

/**
 * Sub-relays' provider calls, passed to the upstream as they came (status and body back as is),
 * their relay token included: the server checks it, as it names the sub-relay, not this relay.
 */
export function providerForwardRoutes(app: FastifyInstance, upstream: Upstream, timeoutMs: number): void {
  const pass = async (method: 'GET' | 'POST', path: string, body: Buffer | undefined, authorization: string | undefined) => {
    try {
      const res = await upstream.request({
        method, path, timeoutMs,
        headers: { accept: 'application/json', ...(body && { 'content-type': 'application/json' }), ...(authorization !== undefined && { authorization }) },
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
    const r = await pass('GET', `${PROVIDERS_PATH}/${req.params.relay}/managers`, undefined, authorizationOf(req.headers.authorization));
    return reply.code(r.status).type('application/json').send(r.text);
  });
  app.post<{ Params: { relay: string; id: string } }>(`${PROVIDERS_PATH}/:relay/managers/:id/discovery`, async (req, reply) => {
    check(req.params.relay, req.params.id);
    const body = await readBody(req, MAX_DISCOVERY_BYTES, 'discovery');
    const r = await pass('POST', `${PROVIDERS_PATH}/${req.params.relay}/managers/${req.params.id}/discovery`, body, authorizationOf(req.headers.authorization));
    return reply.code(r.status).type('application/json').send(r.text);
  });
}

/** The caller's Authorization header as it came, when it is one line of printable text (else none). */
function authorizationOf(h: string | undefined): string | undefined {
  return typeof h === 'string' && h.length <= 16 * 1024 && /^[\x20-\x7e]+$/.test(h) ? h : undefined;
}
