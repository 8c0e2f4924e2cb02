/**
 * Remote runs: a trigger (`POST remote-run/...`) becomes `run` events on the connections of the
 * targeted agents, or of the sub-relays that lead to them, and their answers come back as
 * streams of events on `POST /remote-run/output/<channel>`.
 *
 * Routing of one target node X (no route ever goes back up, so there is no loop):
 *   X connected here → to X; else the nodes list's next hop (a sub-relay) → to it, with [X];
 *   else X is a neighbour or unknown → wait up to `connect_wait` for X to connect, and, with no
 *   nodes list to say where X lives, ask every connected sub-relay too.
 * A target nobody started within the bounded wait is reported `offline`; the run as a whole is
 * answered within `max_duration` whatever the targets do.
 *
 * Events (one JSON object a line, the same format at every hop):
 *   {"type":"started","node"} {"type":"line","node","text"} {"type":"done","node","code"}
 *   {"type":"busy","node"} {"type":"offline","node"} {"type":"error","node","text"}
 */
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Logger } from '@capstan/shared/log';
import type { RunEvent as RunTrigger } from '@capstan/shared/remote-run/protocol';
import type { NodesList } from '../data/nodes.js';
import type { Metrics } from '../metrics.js';
import type { Hub } from './listeners.js';

export type RunEventType = 'started' | 'line' | 'done' | 'busy' | 'offline' | 'error';

export interface RunEvent {
  type: RunEventType;
  node: string;
  text?: string;
  code?: number;
}

export interface RunRequest {
  /** Node ids, or every node below this relay. */
  targets: string[] | 'all';
  conditions: string[];
  keepOutput: boolean;
  /** An upgrade job's request, passed on untouched to every hop (the agent checks it). */
  upgrade?: Record<string, unknown>;
}

type NodeState = 'waiting' | 'started' | 'done' | 'busy' | 'error';

interface Channel {
  id: string;
  run: Run;
  peer: string;
  relay: boolean;
  /** Nodes this channel may report on ('all' for a sub-relay asked for everything). */
  scope: Set<string> | 'all';
  state: 'waiting' | 'open' | 'ended';
  timer: NodeJS.Timeout | null;
}

/** One run, as the trigger's HTTP answer sees it: 'event' for each event, then 'end' once. */
export class Run extends EventEmitter {
  readonly id = randomUUID();
  readonly nodes = new Map<string, NodeState>();
  readonly channels = new Set<Channel>();
  private pendingRoutes = 0;
  private ended = false;
  private deadline: NodeJS.Timeout | null = null;

  constructor(readonly req: RunRequest) {
    super();
  }

  setDeadline(ms: number): void {
    this.deadline = setTimeout(() => this.finish(), ms);
    this.deadline.unref();
  }

  routeStarted(): void {
    this.pendingRoutes++;
  }

  routeDone(): void {
    this.pendingRoutes--;
    this.maybeFinish();
  }

  /**
   * Take an event from a channel. `offline` is not passed on at once: with several hops asked
   * about a node, another may still start it, so a node is called offline when the run ends
   * with nobody having started it.
   */
  event(ev: RunEvent): void {
    if (this.ended) return;
    if (ev.type === 'offline') {
      this.expect(ev.node);
      return;
    }
    if (ev.type === 'line') {
      if (!this.nodes.has(ev.node) || this.nodes.get(ev.node) === 'waiting') this.nodes.set(ev.node, 'started');
    } else {
      this.nodes.set(ev.node, ev.type);
    }
    this.emit('event', ev);
  }

  /** A node some hop was asked about and that no hop has accounted for yet. */
  expect(node: string): void {
    if (!this.nodes.has(node)) this.nodes.set(node, 'waiting');
  }

  maybeFinish(): void {
    if (this.ended || this.pendingRoutes > 0) return;
    for (const c of this.channels) if (c.state !== 'ended') return;
    this.finish();
  }

  private finish(): void {
    if (this.ended) return;
    this.ended = true;
    if (this.deadline) clearTimeout(this.deadline);
    for (const c of this.channels) if (c.timer) clearTimeout(c.timer);
    const summary: Record<string, NodeState | 'timeout' | 'offline'> = {};
    for (const [node, state] of this.nodes) {
      summary[node] = state === 'waiting' ? 'offline' : state === 'started' ? 'timeout' : state;
      if (state === 'waiting') this.emit('event', { type: 'offline', node } satisfies RunEvent);
      if (state === 'started') this.emit('event', { type: 'error', node, text: 'no answer within remote_run.max_duration' } satisfies RunEvent);
    }
    this.emit('end', summary);
  }

  get isEnded(): boolean {
    return this.ended;
  }
}

export interface RemoteRunOptions {
  hub: Hub;
  nodes: () => NodesList;
  myId: string;
  log: Logger;
  metrics: Metrics;
  connectWaitMs: number;
  maxDurationMs: number;
  /** How long a peer that got a run event has to open its output stream. */
  answerWaitMs?: number;
}

export class RemoteRun {
  private readonly channels = new Map<string, Channel>();

  constructor(private readonly o: RemoteRunOptions) {}

  get hub(): Hub {
    return this.o.hub;
  }

  /** Dispatch a run; the returned Run emits 'event' and then 'end' (bounded by max_duration). */
  start(req: RunRequest): Run {
    const run = new Run(req);
    run.setDeadline(this.o.maxDurationMs);
    run.once('end', (summary: Record<string, string>) => {
      for (const c of run.channels) this.channels.delete(c.id);
      for (const outcome of Object.values(summary)) this.o.metrics.remoteRuns.inc({ outcome });
      this.o.log.info({ run: run.id, summary }, 'remote run finished');
    });
    run.routeStarted();
    void this.route(run).finally(() => run.routeDone());
    return run;
  }

  private async route(run: Run): Promise<void> {
    const { hub } = this.o;
    const nodes = this.o.nodes();
    if (run.req.targets === 'all') {
      for (const p of hub.all()) this.dispatch(run, p.id, p.relay, p.relay ? 'all' : [p.id]);
      // Neighbours the nodes list knows and that are not connected are offline.
      for (const n of nodes.neighbours()) {
        if (n.id !== this.o.myId && !hub.get(n.id)) run.event({ type: 'offline', node: n.id });
      }
      return;
    }
    const viaRelay = new Map<string, string[]>();
    const waits: Array<Promise<void>> = [];
    for (const target of new Set(run.req.targets)) {
      run.expect(target);
      const direct = hub.get(target);
      if (direct) {
        this.dispatch(run, target, direct.relay, [target]);
        continue;
      }
      const hop = nodes.configured ? nodes.nextHop(target) : null;
      if (hop && hop !== target) {
        viaRelay.set(hop, [...(viaRelay.get(hop) ?? []), target]);
        continue;
      }
      if (!nodes.configured) {
        // Nobody says where the node lives: the sub-relays below may know it.
        for (const r of hub.relays()) viaRelay.set(r.id, [...(viaRelay.get(r.id) ?? []), target]);
      }
      waits.push(
        hub.waitFor(target, this.o.connectWaitMs).then((p) => {
          if (p) this.dispatch(run, target, p.relay, [target]);
          else run.event({ type: 'offline', node: target });
        }),
      );
    }
    for (const [relayId, targets] of viaRelay) {
      waits.push(
        hub.waitFor(relayId, this.o.connectWaitMs).then((p) => {
          if (p) this.dispatch(run, relayId, true, targets);
          else for (const t of targets) run.event({ type: 'offline', node: t });
        }),
      );
    }
    await Promise.all(waits);
  }

  private dispatch(run: Run, peer: string, relay: boolean, scope: string[] | 'all'): void {
    const ch: Channel = {
      id: randomUUID(),
      run,
      peer,
      relay,
      scope: scope === 'all' ? 'all' : new Set(scope),
      state: 'waiting',
      timer: null,
    };
    const event: RunTrigger = {
      type: 'run',
      id: ch.id,
      conditions: run.req.conditions,
      keep_output: run.req.keepOutput,
      ...(run.req.upgrade && { upgrade: run.req.upgrade }),
      ...(relay ? { nodes: scope } : {}),
    };
    if (!this.o.hub.send(peer, event)) {
      if (scope !== 'all') for (const n of scope) run.event({ type: 'offline', node: n });
      return;
    }
    run.channels.add(ch);
    this.channels.set(ch.id, ch);
    // A peer that got the event but never answers (died meanwhile) must not hold the run.
    ch.timer = setTimeout(() => {
      if (ch.state === 'waiting') this.close(ch, 'no answer');
    }, this.o.answerWaitMs ?? this.o.connectWaitMs + 5_000);
    ch.timer.unref();
  }

  /** Who a channel's run event went to (the only peer that may answer it); undefined when unknown. */
  channelPeer(channelId: string): { id: string; relay: boolean } | undefined {
    const ch = this.channels.get(channelId);
    return ch ? { id: ch.peer, relay: ch.relay } : undefined;
  }

  /**
   * The output stream of one channel: `lines` are the JSON event lines the peer sends. Events
   * about nodes outside the channel's scope are dropped (a peer speaks only for what it was asked).
   */
  async output(channelId: string, lines: AsyncIterable<string>): Promise<boolean> {
    const ch = this.channels.get(channelId);
    if (!ch || ch.state !== 'waiting') return false;
    ch.state = 'open';
    if (ch.timer) clearTimeout(ch.timer);
    try {
      for await (const line of lines) {
        if (ch.run.isEnded) continue; // drain what is still coming, drop it
        let ev: RunEvent;
        try {
          ev = JSON.parse(line) as RunEvent;
        } catch {
          continue;
        }
        if (!ev || typeof ev !== 'object' || typeof ev.node !== 'string' || !isEventType(ev.type)) continue;
        if (!ch.relay) ev.node = ch.peer; // an agent speaks for itself only
        else if (ch.scope !== 'all' && !ch.scope.has(ev.node)) continue;
        if (ev.type === 'line' && !ch.run.req.keepOutput) continue;
        ch.run.event({ type: ev.type, node: ev.node, ...(typeof ev.text === 'string' ? { text: ev.text } : {}), ...(typeof ev.code === 'number' ? { code: ev.code } : {}) });
      }
    } finally {
      this.close(ch, null);
    }
    return true;
  }

  private close(ch: Channel, problem: string | null): void {
    if (ch.state === 'ended') return;
    ch.state = 'ended';
    if (ch.timer) clearTimeout(ch.timer);
    this.channels.delete(ch.id);
    if (problem) this.o.log.warn({ peer: ch.peer, run: ch.run.id, problem }, 'remote run channel closed');
    ch.run.maybeFinish();
  }
}

function isEventType(t: unknown): t is RunEventType {
  return t === 'started' || t === 'line' || t === 'done' || t === 'busy' || t === 'offline' || t === 'error';
}
