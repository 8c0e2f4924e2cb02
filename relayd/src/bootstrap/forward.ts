/**
 * Sub-relays' bootstrap calls (shared/bootstrap/relay.ts), passed to the upstream as they came,
 * their relay token included (the server checks it: it names the sub-relay, not this relay), and
 * the answer passed back as is — the package download streamed, with its sha256 header, which the
 * sub-relay checks. This relay opens nothing: the tasks are sealed to the sub-relay's key.
 */
import type { FastifyInstance } from 'fastify';
import { RELAY_BOOTSTRAP_PATH } from '@capstan/toolkit/bootstrap/relay';
import { capstanError } from '@capstan/shared/errors';
import { readBody } from '@capstan/toolkit/http/app';
import type { Upstream } from '../forward/upstream.js';

const ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const ARCH = /^[a-z0-9][a-z0-9-]{0,31}$/;
const MAX_BODY = 16 * 1024;

/** The caller's Authorization header as it came, when it is one line of printable text (else none). */
function authorizationOf(h: string | undefined): Record<string, string> {
  return typeof h === 'string' && h.length <= 16 * 1024 && /^[\x20-\x7e]+$/.test(h) ? { authorization: h } : {};
}

export function bootstrapForwardRoutes(app: FastifyInstance, upstream: Upstream, timeoutMs: number): void {
  const check = (...ids: string[]) => {
    for (const id of ids) if (!ID.test(id)) throw capstanError('ERR_BAD_REQUEST', 'invalid id');
  };
  const up = async (method: 'GET' | 'POST', path: string, body: Buffer | undefined, authorization: string | undefined) => {
    try {
      return await upstream.request({
        method, path, timeoutMs,
        headers: { accept: 'application/json', ...(body && { 'content-type': 'application/json' }), ...authorizationOf(authorization) },
        ...(body && { body }),
      });
    } catch (err) {
      throw capstanError('ERR_UPSTREAM', `upstream unreachable: ${(err as Error).message}`, { cause: err });
    }
  };
  const json = async (method: 'POST', path: string, body: Buffer, authorization: string | undefined) => {
    const res = await up(method, path, body, authorization);
    return { status: res.statusCode, text: await res.body.text() };
  };

  app.post<{ Params: { relay: string } }>(`${RELAY_BOOTSTRAP_PATH}/:relay/claim`, async (req, reply) => {
    check(req.params.relay);
    const r = await json('POST', `${RELAY_BOOTSTRAP_PATH}/${req.params.relay}/claim`, await readBody(req, MAX_BODY, 'claim'), req.headers.authorization);
    return reply.code(r.status).type('application/json').send(r.text);
  });
  app.post<{ Params: { relay: string; job: string; node: string } }>(`${RELAY_BOOTSTRAP_PATH}/:relay/tasks/:job/:node`, async (req, reply) => {
    check(req.params.relay, req.params.job, req.params.node);
    const path = `${RELAY_BOOTSTRAP_PATH}/${req.params.relay}/tasks/${req.params.job}/${req.params.node}`;
    const r = await json('POST', path, await readBody(req, MAX_BODY, 'bootstrap event'), req.headers.authorization);
    return reply.code(r.status).type('application/json').send(r.text);
  });
  app.get<{ Params: { relay: string; arch: string } }>(`${RELAY_BOOTSTRAP_PATH}/:relay/package/:arch`, async (req, reply) => {
    check(req.params.relay);
    if (!ARCH.test(req.params.arch)) throw capstanError('ERR_BAD_REQUEST', 'invalid architecture');
    const res = await up('GET', `${RELAY_BOOTSTRAP_PATH}/${req.params.relay}/package/${req.params.arch}`, undefined, req.headers.authorization);
    reply.code(res.statusCode);
    for (const h of ['content-type', 'x-capstan-sha256', 'x-capstan-package']) {
      const v = res.headers[h];
      if (typeof v === 'string') reply.header(h, v);
    }
    return reply.send(res.body);
  });
}
