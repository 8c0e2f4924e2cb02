/**
 * What a new synced nodes list revokes among the open remote-run connections. Tokens are checked
 * without state when a connection opens; the synced list is where the server's later decisions
 * show, so each sync looks at the connections again.
 */
import type { Logger } from '@capstan/shared/log';
import type { NodesList } from '../data/nodes.js';
import type { Hub } from './listeners.js';

/**
 * A forced renewal at the server shows in the synced list as `tokens-after`: connections opened
 * with a token issued before it end (`bye` token_expired: the agent or sub-relay renews by signed
 * request and comes back), and the token itself is refused from now on (Routing.tokensAfter).
 */
export function endRevokedTokens(hub: Hub, list: NodesList, log: Logger): void {
  for (const p of hub.all()) {
    if (p.iat !== undefined && p.iat < list.tokensAfter(p.id)) {
      log.info({ node: p.id }, 'remote-run connection ended: its token was revoked by a forced renewal');
      hub.end(p.id, 'token_expired');
    }
  }
}

/**
 * Sub-relays are trusted by token, checked without state; the synced list is where a revocation
 * shows (the server lists registered relays as such): a linked sub-relay it no longer names as a
 * relay is cut off with a `bye`, and relinking is refused (Routing.relayListed).
 */
export function endUnlistedRelays(hub: Hub, list: NodesList, log: Logger): void {
  for (const p of hub.relays()) {
    if (list.isRelay(p.id) === false) {
      log.warn({ relay: p.id }, 'sub-relay no longer a registered relay upstream: link ended');
      hub.end(p.id, 'not_a_relay');
    }
  }
}
