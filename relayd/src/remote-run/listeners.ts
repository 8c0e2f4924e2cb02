/**
 * The agents (and sub-relays) holding a remote-run connection to this relay. Each holds one
 * long-lived `GET /remote-run/listen/<node-id>` whose response is a stream of JSON lines: a hello,
 * a heartbeat now and then, and `run` events. Managed hosts open no port: the connection is
 * outbound from them, and a trigger is one write on it.
 *
 * One connection per node: a newer one replaces an older one (an agent that reconnects after a
 * network change must not be shadowed by its own half-dead previous socket).
 */
import { ConnHub, type LineConn } from '@capstan/toolkit/remote-run/conn-hub';

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
