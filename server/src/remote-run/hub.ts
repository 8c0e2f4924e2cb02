/**
 * The relays linked to this server for remote runs. A top-level relay holds one long-lived,
 * outbound `GET /remote-run/listen/<relay-id>?relay=1` here — the same connection a sub-relay
 * holds to its relay (relayd/src/remote-run/link.ts) — so the server reaches the nodes without any
 * inbound port on a relay. The connection is a stream of JSON lines: a hello, heartbeats and
 * `run` events; the relay answers each run on `POST /remote-run/output/<channel>`.
 *
 * One connection per relay id: a newer one replaces an older one (a relay that reconnected must
 * not be shadowed by its own half-dead previous socket).
 */
import { EventEmitter } from 'node:events';
import type { Duplex } from 'node:stream';

export interface RelayConn {
  write(line: string): void;
  end(line?: string): void;
  readonly closed: boolean;
  onClose(fn: () => void): void;
}

/** An upgraded connection (`Upgrade: capstan-remote-run`), as relayd's link asks for. */
export function socketConn(socket: Duplex): RelayConn {
  socket.on('error', () => socket.destroy());
  socket.on('end', () => socket.destroy());
  // Relays send nothing on this connection; drop whatever arrives.
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

export interface LinkedRelay {
  id: string;
  since: number;
  conn: RelayConn;
}

/** Emits 'relay' (id) when a relay links, 'gone' (id) when its connection ends. */
export class RelayHub extends EventEmitter {
  private readonly relays = new Map<string, LinkedRelay>();
  private readonly heartbeat: NodeJS.Timeout;
  private closed = false;

  constructor(heartbeatMs: number, readonly maxRelays = 10_000) {
    super();
    this.setMaxListeners(0);
    this.heartbeat = setInterval(() => this.broadcast({ type: 'ping' }), heartbeatMs);
    this.heartbeat.unref();
  }

  get size(): number {
    return this.relays.size;
  }

  get(id: string): LinkedRelay | undefined {
    return this.relays.get(id);
  }

  all(): LinkedRelay[] {
    return [...this.relays.values()].filter((r) => !r.conn.closed);
  }

  /** Register a connection; false when the hub is full or closed. */
  add(relay: LinkedRelay): boolean {
    if (this.closed) return false;
    const old = this.relays.get(relay.id);
    if (!old && this.relays.size >= this.maxRelays) return false;
    this.relays.set(relay.id, relay);
    if (old) old.conn.end();
    relay.conn.onClose(() => {
      if (this.relays.get(relay.id) === relay) {
        this.relays.delete(relay.id);
        this.emit('gone', relay.id);
      }
    });
    this.emit('relay', relay.id);
    return true;
  }

  /** Write one event line; false when the relay is not linked or its socket is gone. */
  send(id: string, event: object): boolean {
    const r = this.relays.get(id);
    if (!r || r.conn.closed) return false;
    r.conn.write(`${JSON.stringify(event)}\n`);
    return true;
  }

  private broadcast(event: object): void {
    const line = `${JSON.stringify(event)}\n`;
    for (const r of this.relays.values()) if (!r.conn.closed) r.conn.write(line);
  }

  /** End every link (shutdown): the relays reconnect to this server once it is back. */
  close(): void {
    this.closed = true;
    clearInterval(this.heartbeat);
    for (const r of this.relays.values()) r.conn.end(`${JSON.stringify({ type: 'bye' })}\n`);
    this.relays.clear();
  }
}
