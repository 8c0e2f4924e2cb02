/**
 * Who may do what only a relay may do at the server: hold the remote-run link
 * (`GET /remote-run/listen/<relay-id>?relay=1`), answer its runs (`POST /remote-run/output/<channel>`),
 * fetch its managers and post their discoveries (`/relay-api/1/providers/<relay-id>/…`).
 *
 * A relay shows its node token (`Authorization: Bearer`), which it renews by signed request like
 * an agent. The token must verify against this server's keyring (forced renewals included), carry
 * `capstan_role: "relay"`, and name the relay the request is about; and the node must still be an
 * accepted relay in the registry (an admin who takes the flag away is obeyed at once here, even
 * before the relay's token expires). Refusals: 401 ERR_TOKEN_INVALID | ERR_TOKEN_EXPIRED |
 * ERR_TOKEN_UNKNOWN_KEY; 403 ERR_TOKEN_NOT_RELAY (an agent's token, a node no longer a relay),
 * ERR_TOKEN_WRONG_NODE (another relay's token).
 *
 * A relay let in is a contact (registry/relay-contacts.ts: throttled to one write per relay per
 * minute), so registered relays become reachable like agents do.
 */
import { capstanError } from '@capstan/shared/errors';
import { RELAY_ROLE, type NodeClaims } from '@capstan/shared/identity/claims';
import type { RelayContacts } from '../registry/relay-contacts.js';
import type { Store } from '../store/store.js';
import type { NodeIdentity } from './service.js';

/** A relay let in: which, and until when its token is good (epoch ms, exp plus the clock skew). */
export interface RelayGrant {
  relay: string;
  until: number;
  claims: NodeClaims;
}

/** Check the request's relay token; `relayId` is the relay the path names (undefined: any relay). */
export type RelayAuthorizer = (authorization: string | string[] | undefined, relayId?: string) => Promise<RelayGrant>;

export function bearerToken(authorization: string | string[] | undefined): string {
  const m = typeof authorization === 'string' ? /^Bearer\s+(\S+)$/i.exec(authorization) : null;
  if (!m) throw capstanError('ERR_TOKEN_INVALID', 'a relay token is required (Authorization: Bearer): the relay renews it by signed request');
  return m[1]!;
}

/**
 * `identity` absent (an app built without a keyring): nothing can be verified, every relay call is
 * refused. `contacts`: where a relay let in is recorded as heard from (absent: nowhere).
 */
export function relayAuthorizer(identity: NodeIdentity | undefined, store: Pick<Store, 'getNode'>, contacts?: Pick<RelayContacts, 'seen'>): RelayAuthorizer {
  return async (authorization, relayId) => {
    if (!identity) throw capstanError('ERR_TOKEN_INVALID', 'this server has no keyring to verify relay tokens with');
    const claims = await identity.verify(bearerToken(authorization), relayId, RELAY_ROLE);
    const node = await store.getNode(claims.capstan_node_id);
    if (!node || node.accepted !== 'accepted' || !node.relay) {
      throw capstanError('ERR_TOKEN_NOT_RELAY', `node ${claims.capstan_node_id} is no longer registered as an accepted relay`);
    }
    await contacts?.seen(node.id);
    return { relay: claims.capstan_node_id, until: (claims.exp + identity.clockSkewSeconds) * 1000, claims };
  };
}
