/**
 * The agents (and sub-relays) holding a remote-run connection to this relay. Each holds one
 * long-lived `GET /remote-run/listen/<node-id>` whose response is a stream of JSON lines: a hello,
 * a heartbeat now and then, and `run` events. Managed hosts open no port: the connection is
 * outbound from them, and a trigger is one write on it.
 *
 * One connection per node: a newer one replaces an older one (an agent that reconnects after a
 * network change must not be shadowed by its own half-dead previous socket).
 */
import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';

/** Where a peer's event lines go: a streamed HTTP response, or an upgraded raw socket. */
export interface PeerConn {
  write(line: string): void;
  end(line?: string): void;
  readonly closed: boolean;
  onClose(fn: () => void): void;
}

export function responseConn(res: ServerResponse): PeerConn {
  return {
    write: (l) => void res.write(l),
    end: (l) => void res.end(l),
    get closed() {
      return res.destroyed || res.writableEnded;
    },
    onClose: (fn) => void res.once('close', fn),
  };
}

/**
 * An upgraded connection (`Upgrade: capstan-remote-run`): Node hands over the bare socket and
 * frees its HTTP parser and request/response objects, so an idle agent costs a socket and little
 * else — what lets one relay hold 10,000 of them.
 */
export function socketConn(socket: Duplex): PeerConn {
  socket.on('error', () => socket.destroy());
  // HTTP server sockets allow half-open connections: a peer that hung up must be closed here.
  socket.on('end', () => socket.destroy());
  // Agents never send anything on this connection; drop whatever arrives.
  socket.on('data', () => {});
  return {
    write: (l) => void socket.write(l),
    end: (l) => void socket.end(l),
    get closed() {
      return socket.destroyed || socket.writableEnded;
    },
    onClose: (fn) => void socket.once('close', fn),
  };
}

export interface Peer {
  id: string;
  /** A sub-relay (it dispatches runs further down) rather than an agent. */
  relay: boolean;
  since: number;
  conn: PeerConn;
  /**
   * When the node token this connection was opened with stops being valid (epoch ms, its `exp`
   * plus the clock skew allowed); absent when none was required. Past it the connection is ended
   * (`bye`, reason `token_expired`) and gets no run: the agent comes back with a renewed token.
   */
  until?: number;
}

export class Hub extends EventEmitter {
  private readonly peers = new Map<string, Peer>();
  private readonly heartbeat: NodeJS.Timeout;
  private closed = false;

  /** One timer for all peers: 10,000 idle connections must not mean 10,000 timers. */
  constructor(heartbeatMs: number, readonly maxPeers: number, private readonly clock: () => number = Date.now) {
    super();
    this.setMaxListeners(0);
    this.heartbeat = setInterval(() => {
      this.endExpired();
      this.broadcast({ type: 'ping' });
    }, heartbeatMs);
    this.heartbeat.unref();
  }

  private expired(p: Peer): boolean {
    return p.until !== undefined && this.clock() >= p.until;
  }

  /** End the connections whose token has expired (on the heartbeat tick, and before any send to one). */
  endExpired(): number {
    let n = 0;
    for (const p of this.peers.values()) {
      if (!this.expired(p) || p.conn.closed) continue;
      p.conn.end(`${JSON.stringify({ type: 'bye', reason: 'token_expired' })}\n`);
      n++;
    }
    return n;
  }

  get size(): number {
    return this.peers.size;
  }

  get(id: string): Peer | undefined {
    return this.peers.get(id);
  }

  relays(): Peer[] {
    return [...this.peers.values()].filter((p) => p.relay);
  }

  all(): Peer[] {
    return [...this.peers.values()];
  }

  /** Register a connection; false when the hub is full or closed (the caller answers 503). */
  add(peer: Peer): boolean {
    if (this.closed) return false;
    const old = this.peers.get(peer.id);
    if (!old && this.peers.size >= this.maxPeers) return false;
    this.peers.set(peer.id, peer);
    if (old) old.conn.end();
    peer.conn.onClose(() => {
      if (this.peers.get(peer.id) === peer) {
        this.peers.delete(peer.id);
        this.emit('gone', peer.id);
      }
    });
    this.emit('peer', peer.id);
    return true;
  }

  /** Write one event line; false when the peer is not connected or its socket is gone. */
  send(id: string, event: object): boolean {
    const p = this.peers.get(id);
    if (!p || p.conn.closed) return false;
    if (this.expired(p)) {
      p.conn.end(`${JSON.stringify({ type: 'bye', reason: 'token_expired' })}\n`);
      return false;
    }
    p.conn.write(`${JSON.stringify(event)}\n`);
    return true;
  }

  private broadcast(event: object): void {
    const line = `${JSON.stringify(event)}\n`;
    for (const p of this.peers.values()) if (!p.conn.closed) p.conn.write(line);
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

  /** End every connection (shutdown): agents reconnect, to this relay once it is back. */
  close(): void {
    this.closed = true;
    clearInterval(this.heartbeat);
    for (const p of this.peers.values()) p.conn.end(`${JSON.stringify({ type: 'bye' })}\n`);
    this.peers.clear();
  }
}
