/**
 * The console's routes: its files at `/` and `/assets/…`, sign-in and sign-out at
 * `/console/sign-in` (outside the admin API's authentication: that is where a sign-in begins),
 * and the few read endpoints the console needs that the API lacked (registered in
 * api/params.ts): compliance over time and the worst nodes.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import { readJson } from '@capstan/toolkit/http/app';
import { bodyObject, intParam, timeParam, type Query } from '../api/params.js';
import { complianceClock, type ComplianceSettings } from '../registry/compliance.js';
import { withPercent } from '../registry/compliance.js';
import type { Reads } from '../reads.js';
import { maybeCached } from '../api/routes/compliance.js';
import type { AggregateCache } from './cache.js';
import type { ComplianceHistory } from './history.js';
import type { Principal, ResolveToken } from './principal.js';
import { cookieValue, type ConsoleSignIns, type Opened } from './signin.js';
import { pickEncoding, SECURITY_HEADERS, type Asset } from './static.js';

export interface ConsoleRouteDeps {
  signIns: ConsoleSignIns;
  resolveToken: ResolveToken;
  /** The built console (static.ts loadAssets); empty: not built, `/` says how to build it. */
  assets: Map<string, Asset>;
  /** `[policy] review_roles`: the console proposes these roles' policy changes instead of saving them. */
  reviewRoles?: readonly string[];
}

/** Most worst nodes one request may ask for. */
export const MAX_WORST_NODES = 100;

function signInView(signIns: ConsoleSignIns, opened: Opened, p: Principal, reviewRoles: readonly string[]) {
  return {
    name: p.name, role: p.role, expires_at: new Date(opened.exp).toISOString(), csrf_token: signIns.csrf(opened.sid),
    review_required: reviewRoles.includes(p.role),
  };
}

function sendAsset(req: FastifyRequest, reply: FastifyReply, asset: Asset) {
  reply.headers(SECURITY_HEADERS);
  reply.header('vary', 'Accept-Encoding');
  reply.header('etag', asset.etag);
  reply.header('cache-control', asset.immutable ? 'public, max-age=31536000, immutable' : 'no-cache');
  reply.type(asset.type);
  if (req.headers['if-none-match'] === asset.etag) return reply.code(304).send();
  const enc = pickEncoding(req.headers['accept-encoding']);
  if (enc) reply.header('content-encoding', enc);
  return reply.send(enc === 'br' ? asset.br : enc === 'gzip' ? asset.gzip : asset.identity);
}

export function consolePublicRoutes(app: FastifyInstance, deps: ConsoleRouteDeps): void {
  const { signIns, resolveToken, assets } = deps;
  const reviewRoles = deps.reviewRoles ?? [];

  app.get('/', async (req, reply) => {
    const index = assets.get('/index.html');
    if (!index) throw capstanError('ERR_NOT_FOUND', 'the console is not built: run npm run build');
    return sendAsset(req, reply, index);
  });
  app.get<{ Params: { '*': string } }>('/assets/*', async (req, reply) => {
    const asset = assets.get(`/assets/${req.params['*']}`);
    if (!asset) throw capstanError('ERR_NOT_FOUND', 'no such console file');
    return sendAsset(req, reply, asset);
  });

  // Sign in: the token in a JSON body (a cross-site form cannot send JSON, so no one signs a
  // browser in behind its user's back), answered with the cookie and the CSRF token.
  app.post('/console/sign-in', async (req, reply) => {
    if (!/^application\/json(;|$)/i.test(req.headers['content-type'] ?? '')) {
      throw capstanError('ERR_UNSUPPORTED_MEDIA', 'sign in with a JSON body {"token": "…"}');
    }
    const body = bodyObject(await readJson(req), ['token']);
    if (typeof body.token !== 'string' || body.token.length === 0 || body.token.length > 1024) {
      throw capstanError('ERR_BAD_REQUEST', 'token must be a non-empty string', { details: { field: 'token' } });
    }
    const principal = await resolveToken(body.token.trim());
    if (!principal) throw capstanError('ERR_UNAUTHORIZED', 'invalid token');
    const s = signIns.create(body.token.trim());
    reply.header('set-cookie', signIns.setCookie(s)).header('cache-control', 'no-store');
    return reply.code(201).send({ data: signInView(signIns, s, principal, reviewRoles) });
  });

  app.get('/console/sign-in', async (req, reply) => {
    reply.header('cache-control', 'no-store');
    const opened = await signIns.open(cookieValue(req.headers.cookie));
    const principal = opened && (await resolveToken(opened.token));
    if (!opened || !principal) {
      if (cookieValue(req.headers.cookie) !== undefined) reply.header('set-cookie', signIns.setCookie(null));
      throw capstanError('ERR_UNAUTHORIZED', 'not signed in');
    }
    return { data: signInView(signIns, opened, principal, reviewRoles) };
  });

  // Sign out: a write like any other, so it needs the CSRF token too (no one signs you out from afar).
  app.delete('/console/sign-in', async (req, reply) => {
    const opened = await signIns.open(cookieValue(req.headers.cookie));
    if (opened) {
      if (!signIns.csrfMatches(opened.sid, req.headers['x-csrf-token'])) {
        throw capstanError('ERR_CSRF', 'signing out needs the X-CSRF-Token header');
      }
      await signIns.end(opened);
    }
    return reply.header('set-cookie', signIns.setCookie(null)).code(204).send();
  });
}

export interface ConsoleReadDeps {
  store: Reads;
  settings: ComplianceSettings;
  history: ComplianceHistory | null;
  cache?: AggregateCache;
  now?: () => Date;
}

/** Read endpoints inside the admin API (authenticated like every admin route). */
export function consoleReadRoutes(admin: FastifyInstance, deps: ConsoleReadDeps): void {
  const clock = () => complianceClock(deps.settings, (deps.now ?? (() => new Date()))());

  admin.get<{ Querystring: Query }>('/api/1/compliance/history', async (req) => {
    const from = timeParam(req.query, 'from');
    const to = timeParam(req.query, 'to');
    const data = deps.history?.series(from && new Date(from).toISOString(), to && new Date(to).toISOString()) ?? [];
    return { data: data.map((p) => ({ ...p, ...withPercent(p.counts) })), total: data.length };
  });

  // A node's identity token as the server last issued it (the node page's identity section).
  admin.get<{ Params: { id: string } }>('/api/1/nodes/:id/identity', async (req) => {
    const node = await deps.store.getNode(req.params.id);
    if (!node) throw capstanError('ERR_NODE_UNKNOWN', `node ${req.params.id} is unknown`);
    const t = await deps.store.identity.getToken(node.id);
    const nowS = Math.floor((deps.now ?? (() => new Date()))().getTime() / 1000);
    const iso = (s: number) => new Date(s * 1000).toISOString();
    const state = !t ? 'none' : t.forced_after > 0 && t.iat < t.forced_after ? 'revoked' : t.exp <= nowS ? 'expired' : 'valid';
    return {
      data: {
        node_id: node.id, certificate_fingerprint: node.certificate_fingerprint, state,
        kid: t?.kid ?? null, issued_at: t ? iso(t.iat) : null, expires_at: t ? iso(t.exp) : null,
        forced_after: t && t.forced_after > 0 ? iso(t.forced_after) : null,
      },
    };
  });

  admin.get<{ Querystring: Query }>('/api/1/compliance/worst-nodes', async (req, reply) => {
    const limit = intParam(req.query, 'limit', 10, MAX_WORST_NODES);
    const rows = await maybeCached(deps, req.query, reply, `worst-${limit}`, () => deps.store.worstNodes(limit, clock()));
    return { data: rows.map((r) => ({ ...r, ...withPercent(r.counts) })), total: rows.length };
  });
}
