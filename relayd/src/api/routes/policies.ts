/**
 * `GET /policies/<node-id>/rules` at the relay: the node's signed policy, cached per node with
 * the upstream's ETag (cache/policies.ts).
 * - A cached copy younger than `[policies] max_age` is answered without asking the upstream;
 *   otherwise the relay revalidates with its own ETag (If-None-Match), so an unchanged policy
 *   costs the upstream a 304.
 * - The agent's If-None-Match is answered 304 by the relay itself when it matches.
 * - Upstream unreachable or failing (5xx): the cached copy is served, stale but signed, with a
 *   `warning` header; with nothing cached, 502 ERR_UPSTREAM.
 * - 401/403/404 from the upstream are passed on and never answered from the cache: the server
 *   decides who gets a policy (a 404 also drops the cached copy).
 * Fetches for one node are shared while in flight, so a burst of agents costs one upstream request.
 *
 * Push hints (`[policies] push_hints`): the relay long-polls the upstream's
 * `GET /rudder/relay-api/1/policies/changes` and a hinted node's cached copy is revalidated at its
 * next request whatever max_age says; the relay serves the same feed to the relays below it.
 */
import { join } from 'node:path';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Client } from 'undici';
import { capstanError } from '@capstan/shared/errors';
import { userAgent } from '@capstan/shared/protocol';
import { etagMatches } from '@capstan/toolkit/http/app';
import { changesQuery, type ChangesAnswer } from '@capstan/toolkit/policy/changes';
import { NODE_ID, PolicyCache, PolicyHints, type CachedPolicy } from '../../cache/policies.js';
import type { RelayContext } from '../context.js';

/** Largest policy answer read from the upstream (the agent's own limit). */
export const MAX_POLICY_BYTES = 32 * 1024 * 1024;

type Upstreamed = { status: number; body: string; etag?: string; contentType: string } | { error: Error };

function serve(req: FastifyRequest, reply: FastifyReply, c: CachedPolicy, stale: boolean): FastifyReply {
  reply.header('etag', c.etag).header('cache-control', 'no-cache');
  if (stale) reply.header('warning', '110 capstan-relayd "stale: upstream unreachable"');
  if (etagMatches(req.headers['if-none-match'], c.etag)) return reply.code(304).send();
  return reply.code(200).type('application/json').send(c.body);
}

export function policyRoutes(app: FastifyInstance, ctx: RelayContext): void {
  const cache = new PolicyCache(ctx.config.policies.cache_dir || join(ctx.config.spool.directory, 'cache', 'policies'));
  const maxAge = ctx.config.policies.max_age;
  const inFlight = new Map<string, Promise<Upstreamed>>();
  const hints = new PolicyHints({ maxAgeMs: maxAge, log: ctx.log });
  const hintWait = Math.min(ctx.config.policies.hint_wait, 60_000);
  // Started by the first request that needs it (a policy served under max_age, or a relay below
  // polling us): a relay that serves no policies never holds a poll open upstream.
  let hintsStarted = !ctx.config.policies.push_hints;
  const ensureHints = () => {
    if (hintsStarted) return;
    hintsStarted = true;
    hints.start(async (since, signal) => {
      // A connection of its own, not one of the forwarding pool's: a poll holds it for its whole
      // wait, and a relay forwarding with concurrency 1 would stall behind it. Made per poll, so
      // a reload's new upstream trust applies from the next poll.
      const u = new URL(ctx.upstream.url);
      const client = new Client(u.origin, {
        connect: ctx.upstream.connectOptions(),
        headersTimeout: hintWait + ctx.config.upstream.timeout,
        bodyTimeout: ctx.config.upstream.timeout,
      });
      const query = `?wait=${Math.round(hintWait / 1000)}s${since ? `&since=${since}` : ''}`;
      let res;
      let text;
      try {
        res = await client.request({
          method: 'GET',
          path: `${u.pathname.replace(/\/+$/, '')}/rudder/relay-api/1/policies/changes${query}`,
          headers: { 'user-agent': userAgent('capstan-relayd') },
          signal,
        });
        text = await res.body.text();
      } finally {
        void client.close().catch(() => undefined);
      }
      if (res.statusCode === 404) return 'unsupported';
      if (res.statusCode !== 200) throw new Error(`upstream answered ${res.statusCode}`);
      const a = (JSON.parse(text) as { data?: ChangesAnswer }).data;
      if (!a || typeof a.cursor !== 'string' || !Array.isArray(a.nodes) || typeof a.reset !== 'boolean') throw new Error('malformed change feed answer');
      return a;
    });
  };
  // Stop polling and answer the relays below before the server waits for its connections.
  app.addHook('preClose', async () => hints.stop());

  app.get<{ Querystring: Record<string, string | undefined> }>('/rudder/relay-api/1/policies/changes', async (req, reply) => {
    const { since, waitMs } = changesQuery(req.query);
    ensureHints();
    const ac = new AbortController();
    reply.raw.on('close', () => ac.abort());
    return { data: await hints.feed.since(since, waitMs, ac.signal) };
  });

  const fetchUpstream = (nodeId: string, etag: string | undefined, authorization: string | undefined): Promise<Upstreamed> => {
    // Shared by node, not by token: a request with another token waits for this one's answer
    // only if it carries the same authorization (the server may answer them differently).
    const key = `${nodeId}\u0000${authorization ?? ''}`;
    let p = inFlight.get(key);
    if (!p) {
      p = (async (): Promise<Upstreamed> => {
        try {
          const res = await ctx.upstream.request({
            method: 'GET',
            path: `/policies/${encodeURIComponent(nodeId)}/rules`,
            headers: { ...(etag && { 'if-none-match': etag }), ...(authorization && { authorization }) },
            timeoutMs: ctx.config.upstream.timeout,
          });
          const chunks: Buffer[] = [];
          let size = 0;
          for await (const chunk of res.body) {
            size += (chunk as Buffer).length;
            if (size > MAX_POLICY_BYTES) {
              res.body.destroy();
              throw capstanError('ERR_BODY_TOO_LARGE', `upstream policy larger than ${MAX_POLICY_BYTES} bytes`);
            }
            chunks.push(chunk as Buffer);
          }
          const e = res.headers.etag;
          return {
            status: res.statusCode,
            body: Buffer.concat(chunks).toString('utf8'),
            ...(typeof e === 'string' && { etag: e }),
            contentType: String(res.headers['content-type'] ?? 'application/json'),
          };
        } catch (err) {
          return { error: err as Error };
        }
      })().finally(() => inFlight.delete(key));
      inFlight.set(key, p);
    }
    return p;
  };

  app.get<{ Params: { id: string } }>('/policies/:id/rules', async (req, reply) => {
    const nodeId = req.params.id;
    if (!NODE_ID.test(nodeId)) throw capstanError('ERR_BAD_PATH', 'not a node id');
    if (maxAge > 0) ensureHints();
    const cached = await cache.get(nodeId);
    if (cached && maxAge > 0 && Date.now() - cached.confirmed_at < maxAge && !hints.stale(nodeId, cached.confirmed_at)) {
      return serve(req, reply, cached, false);
    }

    const auth = typeof req.headers.authorization === 'string' ? req.headers.authorization : undefined;
    const up = await fetchUpstream(nodeId, cached?.etag, auth);
    if ('error' in up || up.status >= 500 || up.status === 408 || up.status === 429) {
      const why = 'error' in up ? up.error.message : `upstream answered ${up.status}`;
      if (cached) {
        ctx.log.warn({ nodeId, reason: why }, 'serving cached policy, upstream unavailable');
        return serve(req, reply, cached, true);
      }
      throw capstanError('ERR_UPSTREAM', `no cached policy and ${why}`);
    }
    if (up.status === 304 && cached) {
      const fresh = { ...cached, confirmed_at: Date.now() };
      await cache.put(nodeId, fresh).catch((err: unknown) => ctx.log.warn({ err, nodeId }, 'policy cache write failed'));
      return serve(req, reply, fresh, false);
    }
    if (up.status === 200 && up.etag) {
      const fresh = { etag: up.etag, body: up.body, confirmed_at: Date.now() };
      await cache.put(nodeId, fresh).catch((err: unknown) => ctx.log.warn({ err, nodeId }, 'policy cache write failed'));
      return serve(req, reply, fresh, false);
    }
    // The server says no (404: no policy, 401/403: not this caller): pass it on as it is.
    if (up.status === 404) await cache.delete(nodeId);
    return reply.code(up.status).type(up.contentType).send(up.body);
  });
}
