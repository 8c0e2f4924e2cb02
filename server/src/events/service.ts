/**
 * The event stream's door: events the domain makes outside a store transaction are written here
 * (node changes, deployments, admin actions), and readers read here, at once or waiting for the
 * next events (long-poll, Server-Sent Events).
 *
 * Waiting readers share one ticker: every `pollMs` it reads the newest id (one indexed lookup),
 * and only the readers whose cursor it passed run their query. So a hundred idle streams cost one
 * query per tick, and events written by another server on the same database reach them too.
 */
import { capstanError } from '@capstan/shared/errors';
import type { Logger } from '@capstan/shared/log';
import type { EventInsert, EventQuery, EventRecord, Store, WriteOptions } from '../store/store.js';

export interface EventServiceDeps {
  store: Pick<Store, 'insertEvents' | 'listEvents' | 'lastEventId'>;
  log: Logger;
  /** How often waiting readers look for new events. */
  pollMs?: number;
  /** Longest a long-poll waits. */
  maxWaitMs?: number;
  /** Readers waiting at once. */
  maxReaders?: number;
}

interface Waiter {
  after: number;
  wake: () => void;
}

export class EventService {
  private readonly waiters = new Set<Waiter>();
  private timer: NodeJS.Timeout | null = null;
  private last = 0;
  private readonly pollMs: number;
  readonly maxWaitMs: number;
  private readonly maxReaders: number;
  private closed = false;

  constructor(private readonly deps: EventServiceDeps) {
    this.pollMs = deps.pollMs ?? 500;
    this.maxWaitMs = deps.maxWaitMs ?? 60_000;
    this.maxReaders = deps.maxReaders ?? 100;
  }

  /**
   * Store events the domain made. The change they tell of is done already: an event that cannot
   * be stored is logged (with what it said) and does not undo it.
   */
  async emit(events: EventInsert[], opts: WriteOptions = {}): Promise<void> {
    if (events.length === 0) return;
    try {
      await this.deps.store.insertEvents(events, opts);
      this.nudge();
    } catch (err) {
      this.deps.log.error({ err, events: events.map((e) => ({ type: e.type, node_id: e.node_id })) }, 'cannot store events');
    }
  }

  read(q: EventQuery, limit: number): Promise<EventRecord[]> {
    return this.deps.store.listEvents(q, limit);
  }

  /**
   * The events after `q.after`, waiting up to `waitMs` for the first one when there is none yet;
   * empty when none came (or `signal` ended the wait).
   */
  async wait(q: EventQuery & { after: number }, limit: number, waitMs: number, signal?: AbortSignal): Promise<EventRecord[]> {
    const now = await this.read(q, limit);
    if (now.length > 0 || waitMs <= 0) return now;
    const until = Date.now() + Math.min(waitMs, this.maxWaitMs);
    return this.hold(async (waiter) => {
      const after = q.after;
      waiter.after = after;
      while (!this.closed && !signal?.aborted && Date.now() < until) {
        await this.sleep(waiter, until - Date.now(), signal);
        const seen = this.last;
        const got = await this.read({ ...q, after }, limit);
        if (got.length > 0) return got;
        // Events up to `seen` were committed before the read and none was this reader's: it need
        // not look again until newer ones come (the query still starts after its own cursor).
        waiter.after = Math.max(after, seen);
      }
      return [];
    });
  }

  /** Run `fn` as one of the waiting readers (ERR_TOO_MANY_READERS beyond the limit). */
  async hold<T>(fn: (waiter: Waiter) => Promise<T>): Promise<T> {
    if (this.waiters.size >= this.maxReaders) {
      throw capstanError('ERR_TOO_MANY_READERS', `${this.maxReaders} event readers are waiting already ([events] max_readers)`);
    }
    const waiter: Waiter = { after: Number.MAX_SAFE_INTEGER, wake: () => undefined };
    this.waiters.add(waiter);
    this.tick();
    try {
      return await fn(waiter);
    } finally {
      this.waiters.delete(waiter);
    }
  }

  /** Until an event newer than the waiter's cursor is stored, `ms` pass, or `signal` ends it. */
  sleep(waiter: Waiter, ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        signal?.removeEventListener('abort', done);
        waiter.wake = () => undefined;
        resolve();
      };
      const t = setTimeout(done, Math.max(0, ms));
      signal?.addEventListener('abort', done, { once: true });
      waiter.wake = done;
      if (this.last > waiter.after) done();
    });
  }

  /** The newest event id the ticker has seen (0 before its first look). */
  get latest(): number {
    return this.last;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Look now (events were written by this process). */
  nudge(): void {
    if (this.waiters.size > 0) void this.check();
  }

  private tick(): void {
    if (this.timer || this.closed) return;
    this.timer = setInterval(() => {
      if (this.waiters.size === 0) {
        clearInterval(this.timer!);
        this.timer = null;
        return;
      }
      void this.check();
    }, this.pollMs);
    this.timer.unref();
  }

  private checking = false;

  private async check(): Promise<void> {
    if (this.checking) return;
    this.checking = true;
    try {
      this.last = await this.deps.store.lastEventId();
      for (const w of this.waiters) if (this.last > w.after) w.wake();
    } catch (err) {
      this.deps.log.warn({ err }, 'cannot read the newest event id');
    } finally {
      this.checking = false;
    }
  }

  /** Wake every reader and stop the ticker (the server is stopping). */
  close(): void {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    for (const w of this.waiters) w.wake();
  }
}
