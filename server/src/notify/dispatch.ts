/**
 * The notification loop, beside the ingest and never in its way: it reads events the ingest has
 * committed, and sends from the outbox in the database, so a slow or dead receiver costs the
 * ingest nothing (its requests wait on the network, bounded by webhook_timeout, with
 * `concurrency` of them at most).
 *
 * Each tick, for every enabled subscription behind the newest event:
 * 1. collect: read the events after its cursor that it wants (types, severity, node filter), hold
 *    back those of a flapping node (more than flap_threshold state changes in flap_window: the
 *    message says how many were held per node), and append them to its message still waiting for
 *    its group window (or a new one), moving the cursor in the same transaction;
 * 2. send: claim the due messages (a lease of twice the webhook timeout), send each, and mark it
 *    delivered, or due again after a backoff, or dead after max_attempts.
 * A server killed while sending leaves its claims to lapse: the next tick after the lease, here or
 * on another server, sends them again. Receivers get each event at least once, and de-duplicate
 * by its id.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from '@capstan/shared/log';
import type { DeliveryRecord, EventRecord, NodeFilter, Store, SubscriptionRecord } from '../store/store.js';
import type { KeySealer } from '../identity/seal.js';
import { postWebhook, type Mailer, type SendResult } from './senders.js';
import { secretKid } from './service.js';

/** The event types that tell a state change of a node: what flap damping counts and holds back. */
export const FLAP_TYPES = ['finding.opened', 'finding.closed', 'compliance.changed', 'node.no_answer', 'node.answering'];

/** Events read per subscription and tick (the cursor moves this far at most). */
const READ_BATCH = 1000;
/** An `id` filter takes this many ids at most (registry/filters.ts). */
const ID_CHUNK = 100;

export interface DispatchSettings {
  pollMs: number;
  webhookTimeoutMs: number;
  maxAttempts: number;
  minBackoffMs: number;
  maxBackoffMs: number;
  maxEvents: number;
  flapWindowMs: number;
  flapThreshold: number;
  concurrency: number;
}

export interface DispatcherDeps {
  store: Pick<Store, 'lastEventId' | 'listEvents' | 'getEvents' | 'listNodeIds' | 'countNodeEvents' | 'notify'>;
  sealer: KeySealer;
  mailer: Mailer | null;
  settings: DispatchSettings;
  log: Logger;
  now?: () => Date;
}

/** The wait before attempt `attempts + 1`: min × 2^(attempts − 1), capped, ± 20 %. */
export function backoffMs(attempts: number, min: number, max: number, random = Math.random): number {
  const base = Math.min(max, min * 2 ** Math.max(0, attempts - 1));
  return Math.round(base * (0.8 + 0.4 * random()));
}

export class Dispatcher {
  /** This process's name on the claims it takes. */
  readonly claimer = `${process.pid}-${randomUUID()}`;
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private stopped = false;
  private readonly now: () => Date;
  /** Sends in flight (they outlive a tick: a slow receiver does not hold up the next one). */
  private readonly inFlight = new Set<Promise<void>>();

  constructor(private readonly deps: DispatcherDeps) {
    this.now = deps.now ?? (() => new Date());
  }

  start(): void {
    this.schedule();
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.tick().finally(() => this.schedule()), this.deps.settings.pollMs);
    this.timer.unref();
  }

  /** One round: collect, then send what is due (or join the round in progress). */
  tick(): Promise<void> {
    this.running ??= (async () => {
      try {
        await this.collectAll();
        await this.sendDue();
      } catch (err) {
        this.deps.log.warn({ err }, 'notification round failed, will retry');
      } finally {
        this.running = null;
      }
    })();
    return this.running;
  }

  private async collectAll(): Promise<void> {
    const last = await this.deps.store.lastEventId();
    const subs = await this.deps.store.notify.listSubscriptions();
    for (const sub of subs) {
      if (this.stopped) return;
      if (!sub.enabled || sub.cursor >= last) continue;
      try {
        await this.collect(sub, last);
      } catch (err) {
        this.deps.log.warn({ err, subscription: sub.id }, 'collecting events for a subscription failed');
      }
    }
  }

  /** One subscription's new events into its messages (see the module comment). */
  async collect(sub: SubscriptionRecord, last: number): Promise<void> {
    const { settings } = this.deps;
    const events = await this.deps.store.listEvents({ after: sub.cursor, types: sub.types, min_severity: sub.min_severity }, READ_BATCH);
    // Every event up to `last` was committed when it was read: what the query did not return is not wanted.
    const to = events.length === READ_BATCH ? events[events.length - 1]!.id : Math.max(last, events.at(-1)?.id ?? 0);
    const chosen = sub.filter === null ? events : await this.selected(sub.filter, events);
    const now = this.now();
    const held: Record<string, number> = {};
    const ids: number[] = [];
    const since = new Date(now.getTime() - settings.flapWindowMs).toISOString();
    const flapping = new Map<string, boolean>();
    for (const e of chosen) {
      if (e.node_id !== null && FLAP_TYPES.includes(e.type)) {
        let f = flapping.get(e.node_id);
        if (f === undefined) {
          f = (await this.deps.store.countNodeEvents(e.node_id, FLAP_TYPES, since, settings.flapThreshold + 1)) > settings.flapThreshold;
          flapping.set(e.node_id, f);
        }
        if (f) {
          held[e.node_id] = (held[e.node_id] ?? 0) + 1;
          continue;
        }
      }
      ids.push(e.id);
    }
    await this.deps.store.notify.collect({
      subscription_id: sub.id, from: sub.cursor, to, event_ids: ids, held, now: now.toISOString(), window_ms: sub.group_window_ms, max_events: settings.maxEvents,
    });
  }

  /** The events whose node the subscription's filter selects (events about no node are not). */
  private async selected(filter: string, events: EventRecord[]): Promise<EventRecord[]> {
    const nodes = [...new Set(events.map((e) => e.node_id).filter((n): n is string => n !== null))];
    const ok = new Set<string>();
    for (let i = 0; i < nodes.length; i += ID_CHUNK) {
      const filters: NodeFilter[] = [{ key: 'q', values: [filter] }, { key: 'id', values: nodes.slice(i, i + ID_CHUNK) }];
      for (const id of await this.deps.store.listNodeIds(filters)) ok.add(id);
    }
    return events.filter((e) => e.node_id !== null && ok.has(e.node_id));
  }

  private async sendDue(): Promise<void> {
    const { settings } = this.deps;
    const room = settings.concurrency - this.inFlight.size;
    if (room <= 0 || this.stopped) return;
    const now = this.now();
    const until = new Date(now.getTime() + 2 * settings.webhookTimeoutMs + 1000).toISOString();
    const claimed = await this.deps.store.notify.claimDeliveries(this.claimer, now.toISOString(), until, room);
    if (claimed.length === 0) return;
    const subs = new Map((await this.deps.store.notify.listSubscriptions()).map((s) => [s.id, s]));
    for (const d of claimed) {
      const p = this.deliver(d, subs.get(d.subscription_id)).catch((err: unknown) => this.deps.log.warn({ err, delivery: d.id }, 'delivery failed'));
      this.inFlight.add(p);
      void p.finally(() => this.inFlight.delete(p));
    }
  }

  /** Send one claimed message and record the outcome. */
  async deliver(d: DeliveryRecord, sub: SubscriptionRecord | undefined): Promise<void> {
    if (!sub) return; // deleted meanwhile: its messages went with it
    const { settings } = this.deps;
    const events = await this.deps.store.getEvents(d.event_ids);
    let r: SendResult;
    if (sub.kind === 'webhook') {
      const secret = sub.secret_sealed === null ? null : this.deps.sealer.open(secretKid(sub.id), sub.secret_sealed);
      r = secret === null
        ? { ok: false, status: null, error: 'the signing secret does not open with this server\'s identity secret' }
        : await postWebhook(sub, secret, d, events, settings.webhookTimeoutMs, this.now());
    } else {
      r = this.deps.mailer ? await this.deps.mailer.send(sub, d, events) : { ok: false, status: null, error: 'no [smtp] host is configured' };
    }
    const at = this.now();
    if (r.ok) {
      await this.deps.store.notify.finishDelivery(d.id, this.claimer, { delivered: true, status: r.status }, at.toISOString());
      this.deps.log.info({ delivery: d.id, subscription: sub.id, events: events.length, status: r.status }, 'message delivered');
      return;
    }
    const attempts = d.attempts + 1;
    const dead = attempts >= settings.maxAttempts;
    const next = dead ? null : new Date(at.getTime() + backoffMs(attempts, settings.minBackoffMs, settings.maxBackoffMs)).toISOString();
    await this.deps.store.notify.finishDelivery(d.id, this.claimer, { delivered: false, status: r.status, error: r.error, next_at: next }, at.toISOString());
    this.deps.log.warn({ delivery: d.id, subscription: sub.id, attempts, error: r.error, next_at: next }, dead ? 'message given up (dead)' : 'message not delivered, will retry');
  }

  /** Stop ticking; the round and the sends in flight finish (each bounded by webhook_timeout). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
    await Promise.allSettled([...this.inFlight]);
  }
}
