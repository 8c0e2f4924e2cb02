/**
 * A sub-relay's side of remote-run: it holds the same outbound connection to its upstream relay
 * that agents hold to it (`GET /remote-run/listen/<my-id>?relay=1`), so that a run triggered
 * above reaches nodes below without any inbound port. A `run` event becomes a local run (routed
 * to this relay's agents and sub-relays), whose events stream back on
 * `POST /remote-run/output/<channel>`.
 *
 * Both carry the relay's own token (`Authorization: Bearer`, identity/own.ts): only a relay the
 * server registered may link or answer. A refused attempt makes the token renew before the next
 * one, and a renewed token reconnects the link, so it never outlives its token upstream.
 */
import { PassThrough } from 'node:stream';
import { Agent, request, upgrade } from 'undici';
import { type Logger } from '@capstan/shared/log';
import { userAgent } from '@capstan/shared/protocol';
import type { ConnectOption } from '../forward/upstream.js';
import type { RemoteRun, RunEvent } from './dispatch.js';
import { jsonLines, parseEventLine, REMOTE_RUN_PROTOCOL, type HelloEvent, type RunEvent as RunTrigger } from '@capstan/shared/remote-run/protocol';

export interface LinkOptions {
  /** The upstream in use, read at each connection (it may have failed over). */
  upstreamUrl: string | (() => string);
  myId: string;
  remoteRun: RemoteRun;
  log: Logger;
  connect: () => ConnectOption;
  /** Upstream heartbeat interval: three missed ones mean a dead connection. */
  heartbeatMs: number;
  /** The relay's token header (`{}` when it has none); absent: none is sent. */
  auth?: () => Promise<Record<string, string>>;
  /** The upstream refused the token (401, or an upgrade refused): renew it before the next use. */
  refused?: () => void;
}

/** A line from upstream (a hello, a ping, a run): its fields came from the network and are checked before use. */
interface RunMessage {
  type: string;
  heartbeat_ms?: HelloEvent['heartbeat_ms'];
  id: RunTrigger['id'];
  nodes?: RunTrigger['nodes'];
  conditions?: RunTrigger['conditions'];
  keep_output?: RunTrigger['keep_output'];
  upgrade?: unknown;
}

export class UpstreamLink {
  private stopped = false;
  private abort = new AbortController();
  private agent: Agent;
  private socket: { destroy(err?: Error): void } | null = null;
  private immediate = false;
  connected = false;

  constructor(private readonly o: LinkOptions) {
    this.agent = new Agent({ connect: o.connect() });
  }

  start(): void {
    void this.loop();
  }

  private async loop(): Promise<void> {
    let delay = 1000;
    while (!this.stopped) {
      try {
        await this.listenOnce();
        delay = 1000; // it was up: reconnect quickly
      } catch (err) {
        if (this.stopped) return;
        this.o.log.debug({ err }, 'remote-run link to upstream failed');
      }
      this.connected = false;
      this.socket = null;
      if (this.stopped) return;
      if (this.immediate) {
        // Reconnecting with a renewed token: no wait.
        this.immediate = false;
        delay = 1000;
        continue;
      }
      const wait = Math.round(delay / 2 + Math.random() * (delay / 2));
      delay = Math.min(delay * 2, 30_000);
      await new Promise((r) => setTimeout(r, wait).unref());
    }
  }

  private async listenOnce(): Promise<void> {
    const url = typeof this.o.upstreamUrl === 'function' ? this.o.upstreamUrl() : this.o.upstreamUrl;
    const base = url.replace(/\/+$/, '');
    const auth = (await this.o.auth?.()) ?? {};
    // The lean, upgraded form of the connection, as agents use it (see api/routes/remote-run.ts).
    let socket;
    try {
      ({ socket } = await upgrade(`${base}/remote-run/listen/${encodeURIComponent(this.o.myId)}?relay=1`, {
        dispatcher: this.agent,
        signal: this.abort.signal,
        protocol: REMOTE_RUN_PROTOCOL,
        headers: { 'user-agent': userAgent('capstan-relayd'), ...auth },
      }));
    } catch (err) {
      // undici says only "bad upgrade" for an answer other than 101: a refused token (or a link
      // refused for another reason, which a renewal does not hurt).
      if ((err as { code?: string }).code === 'UND_ERR_SOCKET' || /bad upgrade/.test((err as Error).message)) this.o.refused?.();
      throw err;
    }
    this.socket = socket;
    this.connected = true;
    this.o.log.info({ upstream: base }, 'remote-run link to upstream open');
    // Three missed heartbeats: the connection is dead even if TCP has not noticed.
    let deadline: NodeJS.Timeout | null = null;
    // The upstream's hello says how often it beats (a server's jobs.heartbeat may differ from ours).
    let heartbeatMs = this.o.heartbeatMs;
    const alive = () => {
      if (deadline) clearTimeout(deadline);
      deadline = setTimeout(() => socket.destroy(new Error('no heartbeat from upstream')), heartbeatMs * 3 + 5_000);
    };
    alive();
    socket.on('data', alive);
    socket.on('error', () => {});
    this.abort.signal.addEventListener('abort', () => socket.destroy(), { once: true });
    try {
      for await (const line of jsonLines(socket)) {
        const msg = parseEventLine(line) as RunMessage | null;
        if (!msg) continue;
        if (msg.type === 'hello' && typeof msg.heartbeat_ms === 'number' && msg.heartbeat_ms > 0) {
          heartbeatMs = msg.heartbeat_ms;
          alive();
        }
        if (msg.type === 'run' && typeof msg.id === 'string') this.handle(base, msg);
      }
    } finally {
      if (deadline) clearTimeout(deadline);
      // The upstream ended the link (a bye, a restart): close our side too, or the half-open
      // socket would hold the upstream's shutdown until it gave up on it.
      socket.destroy();
    }
  }

  private handle(base: string, msg: RunMessage): void {
    const targets = msg.nodes === 'all' ? 'all' : Array.isArray(msg.nodes) ? msg.nodes.filter((n) => typeof n === 'string') : [];
    const run = this.o.remoteRun.start({
      targets,
      conditions: Array.isArray(msg.conditions) ? msg.conditions.filter((c) => typeof c === 'string') : [],
      keepOutput: msg.keep_output === true,
      // An upgrade job's request goes on as it came: the agent checks it (shared/upgrade.ts).
      ...(msg.upgrade !== null && typeof msg.upgrade === 'object' && !Array.isArray(msg.upgrade) && { upgrade: msg.upgrade as Record<string, unknown> }),
    });
    const body = new PassThrough();
    run.on('event', (ev: RunEvent) => body.write(`${JSON.stringify(ev)}\n`));
    run.once('end', () => body.end());
    void (async () => {
      const auth = (await this.o.auth?.()) ?? {};
      const r = await request(`${base}/remote-run/output/${encodeURIComponent(msg.id)}`, {
        method: 'POST',
        dispatcher: this.agent,
        body,
        headers: { 'content-type': 'application/x-ndjson', 'user-agent': userAgent('capstan-relayd'), ...auth },
        headersTimeout: 0,
        bodyTimeout: 0,
      });
      const text = await r.body.text();
      if (r.statusCode === 401) this.o.refused?.();
      if (r.statusCode >= 400) this.o.log.warn({ run: msg.id, status: r.statusCode, answer: text.slice(0, 200) }, 'remote-run output refused upstream');
    })().catch((err: unknown) => this.o.log.warn({ err, run: msg.id }, 'cannot stream remote-run output upstream'));
  }

  /** A renewed token: reconnect now, so the link upstream is held with it. */
  refresh(): void {
    if (!this.socket || this.stopped) return;
    this.immediate = true;
    this.socket.destroy(new Error('reconnecting with a renewed token'));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.abort.abort();
    await this.agent.close().catch(() => {});
  }
}
