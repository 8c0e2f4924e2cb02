/**
 * Stateless node-token checks at the relay: signature against the cached JWKS (refetched once on
 * an unknown kid), audience, nbf/exp with a small clock skew, and that the token's node is the node
 * the request is about. No node database: everything needed is in the token and the public keys.
 */
import { tokenKeyId, verifyNodeToken, type NodeClaims, type NodeRole } from '@capstan/shared/identity/token';
import { capstanError } from '@capstan/shared/errors';
import type { JwksCache } from './jwks.js';

export interface NodeTokenVerifier {
  /** The nbf/exp allowance, in seconds (a connection opened with a token may last until exp plus this). */
  readonly clockSkewSeconds: number;
  /**
   * Verify `Authorization: Bearer <token>`; throws coded 401/403 errors. `role` relay: only a
   * relay's token will do (a sub-relay's link).
   */
  verify(authorization: string | string[] | undefined, nodeId: string | undefined, role?: NodeRole): Promise<NodeClaims>;
}

export function nodeTokenVerifier(jwks: JwksCache, clockSkewSeconds: number, clock: () => Date = () => new Date()): NodeTokenVerifier {
  return {
    clockSkewSeconds,
    async verify(authorization, nodeId, role) {
      const m = typeof authorization === 'string' ? /^Bearer\s+(\S+)$/i.exec(authorization) : null;
      if (!m) throw capstanError('ERR_TOKEN_INVALID', 'a node token is required (Authorization: Bearer): renew it');
      const token = m[1]!;
      // A kid we have never seen may be a rotation since the last fetch: fetch first (rate-
      // limited; unreachable → the cached keys). A known kid in an old copy (which may still hold
      // a key the server deleted) refreshes in the background: an upstream outage must not make
      // every check wait for a connect timeout.
      if (!jwks.has(tokenKeyId(token))) await jwks.refresh();
      return verifyNodeToken(token, jwks.keys, { nodeId, role, clockSkewSeconds, now: clock() });
    },
  };
}
