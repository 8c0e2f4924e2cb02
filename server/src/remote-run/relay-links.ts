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
import { ConnHub, type LineConn } from '@capstan/toolkit/remote-run/conn-hub';

export type RelayConn = LineConn;

export interface LinkedRelay {
  id: string;
  since: number;
  conn: RelayConn;
  /** When the relay token the link was opened with stops being valid (epoch ms): the link ends then. */
  until?: number;
}

/** Emits 'relay' (id) when a relay links, 'gone' (id) when its connection ends. */
export class RelayHub extends ConnHub<LinkedRelay> {
  constructor(heartbeatMs: number, maxRelays = 10_000) {
    super(heartbeatMs, maxRelays, 'relay');
  }

  all(): LinkedRelay[] {
    return [...this.peers.values()].filter((r) => !r.conn.closed);
  }
}
