/**
 * Node identity at the relay:
 * - `POST /identity/renew` is passed to the upstream as is (the server holds the pinned
 *   certificates and the keyring; the relay only carries the signed request);
 * - `GET /.well-known/jwks.json` answers the cached keys, so sub-relays verify through us even
 *   when the server is down;
 * - when `identity.require_token` is on, policy downloads (`/policies/<node>/…`), shared-folder
 *   downloads and agents' remote-run connections (`/remote-run/listen/<node>`, plain or upgraded)
 *   need a valid token of that node. A remote-run connection lives no longer than the token it was
 *   opened with (`tokenDeadline`, enforced by the hub): the agent reconnects with a renewed one;
 * - when `identity.require_relay_token` is on, a sub-relay's link (`/remote-run/listen/<id>?relay=1`)
 *   needs a relay's token (`capstan_role: "relay"`) of that id, whatever require_token says: only
 *   a relay the server registered may take the runs of the nodes behind it. (Its output posts are
 *   checked by the remote-run route, which knows whose channel it is.)
 */
import { STATUS_CODES, type IncomingMessage, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { capstanError, errorBody, isCapstanError } from '@capstan/shared/errors';
import { type Logger } from '@capstan/shared/log';
import { readBody } from '@capstan/toolkit/http/app';
import type { Upstream } from '../forward/upstream.js';
import type { JwksCache } from './jwks.js';
import type { NodeTokenVerifier } from './verify.js';
import { RELAY_ROLE, type NodeClaims } from '@capstan/shared/identity/token';

/** Largest renewal request passed upstream (the server refuses more anyway). */
export const MAX_RENEW_BYTES = 64 * 1024;

export interface RelayIdentity {
  jwks: JwksCache;
  verifier: NodeTokenVerifier;
  requireToken: boolean;
  /** Sub-relays' links and output posts need a relay's token (default on). */
  requireRelayToken?: boolean;
  /**
   * Whether the synced nodes list still names `id` as a registered relay (asking the upstream
   * again once on a miss); true when the list says nothing of relays. A token alone is checked
   * without state, so without this a revoked sub-relay would keep its link until its token expires.
   */
  relayListed?: (id: string) => Promise<boolean>;
  /**
   * Tokens of `id` issued before this (epoch seconds) are refused: a forced renewal at the server,
   * learnt from the synced nodes list (`tokens-after`); 0 when none is known.
   */
  tokensAfter?: (id: string) => number;
}

/** Whether a request is a sub-relay's link: `/remote-run/listen/<id>?relay=1`. */
export function isRelayLink(url: string): boolean {
  const q = url.indexOf('?');
  if (q < 0 || !/^\/+remote-run\/listen\/[^/]+$/.test(url.slice(0, q))) return false;
  return new URLSearchParams(url.slice(q + 1)).get('relay') === '1';
}

/**
 * The token check a protected request needs: the node's (`relay` false) or a relay's (true);
 * null when the configuration asks for none.
 */
function checkFor(identity: RelayIdentity, url: string): { node: string | undefined; relay: boolean } | null {
  const node = protectedNode(url);
  if (node === undefined) return null;
  const relay = isRelayLink(url);
  if (relay ? identity.requireRelayToken === false : !identity.requireToken) return null;
  return { node: node ?? undefined, relay };
}

/** The token check, then for a sub-relay's link: still a registered relay by the synced list. */
async function verifyFor(identity: RelayIdentity, authorization: string | string[] | undefined, check: { node: string | undefined; relay: boolean }): Promise<NodeClaims> {
  const claims = await identity.verifier.verify(authorization, check.node, check.relay ? RELAY_ROLE : undefined);
  if (identity.tokensAfter && claims.iat < identity.tokensAfter(claims.capstan_node_id)) {
    throw capstanError('ERR_TOKEN_EXPIRED', 'node token was revoked by a forced renewal: renew it');
  }
  if (check.relay && identity.relayListed && !(await identity.relayListed(claims.capstan_node_id))) {
    throw capstanError('ERR_TOKEN_NOT_RELAY', `${claims.capstan_node_id} is not a registered relay in the nodes list synced from the upstream`);
  }
  return claims;
}

/** Verified requests: when their token stops being valid (epoch ms, exp + clock skew) and when it was issued (epoch s). */
const deadlines = new WeakMap<IncomingMessage, { until: number; iat: number }>();

/** When the token a request was let in with stops being valid; undefined when none was checked. */
export function tokenDeadline(req: IncomingMessage): number | undefined {
  return deadlines.get(req)?.until;
}

/** When the token a request was let in with was issued (epoch seconds); undefined when none was checked. */
export function tokenIssuedAt(req: IncomingMessage): number | undefined {
  return deadlines.get(req)?.iat;
}

function remember(req: IncomingMessage, claims: NodeClaims, verifier: NodeTokenVerifier): void {
  deadlines.set(req, { until: (claims.exp + verifier.clockSkewSeconds) * 1000, iat: claims.iat });
}

/** Which node a protected path is about: a string (that node), null (any node), undefined (not protected). */
export function protectedNode(url: string): string | null | undefined {
  const path = url.split('?')[0]!;
  let m = /^\/+policies\/([^/]+)\//.exec(path) ?? /^\/+remote-run\/listen\/([^/]+)$/.exec(path);
  if (m) {
    try {
      return decodeURIComponent(m[1]!);
    } catch {
      return m[1]!;
    }
  }
  m = /^\/+rudder\/relay-api\/1\/shared-folder\//.exec(path);
  return m ? null : undefined;
}


export function identityRoutes(app: FastifyInstance, o: { identity: RelayIdentity; upstream: Upstream; timeoutMs: number; log: Logger }): void {
  const { identity } = o;

  app.post('/identity/renew', async (req, reply) => {
    const body = await readBody(req, MAX_RENEW_BYTES, 'renewal request');
    let res;
    try {
      res = await o.upstream.request({
        method: 'POST',
        path: '/identity/renew',
        headers: { 'content-type': String(req.headers['content-type'] ?? 'application/pkcs7-mime') },
        body,
        timeoutMs: o.timeoutMs,
      });
    } catch (err) {
      throw capstanError('ERR_UPSTREAM', `upstream unreachable: ${(err as Error).message}`, { cause: err });
    }
    const text = await res.body.text();
    // The server's answer (token, or its coded refusal) goes back unchanged.
    return reply.code(res.statusCode).type(String(res.headers['content-type'] ?? 'application/json')).send(text);
  });

  app.get('/.well-known/jwks.json', async (_req, reply) => {
    if (identity.jwks.keys.keys.length === 0) await identity.jwks.refresh();
    return reply.header('cache-control', 'public, max-age=60').send(identity.jwks.keys);
  });

  if (!identity.requireToken && identity.requireRelayToken === false) return;
  // onRequest, not preHandler: it also runs when no route matches (a 404 must not tell a
  // token-less caller which node paths exist).
  app.addHook('onRequest', async (req) => {
    const check = checkFor(identity, req.url);
    if (!check) return;
    remember(req.raw, await verifyFor(identity, req.headers.authorization, check), identity.verifier);
  });
  guardUpgrades(app.server as Server, identity, o.log);
}

/**
 * Upgraded remote-run connections never reach fastify's hooks: the route's own upgrade listeners
 * (registered before this is called) are taken off the server and called only once the token
 * checks out.
 */
function guardUpgrades(server: Server, identity: RelayIdentity, log: Logger): void {
  const { verifier } = identity;
  const inner = server.listeners('upgrade') as Array<(req: IncomingMessage, socket: Duplex, head: Buffer) => void>;
  server.removeAllListeners('upgrade');
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const check = checkFor(identity, req.url ?? '');
    const pass = () => {
      for (const l of inner) l.call(server, req, socket, head);
    };
    if (!check) return pass();
    verifyFor(identity, req.headers.authorization, check).then((claims) => {
      remember(req, claims, verifier);
      pass();
    }, (err: unknown) => {
      const status = isCapstanError(err) ? err.statusCode : 500;
      if (!isCapstanError(err)) log.error({ err }, 'remote-run token check failed');
      const text = JSON.stringify(errorBody(err));
      socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`);
    });
  });
}
