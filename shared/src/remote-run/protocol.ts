/**
 * The remote-run wire protocol, as agents, relays and the server speak it. A listener (an agent,
 * or a relay linking to its upstream) opens `GET /remote-run/listen/<id>` asking for
 * `Upgrade: capstan-remote-run`; the answer (101 and a bare socket, or a streamed 200 body) is
 * a stream of JSON lines, one event each: `hello` once accepted, `ping` on every heartbeat,
 * `run` to trigger a run, and `bye` before the sender closes. Lines are bounded (`MAX_LINE`): a
 * peer cannot make a reader buffer without end.
 */
import { StringDecoder } from 'node:string_decoder';

/** The protocol name listeners ask for to get an upgraded (lean) connection. */
export const REMOTE_RUN_PROTOCOL = 'capstan-remote-run';

/**
 * Most of one line a reader buffers: a line still unfinished past it is dropped whole (its start
 * is discarded as it arrives, its end when its newline comes). A chunk's complete lines are
 * passed on without copying; the bound is on what waits for more bytes.
 */
export const MAX_LINE = 64 * 1024;

/** The first line on an accepted connection: who answers, and how often it beats. */
export interface HelloEvent {
  type: 'hello';
  /** The listener's id, as the sender knows it. */
  node: string;
  /** The sender's own node id. */
  relay: string;
  heartbeat_ms: number;
}

/**
 * Why the sender ends the connection: `full` (no room for one more), `token_expired` (the
 * listener's token ran out: renew, then reconnect), `token_revoked`, `not_a_relay`; none on
 * shutdown (the listener reconnects once the sender is back).
 */
export type ByeReason = 'full' | 'token_expired' | 'token_revoked' | 'not_a_relay';

export interface ByeEvent {
  type: 'bye';
  reason?: ByeReason;
}

/** Sent to every listener on each heartbeat: three missed periods mean a dead connection. */
export interface PingEvent {
  type: 'ping';
}

/** A run to start: on this agent, or (to a relay) on the listed nodes behind it. */
export interface RunEvent {
  type: 'run';
  /** The output channel: the answer goes to `POST /remote-run/output/<id>`. */
  id: string;
  nodes?: string[] | 'all';
  conditions?: string[];
  keep_output?: boolean;
  /** An upgrade job's request (shared/upgrade.ts), passed through by relays as it came. */
  upgrade?: Record<string, unknown>;
}

export type ListenEvent = HelloEvent | ByeEvent | PingEvent | RunEvent;

/** One event as its line on the wire. */
export function eventLine(event: ListenEvent): string {
  return `${JSON.stringify(event)}\n`;
}

/**
 * A received line as an event, with only its `type` trusted: null when it is not a JSON object
 * with a string `type`. The other fields came from the network; each reader checks those it uses.
 */
export function parseEventLine(line: string): ({ type: string } & Record<string, unknown>) | null {
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    return null;
  }
  return v !== null && typeof v === 'object' && !Array.isArray(v) && typeof (v as { type?: unknown }).type === 'string'
    ? (v as { type: string } & Record<string, unknown>)
    : null;
}

/**
 * Splits bytes into non-blank text lines as they arrive, buffering at most `maxLine` of an
 * unfinished one (see MAX_LINE). UTF-8 characters straddling two chunks are decoded across them.
 */
export class LineReader {
  private buf = '';
  private skipping = false;
  private readonly decoder = new StringDecoder('utf8');

  constructor(private readonly maxLine = MAX_LINE) {}

  /** The complete lines this chunk ends. */
  push(chunk: Buffer | string): string[] {
    this.buf += typeof chunk === 'string' ? chunk : this.decoder.write(chunk);
    const lines: string[] = [];
    let nl: number;
    while ((nl = this.buf.indexOf('\n')) !== -1) {
      const line = this.buf.slice(0, nl);
      this.buf = this.buf.slice(nl + 1);
      if (this.skipping) {
        this.skipping = false;
        continue;
      }
      if (line.trim() !== '') lines.push(line);
    }
    if (this.buf.length > this.maxLine) {
      this.buf = '';
      this.skipping = true;
    }
    return lines;
  }

  /** The last line, when the stream ended without a newline after it. */
  end(): string[] {
    const rest = this.buf;
    this.buf = '';
    return !this.skipping && rest.trim() !== '' ? [rest] : [];
  }
}

/** The lines of a stream (an upload body, an upgraded socket), each bounded by `maxLine`. */
export async function* jsonLines(stream: AsyncIterable<Buffer | string>, maxLine = MAX_LINE): AsyncGenerator<string> {
  const reader = new LineReader(maxLine);
  for await (const chunk of stream) yield* reader.push(chunk);
  yield* reader.end();
}
