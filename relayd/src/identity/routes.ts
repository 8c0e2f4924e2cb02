/**
 * Node identity at the relay:
 * - `POST /identity/renew` is passed to the upstream as is (the server holds the pinned
 *   certificates and the keyring; the relay only carries the signed request);
 * - `GET /.well-known/jwks.json` answers the cached keys, so sub-relays verify through us even
 *   when the server is down;
 * - when `identity.require_token` is on, policy downloads (`/policies/<node>/…`), shared-folder
 *   downloads and remote-run connections (`/remote-run/listen/<node>`, plain or upgraded) need a
 *   valid token of that node. A remote-run connection lives no longer than the token it was opened
 *   with (`tokenDeadline`, enforced by the hub): the agent reconnects with a renewed one.
 */
import { STATUS_CODES, type IncomingMessage, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { capstanError, errorBody, isCapstanError, readBody, type Logger } from '../shared.js';
import type { Upstream } from '../forward/upstream.js';
import type { JwksCache } from './jwks.js';
import type { NodeTokenVerifier } from './verify.js';
import type { NodeClaims } from '@capstan/shared/identity/token';

/** Largest renewal request passed upstream (the server refuses more anyway). */
export const MAX_RENEW_BYTES = 64 * 1024;

export interface RelayIdentity {
  jwks: JwksCache;
  verifier: NodeTokenVerifier;
  requireToken: boolean;
}

/** Verified requests and when their token stops being valid (epoch ms, exp + clock skew). */
const deadlines = new WeakMap<IncomingMessage, number>();

/** When the token a request was let in with stops being valid; undefined when none was checked. */
export function tokenDeadline(req: IncomingMessage): number | undefined {
  return deadlines.get(req);
}

function remember(req: IncomingMessage, claims: NodeClaims, verifier: NodeTokenVerifier): void {
  deadlines.set(req, (claims.exp + verifier.clockSkewSeconds) * 1000);
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


export function registerIdentity(app: FastifyInstance, o: { identity: RelayIdentity; upstream: Upstream; timeoutMs: number; log: Logger }): void {
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

  if (!identity.requireToken) return;
  // onRequest, not preHandler: it also runs when no route matches (a 404 must not tell a
  // token-less caller which node paths exist).
  app.addHook('onRequest', async (req) => {
    const node = protectedNode(req.url);
    if (node === undefined) return;
    remember(req.raw, await identity.verifier.verify(req.headers.authorization, node ?? undefined), identity.verifier);
  });
  guardUpgrades(app.server as Server, identity.verifier, o.log);
}

/**
 * Upgraded remote-run connections never reach fastify's hooks: the route's own upgrade listeners
 * (registered before this is called) are taken off the server and called only once the token
 * checks out.
 */
function guardUpgrades(server: Server, verifier: NodeTokenVerifier, log: Logger): void {
  const inner = server.listeners('upgrade') as Array<(req: IncomingMessage, socket: Duplex, head: Buffer) => void>;
  server.removeAllListeners('upgrade');
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const node = protectedNode(req.url ?? '');
    const pass = () => {
      for (const l of inner) l.call(server, req, socket, head);
    };
    if (node === undefined) return pass();
    verifier.verify(req.headers.authorization, node ?? undefined).then((claims) => {
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
