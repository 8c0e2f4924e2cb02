/**
 * Running jobs: hands pending tasks to the linked relays and turns the events streaming back into
 * task transitions; the sweep aborts what timed out and deletes old jobs.
 *
 * Dispatch. The tasks of a running job wait `pending` until a relay is linked. A pass claims them
 * (pending → scheduled, reason dispatched — one conditional update per batch, so two server
 * processes on one database never both claim a task) and writes a `run` event with the claimed
 * nodes on every linked relay (several events for a big batch, see eventBatches). Each relay routes it as it routes a trigger from its own API: to the agent if it
 * is connected there, to the sub-relay that leads to it, and otherwise it reports the node
 * `offline` after its `connect_wait`. So the relay that reaches a node is the one that starts it.
 *
 * Events → transitions (per channel = one run event on one relay):
 *   started            scheduled → in_progress (started), the relay recorded
 *   line               kept in memory (keep_output), bounded by jobs.max_output
 *   done, code 0       in_progress → done (completed), with the output
 *   done, code ≠ 0     in_progress → failed (exit_code)
 *   busy | error       → failed (busy | agent_error)
 *   offline            → failed (offline) once no other relay asked may still start it
 *   stream ends early  → failed (relay_lost if started, no_answer otherwise), same condition
 * Every transition names the states it expects (`expect`): an event racing a cancel or a timeout
 * finds the task final and changes nothing.
 *
 * Timeouts are decided from the database alone (deadline_at), by whichever server sweeps first:
 * a task is aborted on time even when the relay that had it is gone, or this process restarted
 * and forgot its channels.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from '@capstan/shared/log';
import { Slots } from '@capstan/toolkit/slots';
import type { JobRecord, Store } from '../store/store.js';
import type { TaskState } from './states.js';
import type { RelayHub } from '../remote-run/relay-links.js';

export interface RunnerOptions {
  store: Store;
  hub: RelayHub;
  log: Logger;
  sweepIntervalMs: number;
  retentionMs: number;
  answerWaitMs: number;
  maxOutputBytes: number;
  now?: () => Date;
}

/** The condition a job of type inventory adds: the agent sends its inventory whether due or not. */
export const FORCE_INVENTORY = 'force_inventory';

type EventType = 'started' | 'line' | 'done' | 'busy' | 'offline' | 'error';
interface RunEvent {
  type: EventType;
  node: string;
  text?: string;
  code?: number;
}

interface Channel {
  id: string;
  jobId: string;
  relay: string;
  keepOutput: boolean;
  nodes: Set<string>;
  state: 'waiting' | 'open' | 'ended';
  timer: NodeJS.Timeout | null;
  /** Cut the relay's output stream (shutdown). */
  abort?: () => void;
}

/** What this process knows of one task it dispatched. */
interface Tracked {
  /** Channels that may still report on the node. */
  open: Set<string>;
  started: boolean;
  output: string[];
  bytes: number;
  cut: boolean;
}

const key = (jobId: string, node: string) => `${jobId}\u0000${node}`;
const BATCH = 1000;
/**
 * Node ids per run event, in bytes: relays drop event lines longer than 64 KiB (their bounded
 * line reader), so a big job goes down as several events, each its own channel.
 */
export const MAX_EVENT_NODE_BYTES = 32 * 1024;

/** Split node ids into runs of at most MAX_EVENT_NODE_BYTES of JSON. */
export function eventBatches(nodes: string[], maxBytes = MAX_EVENT_NODE_BYTES): string[][] {
  const out: string[][] = [];
  let cur: string[] = [];
  let size = 0;
  for (const n of nodes) {
    const len = Buffer.byteLength(n) + 3; // quotes and comma
    if (cur.length > 0 && size + len > maxBytes) {
      out.push(cur);
      cur = [];
      size = 0;
    }
    cur.push(n);
    size += len;
  }
  if (cur.length > 0) out.push(cur);
  return out;
}

export class JobRunner {
  private readonly channels = new Map<string, Channel>();
  private readonly tracked = new Map<string, Tracked>();
  /** Dispatch passes never overlap; a kick during one (a job created, a relay linked) passes again after it. */
  private readonly passes: Slots;
  private sweeping = false;
  private readonly now: () => Date;

  constructor(private readonly o: RunnerOptions) {
    this.now = o.now ?? (() => new Date());
    // Dispatch only hands tasks to the relays: nothing runs here to count.
    this.passes = new Slots({
      slots: Infinity,
      pass: () => this.dispatch(),
      passFailed: (err) => this.o.log.warn({ err }, 'job dispatch failed (retried at the next sweep)'),
      whileBusy: 'rerun',
    });
    o.hub.on('relay', () => this.kick());
  }

  start(): void {
    this.passes.start(this.o.sweepIntervalMs, () => void this.sweep());
  }

  async stop(): Promise<void> {
    const passes = this.passes.stop();
    for (const ch of this.channels.values()) {
      if (ch.timer) clearTimeout(ch.timer);
      ch.abort?.();
    }
    await passes;
  }

  /** Dispatch what is pending now (a job was created, a relay linked). */
  kick(): void {
    this.passes.kick();
  }

  /** One sweep: abort timed-out tasks, delete expired jobs, dispatch what is still pending. */
  async sweep(): Promise<{ expired: number; deleted: number }> {
    let expired = 0;
    let deleted = 0;
    // A slow database must not pile sweeps up: the next tick skips while one is running.
    if (this.sweeping) return { expired, deleted };
    this.sweeping = true;
    try {
      const now = this.now();
      for (;;) {
        const n = await this.o.store.jobs.expireTasks(now.toISOString(), BATCH);
        expired += n;
        if (n < BATCH) break;
      }
      const before = new Date(now.getTime() - this.o.retentionMs).toISOString();
      for (;;) {
        const n = await this.o.store.jobs.deleteJobsBefore(before, BATCH);
        deleted += n;
        if (n < BATCH) break;
      }
      if (expired > 0) this.o.log.info({ tasks: expired }, 'job tasks timed out');
      if (deleted > 0) this.o.log.info({ jobs: deleted }, 'finished jobs deleted (retention)');
    } catch (err) {
      this.o.log.warn({ err }, 'job sweep failed');
    } finally {
      this.sweeping = false;
    }
    this.kick();
    return { expired, deleted };
  }

  private async dispatch(): Promise<void> {
    for (;;) {
      const relays = this.o.hub.all().map((r) => r.id);
      if (relays.length === 0 || this.passes.stopped) return;
      const work = await this.o.store.jobs.pendingWork(BATCH);
      if (work.length === 0) return;
      let claimedAny = false;
      for (const { job, nodes } of work) {
        // One transaction per batch; only tasks still pending are taken (another server may race).
        const claimed = await this.o.store.jobs.claimTasks(job.id, nodes, {
          at: this.now().toISOString(), relay: relays.join(','), message: `handed to relay ${relays.join(', ')}`,
        });
        if (claimed.length === 0) continue;
        claimedAny = true;
        this.send(job, claimed, relays);
      }
      if (!claimedAny) return;
    }
  }

  private send(job: JobRecord, nodes: string[], relays: string[]): void {
    // An upgrade sends a fresh inventory afterwards too (the agent's upgrade run does it).
    const conditions = job.type === 'inventory' || job.type === 'upgrade' ? [...new Set([...job.conditions, FORCE_INVENTORY])] : job.conditions;
    for (const n of nodes) this.tracked.set(key(job.id, n), { open: new Set(), started: false, output: [], bytes: 0, cut: false });
    for (const batch of eventBatches(nodes)) {
      for (const relay of relays) {
        const ch: Channel = { id: randomUUID(), jobId: job.id, relay, keepOutput: job.keep_output, nodes: new Set(batch), state: 'waiting', timer: null };
        // Relays answer status events whatever keep_output says; output lines only when asked.
        const sent = this.o.hub.send(relay, {
          type: 'run', id: ch.id, conditions, keep_output: job.keep_output, nodes: batch,
          ...(job.upgrade && { upgrade: job.upgrade as unknown as Record<string, unknown> }),
        });
        if (!sent) continue;
        this.channels.set(ch.id, ch);
        for (const n of batch) this.tracked.get(key(job.id, n))!.open.add(ch.id);
        // A relay that got the event but never answers (it died meanwhile) must not hold the tasks.
        ch.timer = setTimeout(() => {
          if (ch.state === 'waiting') void this.close(ch);
        }, this.o.answerWaitMs);
        ch.timer.unref();
      }
    }
    this.o.log.info({ job: job.id, nodes: nodes.length, relays }, 'job tasks dispatched');
    // Nodes no relay could be handed (every link dropped just now) are accounted for at once.
    for (const n of nodes) void this.settleIfUnreachable(job.id, n);
  }

  /** The relay a channel's run was handed to (only it may answer); undefined for an unknown channel. */
  channelRelay(channelId: string): string | undefined {
    return this.channels.get(channelId)?.relay;
  }

  /**
   * The output lines of a task this process is running, as they arrive (the console's "run
   * now"); null when it is not running here (finished: its output is stored with the task).
   */
  liveOutput(jobId: string, nodeId: string): string[] | null {
    const tr = this.tracked.get(key(jobId, nodeId));
    return tr ? [...tr.output] : null;
  }

  /** The output stream of one channel. False when the channel is unknown (404). */
  async output(channelId: string, lines: AsyncIterable<string>, abort?: () => void): Promise<boolean> {
    const ch = this.channels.get(channelId);
    if (!ch || ch.state !== 'waiting') return false;
    ch.state = 'open';
    if (abort) ch.abort = abort;
    if (ch.timer) clearTimeout(ch.timer);
    try {
      for await (const line of lines) {
        let ev: RunEvent;
        try {
          ev = JSON.parse(line) as RunEvent;
        } catch {
          continue;
        }
        if (!ev || typeof ev !== 'object' || typeof ev.node !== 'string' || !ch.nodes.has(ev.node)) continue;
        try {
          await this.event(ch, ev);
        } catch (err) {
          this.o.log.warn({ err, job: ch.jobId, node: ev.node }, 'job event not recorded');
        }
      }
    } finally {
      await this.close(ch);
    }
    return true;
  }

  private async event(ch: Channel, ev: RunEvent): Promise<void> {
    const k = key(ch.jobId, ev.node);
    const tr = this.tracked.get(k);
    const at = this.now().toISOString();
    const move = (to: TaskState, reason: string, expect: TaskState[], extra: { message?: string; exit_code?: number; relay?: string; output?: string } = {}) =>
      this.o.store.jobs.transition(ch.jobId, ev.node, { to, reason, at, expect, ...extra });
    switch (ev.type) {
      case 'started':
        if (tr) tr.started = true;
        await move('in_progress', 'started', ['scheduled'], { relay: ch.relay, message: `started through relay ${ch.relay}` });
        return;
      case 'line': {
        if (!tr || !ch.keepOutput || typeof ev.text !== 'string') return;
        if (tr.cut) return;
        const size = Buffer.byteLength(ev.text) + 1;
        if (tr.bytes + size > this.o.maxOutputBytes) {
          tr.cut = true;
          tr.output.push(`[output cut at ${this.o.maxOutputBytes} bytes]`);
          return;
        }
        tr.bytes += size;
        tr.output.push(ev.text);
        return;
      }
      case 'done': {
        const code = typeof ev.code === 'number' ? ev.code : 0;
        const output = ch.keepOutput && tr ? tr.output.join('\n') : undefined;
        this.tracked.delete(k);
        // A hop that passed no `started` (it is optional in the relay protocol): it did start.
        if (tr && !tr.started) await move('in_progress', 'started', ['scheduled'], { relay: ch.relay, message: `started through relay ${ch.relay}` });
        if (code === 0) await move('done', 'completed', ['in_progress'], { exit_code: code, ...(output !== undefined && { output }), message: 'exit 0' });
        else await move('failed', 'exit_code', ['scheduled', 'in_progress'], { exit_code: code, ...(output !== undefined && { output }), message: `exit ${code}` });
        return;
      }
      case 'busy':
        this.tracked.delete(k);
        await move('failed', 'busy', ['scheduled', 'in_progress'], { message: 'a run was already in progress on the node' });
        return;
      case 'error': {
        const output = ch.keepOutput && tr && tr.output.length > 0 ? tr.output.join('\n') : undefined;
        this.tracked.delete(k);
        await move('failed', 'agent_error', ['scheduled', 'in_progress'], { message: (ev.text ?? 'error').slice(0, 1000), ...(output !== undefined && { output }) });
        return;
      }
      case 'offline':
        tr?.open.delete(ch.id);
        await this.settleIfUnreachable(ch.jobId, ev.node);
        return;
      default:
        return;
    }
  }

  /** A task no open channel may still report on is failed: offline, no answer, or its relay lost. */
  private async settleIfUnreachable(jobId: string, node: string): Promise<void> {
    const k = key(jobId, node);
    const tr = this.tracked.get(k);
    if (!tr || tr.open.size > 0) return;
    this.tracked.delete(k);
    const at = this.now().toISOString();
    if (tr.started) {
      await this.o.store.jobs.transition(jobId, node, {
        to: 'failed', reason: 'relay_lost', at, expect: ['in_progress'], message: 'the output stream ended before the run did',
        ...(tr.output.length > 0 && { output: tr.output.join('\n') }),
      });
    } else {
      await this.o.store.jobs.transition(jobId, node, {
        to: 'failed', reason: 'offline', at, expect: ['scheduled'], message: 'no relay reached a connected agent on the node',
      });
    }
  }

  private async close(ch: Channel): Promise<void> {
    if (ch.state === 'ended') return;
    const answered = ch.state === 'open';
    ch.state = 'ended';
    if (ch.timer) clearTimeout(ch.timer);
    this.channels.delete(ch.id);
    for (const n of ch.nodes) {
      const tr = this.tracked.get(key(ch.jobId, n));
      if (!tr || !tr.open.delete(ch.id) || tr.open.size > 0) continue;
      if (!answered && !tr.started) {
        this.tracked.delete(key(ch.jobId, n));
        await this.o.store.jobs.transition(ch.jobId, n, {
          to: 'failed', reason: 'no_answer', at: this.now().toISOString(), expect: ['scheduled'], message: `relay ${ch.relay} never answered the run`,
        }).catch((err: unknown) => this.o.log.warn({ err }, 'job task not updated'));
      } else {
        await this.settleIfUnreachable(ch.jobId, n).catch((err: unknown) => this.o.log.warn({ err }, 'job task not updated'));
      }
    }
  }
}
