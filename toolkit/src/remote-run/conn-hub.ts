/**
 * The long-lived remote-run connections a program holds, by id: agents and sub-relays at a
 * relay (relayd/src/remote-run/listeners.ts), top-level relays at the server
 * (server/src/remote-run/relay-links.ts). Each connection is a stream of JSON lines from us to them: a
 * hello, heartbeats, `run` events, a `bye`.
 *
 * One connection per id: a newer one replaces an older one (a peer that reconnected after a
 * network change must not be shadowed by its own half-dead previous socket). One timer beats for
 * all of them: 10,000 idle connections must not mean 10,000 timers.
 */
import { EventEmitter } from 'node:events';
import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { eventLine, REMOTE_RUN_PROTOCOL, type ByeReason, type ListenEvent } from '@capstan/shared/remote-run/protocol';

/** Where a peer's event lines go: a streamed HTTP response, or an upgraded raw socket. */
export interface LineConn {
  write(line: string): void;
  end(line?: string): void;
  /** Close at once, whatever the peer does (a peer that never ends its side). */
  destroy(): void;
  readonly closed: boolean;
  onClose(fn: () => void): void;
}

export function responseConn(res: ServerResponse): LineConn {
  return {
    write: (l) => void res.write(l),
    end: (l) => void res.end(l),
    destroy: () => void res.destroy(),
    get closed() {
      return res.destroyed || res.writableEnded;
    },
    onClose: (fn) => void res.once('close', fn),
  };
}

/**
 * An upgraded connection (`Upgrade: capstan-remote-run`): Node hands over the bare socket and
 * frees its HTTP parser and request/response objects, so an idle peer costs a socket and little
 * else — what lets one relay hold 10,000 of them.
 */
export function socketConn(socket: Duplex): LineConn {
  socket.on('error', () => socket.destroy());
  // HTTP server sockets allow half-open connections: a peer that hung up must be closed here.
  socket.on('end', () => socket.destroy());
  // Peers never send anything on this connection; drop whatever arrives.
  socket.on('data', () => {});
  return {
    write: (l) => void socket.write(l),
    end: (l) => void socket.end(l),
    destroy: () => void socket.destroy(),
    get closed() {
      return socket.destroyed || socket.writableEnded;
    },
    onClose: (fn) => void socket.once('close', fn),
  };
}

const line = eventLine;

/** How long a peer has to end its side after the bye of a shutdown before its connection is closed. */
const CLOSE_GRACE_MS = 1_000;

/**
 * Emits `linkedEvent` (id) when a peer connects, 'gone' (id) when its connection ends.
 *
 * A peer let in with a node token carries `until`: when that token stops being valid (epoch ms,
 * its `exp` plus the clock skew allowed). Past it the connection is ended (`bye`, reason
 * `token_expired`) on the heartbeat tick, and gets no event meanwhile: the peer (an agent, or a
 * relay linking to its upstream) comes back with a renewed token.
 */
export class ConnHub<P extends { id: string; conn: LineConn; until?: number }> extends EventEmitter {
  protected readonly peers = new Map<string, P>();
  private readonly heartbeat: NodeJS.Timeout;
  private closed = false;

  constructor(heartbeatMs: number, readonly maxPeers: number, private readonly linkedEvent: string, protected readonly clock: () => number = Date.now) {
    super();
    this.setMaxListeners(0);
    this.heartbeat = setInterval(() => {
      this.endExpired();
      this.broadcast({ type: 'ping' });
    }, heartbeatMs);
    this.heartbeat.unref();
  }

  private expired(p: P): boolean {
    return p.until !== undefined && this.clock() >= p.until;
  }

  /** Whether `peer` may be sent an event now: not once its token has expired (its connection is ended). */
  private mayReceive(p: P): boolean {
    if (!this.expired(p)) return true;
    p.conn.end(line({ type: 'bye', reason: 'token_expired' }));
    return false;
  }

  /** End the connections whose token has expired (on the heartbeat tick, and before any send to one). */
  endExpired(): number {
    let n = 0;
    for (const p of this.peers.values()) {
      if (!this.expired(p) || p.conn.closed) continue;
      p.conn.end(line({ type: 'bye', reason: 'token_expired' }));
      n++;
    }
    return n;
  }

  get size(): number {
    return this.peers.size;
  }

  get(id: string): P | undefined {
    return this.peers.get(id);
  }

  /** Register a connection; false when the hub is full or closed (the caller answers 503). */
  add(peer: P): boolean {
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
    this.emit(this.linkedEvent, peer.id);
    return true;
  }

  /** End one peer's connection with a `bye` saying why (it reconnects if it still may). */
  end(id: string, reason: ByeReason): boolean {
    const p = this.peers.get(id);
    if (!p || p.conn.closed) return false;
    p.conn.end(line({ type: 'bye', reason }));
    return true;
  }

  /** Write one event line; false when the peer is not connected or its socket is gone. */
  send(id: string, event: ListenEvent): boolean {
    const p = this.peers.get(id);
    if (!p || p.conn.closed || !this.mayReceive(p)) return false;
    p.conn.write(line(event));
    return true;
  }

  protected broadcast(event: ListenEvent): void {
    const text = line(event);
    for (const p of this.peers.values()) if (!p.conn.closed) p.conn.write(text);
  }

  /** End every connection (shutdown): the peers reconnect, to this program once it is back. */
  close(): void {
    this.closed = true;
    clearInterval(this.heartbeat);
    const ending = [...this.peers.values()].map((p) => p.conn);
    for (const c of ending) c.end(line({ type: 'bye' }));
    this.peers.clear();
    // A peer gets a moment to read the bye and end its side; one that does not would hold the
    // listener's close (an HTTP server waits for every connection) until its own heartbeat
    // deadline, tens of seconds.
    if (ending.length > 0) setTimeout(() => { for (const c of ending) c.destroy(); }, CLOSE_GRACE_MS).unref();
  }
}

/** The protocol name agents and relays ask for to get an upgraded (lean) connection. */
export const UPGRADE_PROTOCOL = REMOTE_RUN_PROTOCOL;

/** Answer an upgrade request with a plain HTTP error and close the socket. */
export function refuseUpgrade(socket: Duplex, status: number, text: string): void {
  const code = status === 400 ? 'ERR_BAD_REQUEST' : status === 401 ? 'ERR_UNAUTHORIZED' : status === 403 ? 'ERR_FORBIDDEN' : status === 404 ? 'ERR_NOT_FOUND' : status === 503 ? 'ERR_BUSY' : 'ERR_INTERNAL';
  const body = JSON.stringify({ error: { code, message: text === 'NOT FOUND' ? 'not found' : text } });
  socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
}

/**
 * What an upgrade request asks for: `GET /remote-run/listen/<id>[?relay=1]` with our protocol,
 * or the error to refuse it with (404 for anything else, 400 for an id that does not decode).
 */
export function listenRequest(req: IncomingMessage): { id: string; relay: boolean } | { status: number; text: string } {
  const m = /^\/remote-run\/listen\/([^/?]+)(\?.*)?$/.exec(req.url ?? '');
  if (!m || req.method !== 'GET' || String(req.headers.upgrade).toLowerCase() !== UPGRADE_PROTOCOL) return { status: 404, text: 'NOT FOUND' };
  try {
    return { id: decodeURIComponent(m[1]!), relay: new URLSearchParams(m[2]?.slice(1) ?? '').get('relay') === '1' };
  } catch {
    return { status: 400, text: 'invalid id' };
  }
}

/**
 * The same connection without an upgrade: the listen request answered 200, its body the stream
 * of event lines, kept open. Idle for hours by design: no socket timeout, and keep-alive probes
 * and heartbeats keep middleboxes from dropping it.
 */
export function acceptStream(req: IncomingMessage, res: ServerResponse): LineConn {
  req.socket.setTimeout(0);
  req.socket.setNoDelay(true);
  req.socket.setKeepAlive(true, 60_000);
  res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' });
  return responseConn(res);
}

/** Switch the socket to the line protocol (101) and give it back as a connection. */
export function acceptUpgrade(socket: Duplex, head: Buffer): LineConn {
  if (head.length > 0) socket.unshift(head);
  const s = socket as Duplex & { setNoDelay?: (v: boolean) => void; setKeepAlive?: (v: boolean, ms: number) => void; setTimeout?: (ms: number) => void };
  s.setTimeout?.(0);
  s.setNoDelay?.(true);
  s.setKeepAlive?.(true, 60_000);
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nupgrade: ${UPGRADE_PROTOCOL}\r\nconnection: Upgrade\r\n\r\n`);
  return socketConn(socket);
}
