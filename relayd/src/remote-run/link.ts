/**
 * A sub-relay's side of remote-run: it holds the same outbound connection to its upstream relay
 * that agents hold to it (`GET /remote-run/listen/<my-id>?relay=1`), so that a run triggered
 * above reaches nodes below without any inbound port. A `run` event becomes a local run (routed
 * to this relay's agents and sub-relays), whose events stream back on
 * `POST /remote-run/output/<channel>`.
 */
import { PassThrough } from 'node:stream';
import { Agent, request, upgrade } from 'undici';
import { userAgent, type Logger } from '../shared.js';
import type { ConnectOption } from '../forward/upstream.js';
import type { RemoteRun, RunEvent } from './dispatch.js';
import { jsonLines } from '@capstan/shared/remote-run/lines';

export interface LinkOptions {
  upstreamUrl: string;
  myId: string;
  remoteRun: RemoteRun;
  log: Logger;
  connect: () => ConnectOption;
  /** Upstream heartbeat interval: three missed ones mean a dead connection. */
  heartbeatMs: number;
}

interface RunMessage {
  type: 'run' | 'hello';
  heartbeat_ms?: number;
  id: string;
  nodes?: string[] | 'all';
  conditions?: string[];
  keep_output?: boolean;
}

export class UpstreamLink {
  private stopped = false;
  private abort = new AbortController();
  private agent: Agent;
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
      if (this.stopped) return;
      const wait = Math.round(delay / 2 + Math.random() * (delay / 2));
      delay = Math.min(delay * 2, 30_000);
      await new Promise((r) => setTimeout(r, wait).unref());
    }
  }

  private async listenOnce(): Promise<void> {
    const base = this.o.upstreamUrl.replace(/\/+$/, '');
    // The lean, upgraded form of the connection, as agents use it (see api/routes/remote-run.ts).
    const { socket } = await upgrade(`${base}/remote-run/listen/${encodeURIComponent(this.o.myId)}?relay=1`, {
      dispatcher: this.agent,
      signal: this.abort.signal,
      protocol: 'capstan-remote-run',
      headers: { 'user-agent': userAgent('capstan-relayd') },
    });
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
        let msg: RunMessage;
        try {
          msg = JSON.parse(line) as RunMessage;
        } catch {
          continue;
        }
        if (msg.type === 'hello' && typeof msg.heartbeat_ms === 'number' && msg.heartbeat_ms > 0) {
          heartbeatMs = msg.heartbeat_ms;
          alive();
        }
        if (msg.type === 'run' && typeof msg.id === 'string') this.handle(base, msg);
      }
    } finally {
      if (deadline) clearTimeout(deadline);
    }
  }

  private handle(base: string, msg: RunMessage): void {
    const targets = msg.nodes === 'all' ? 'all' : Array.isArray(msg.nodes) ? msg.nodes.filter((n) => typeof n === 'string') : [];
    const run = this.o.remoteRun.start({
      targets,
      conditions: Array.isArray(msg.conditions) ? msg.conditions.filter((c) => typeof c === 'string') : [],
      keepOutput: msg.keep_output === true,
    });
    const body = new PassThrough();
    run.on('event', (ev: RunEvent) => body.write(`${JSON.stringify(ev)}\n`));
    run.once('end', () => body.end());
    request(`${base}/remote-run/output/${encodeURIComponent(msg.id)}`, {
      method: 'POST',
      dispatcher: this.agent,
      body,
      headers: { 'content-type': 'application/x-ndjson', 'user-agent': userAgent('capstan-relayd') },
      headersTimeout: 0,
      bodyTimeout: 0,
    })
      .then((r) => r.body.text())
      .catch((err: unknown) => this.o.log.warn({ err, run: msg.id }, 'cannot stream remote-run output upstream'));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.abort.abort();
    await this.agent.close().catch(() => {});
  }
}
