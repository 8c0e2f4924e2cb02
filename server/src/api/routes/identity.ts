/**
 * Node identity over HTTP.
 * Node-facing (no admin token; relays pass them through from their agents):
 *   POST /identity/renew          S/MIME signed {node_id, timestamp, nonce} → 200 {data: {token, expires_at}}
 *   GET  /.well-known/jwks.json   the active and still-valid public keys
 *   PUT  /inventories/<file>      with a token request inside: 201 {data: {…, token, expires_at}}
 * Admin (under the bearer token):
 *   GET    /api/1/keys                     the keyring, with the nodes each key still signs for
 *   POST   /api/1/keys/rotate              a new active key
 *   DELETE /api/1/keys/<kid>[?force=true]  409 with the node count while the key is in use
 *   POST   /api/1/nodes/<id>/identity/renew  tokens issued until now are refused; the node renews
 *   POST   /api/1/groups/<group>/identity/renew  the same for every node of the group
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import { RELAY_ROLE } from '@capstan/shared/identity/claims';
import { HEADER_TOKEN_REQUEST } from '@capstan/shared/identity/renew';
import type { Logger } from '@capstan/shared/log';
import type { SpoolKind } from '@capstan/shared/protocol';
import { readBody, type UploadRouteOptions } from '@capstan/toolkit/http/app';
import { MAX_RENEW_BYTES, type NodeIdentity } from '../../identity/service.js';
import type { RelayContacts } from '../../registry/relay-contacts.js';
import { actorOf } from '../actor.js';

/** Inventories read back for a token request at most this large (compressed); larger ones renew by request. */
export const MAX_INVENTORY_TOKEN_BYTES = 4 * 1024 * 1024;


/**
 * `relayContacts`: where a relay's renewal is recorded as a contact (registry/relay-contacts.ts).
 * Agents are heard from through their inventories and runs; a relay sends neither.
 */
export function identityPublicRoutes(app: FastifyInstance, identity: NodeIdentity, relayContacts?: Pick<RelayContacts, 'record'>): void {
  app.post('/identity/renew', async (req) => {
    const { token, claims } = await identity.renew(await readBody(req, MAX_RENEW_BYTES, 'renewal request'));
    // The request was signed with the relay's pinned key: proof enough that the relay is alive.
    if (relayContacts && claims.capstan_role === RELAY_ROLE) await relayContacts.record(claims.capstan_node_id, 'relay token renewal');
    return { data: { token, expires_at: new Date(claims.exp * 1000).toISOString() } };
  });
  app.get('/.well-known/jwks.json', async (_req, reply) =>
    // Relays cache it on disk and refetch on an unknown kid; a short max-age for HTTP caches between.
    reply.header('cache-control', 'public, max-age=60').send(await identity.jwks()));
}

/**
 * `PUT /inventories/<file>` from an agent that asks for its token in the answer
 * (`x-capstan-token-request: 1`, and a token request inside the signed inventory): once the file
 * is on disk, the answer's data carries `token` and `expires_at` too. Relays answer uploads
 * themselves and never pass the header on, so only an agent talking to this server gets one.
 * `settle`: how a newcomer's answer waits for its inventory's ingest ([enrollment] token_wait).
 */
export function inventoryTokenUploads(
  identity: NodeIdentity, maxDecompressedBytes: number, log: Logger,
  settle?: { ingested: (kind: SpoolKind, name: string, ms: number) => Promise<boolean>; waitMs: number },
): Pick<UploadRouteOptions, 'keepBytes' | 'answer'> {
  const wants = (kind: string, req: FastifyRequest) => kind === 'inventories' && req.headers[HEADER_TOKEN_REQUEST] === '1';
  return {
    keepBytes: (kind, req) => (wants(kind, req) ? MAX_INVENTORY_TOKEN_BYTES : 0),
    answer: async (kind, name, accepted, req) => {
      if (!wants(kind, req) || !accepted.data) return undefined;
      try {
        let issued = await identity.issueForInventory(name, accepted.data, maxDecompressedBytes);
        // A node not accepted yet may be by this very inventory (an enrollment rule): once the
        // ingest is done with it, ask again.
        if (!issued && settle && settle.waitMs > 0 && await settle.ingested(kind, name, settle.waitMs)) {
          issued = await identity.issueForInventory(name, accepted.data, maxDecompressedBytes);
        }
        return issued ? { token: issued.token, expires_at: new Date(issued.claims.exp * 1000).toISOString() } : undefined;
      } catch (err) {
        // The inventory is stored whatever happens here; the agent renews by signed request.
        log.warn({ file: name, code: (err as { code?: string }).code, reason: (err as Error).message }, 'no token with this inventory');
        return undefined;
      }
    },
  };
}

/** Errors with details (the node count of a key in use) carry them in the body. */
function withDetails(err: unknown, reply: FastifyReply): FastifyReply {
  if (isCapstanError(err) && err.details) {
    return reply.code(err.statusCode).send({ error: { code: err.code, message: err.message, ...err.details } });
  }
  throw err;
}

/**
 * `renewed`: told which nodes' tokens a forced renewal refuses from now on (`all` for a group's,
 * whose members are not listed here), so their relay links can end.
 */
export function identityAdminRoutes(admin: FastifyInstance, identity: NodeIdentity, renewed?: (ids: string[] | 'all') => void): void {
  admin.get('/api/1/keys', async () => ({ data: await identity.listKeys() }));
  admin.post('/api/1/keys/rotate', async (req, reply) => reply.code(201).send({ data: await identity.rotate(actorOf(req)) }));
  admin.delete<{ Params: { kid: string }; Querystring: { force?: string } }>('/api/1/keys/:kid', async (req, reply) => {
    const force = req.query.force;
    if (force !== undefined && force !== 'true' && force !== 'false') throw capstanError('ERR_BAD_REQUEST', 'force must be true or false');
    try {
      return { data: await identity.deleteKey(req.params.kid, force === 'true', actorOf(req)) };
    } catch (err) {
      return withDetails(err, reply);
    }
  });
  admin.post<{ Params: { id: string } }>('/api/1/nodes/:id/identity/renew', async (req) => {
    const data = await identity.forceRenewal(req.params.id, actorOf(req));
    renewed?.([req.params.id]);
    return { data };
  });
  admin.post<{ Params: { group: string } }>('/api/1/groups/:group/identity/renew', async (req) => {
    const data = await identity.forceGroupRenewal(req.params.group, actorOf(req));
    renewed?.('all');
    return { data };
  });
}

/**
 * The `authorizeNode(req, nodeId)` hook of node-facing routes: a valid token of that node
 * (policies), or of any node, agent or relay, when `nodeId` is undefined (shared folder), checked
 * against the server's own keyring and forced renewals.
 */
export function authorizeNodeToken(identity: NodeIdentity): (req: FastifyRequest, nodeId: string | undefined) => Promise<void> {
  return async (req, nodeId) => {
    const h = req.headers.authorization;
    const m = typeof h === 'string' ? /^Bearer\s+(\S+)$/i.exec(h) : null;
    if (!m) throw capstanError('ERR_TOKEN_INVALID', 'a node token is required (Authorization: Bearer): renew it');
    await identity.verify(m[1]!, nodeId);
  };
}
