/**
 * The agents (and sub-relays) holding a remote-run connection to this relay. Each holds one
 * long-lived `GET /remote-run/listen/<node-id>` whose response is a stream of JSON lines: a hello,
 * a heartbeat now and then, and `run` events. Managed hosts open no port: the connection is
 * outbound from them, and a trigger is one write on it.
 *
 * One connection per node: a newer one replaces an older one (an agent that reconnects after a
 * network change must not be shadowed by its own half-dead previous socket).
 */
import type { Logger } from '@capstan/shared/log';
import { ConnHub, type LineConn } from '@capstan/toolkit/remote-run/conn-hub';
import type { NodesList } from '../data/nodes.js';

/** Where a peer's event lines go: a streamed HTTP response, or an upgraded raw socket. */
export type PeerConn = LineConn;

export interface Peer {
  id: string;
  /** A sub-relay (it dispatches runs further down) rather than an agent. */
  relay: boolean;
  since: number;
  conn: PeerConn;
  /**
   * When the node token this connection was opened with stops being valid (epoch ms, its `exp`
   * plus the clock skew allowed); absent when none was required. Past it the connection is ended
   * (`bye`, reason `token_expired`, by ConnHub) and gets no run: the agent comes back with a
   * renewed token.
   */
  until?: number;
  /** When that token was issued (epoch seconds): a forced renewal after it ends the connection. */
  iat?: number;
}

/** Emits 'peer' (id) when an agent or sub-relay connects, 'gone' (id) when it leaves. */
export class Hub extends ConnHub<Peer> {
  constructor(heartbeatMs: number, maxPeers: number, clock: () => number = Date.now) {
    super(heartbeatMs, maxPeers, 'peer', clock);
  }

  relays(): Peer[] {
    return [...this.peers.values()].filter((p) => p.relay);
  }

  all(): Peer[] {
    return [...this.peers.values()];
  }

  /**
   * A forced renewal at the server shows in the synced list as `tokens-after`: connections opened
   * with a token issued before it end (`bye` token_expired: the agent or sub-relay renews by
   * signed request and comes back), and the token itself is refused from now on
   * (Routing.tokensAfter). Tokens are checked without state when a connection opens; the synced
   * list is where the server's later decisions show, so each new one is applied here.
   */
  endRevokedTokens(list: NodesList, log: Logger): void {
    for (const p of this.all()) {
      if (p.iat !== undefined && p.iat < list.tokensAfter(p.id)) {
        log.info({ node: p.id }, 'remote-run connection ended: its token was revoked by a forced renewal');
        this.end(p.id, 'token_expired');
      }
    }
  }

  /**
   * Sub-relays are trusted by token, checked without state; the synced list is where a
   * revocation shows (the server lists registered relays as such): a linked sub-relay it no
   * longer names as a relay is cut off with a `bye`, and relinking is refused (Routing.relayListed).
   */
  endUnlistedRelays(list: NodesList, log: Logger): void {
    for (const p of this.relays()) {
      if (list.isRelay(p.id) === false) {
        log.warn({ relay: p.id }, 'sub-relay no longer a registered relay upstream: link ended');
        this.end(p.id, 'not_a_relay');
      }
    }
  }

  /** Resolve with the peer once `id` is connected, or null after `ms`. */
  waitFor(id: string, ms: number): Promise<Peer | null> {
    const now = this.peers.get(id);
    if (now || ms <= 0) return Promise.resolve(now ?? null);
    return new Promise((resolve) => {
      const on = (pid: string) => {
        if (pid !== id) return;
        clearTimeout(timer);
        this.off('peer', on);
        resolve(this.peers.get(id) ?? null);
      };
      const timer = setTimeout(() => {
        this.off('peer', on);
        resolve(this.peers.get(id) ?? null);
      }, ms);
      timer.unref();
      this.on('peer', on);
    });
  }
}
