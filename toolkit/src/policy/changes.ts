/**
 * Push hints for relays: which nodes' policies changed, as a feed a relay long-polls
 * (`GET /rudder/relay-api/1/policies/changes?since=<cursor>&wait=<duration>`). Relays only connect
 * outward, so "push" is a request the upstream answers as soon as something changes.
 *
 * A cursor is `<epoch>.<sequence>`. The epoch is random per feed (per server or relay process):
 * a cursor from another epoch, or one older than what the feed still remembers, gets `reset: true`
 * — the relay must then treat every cached policy as stale (it revalidates them with their ETag,
 * so a reset costs one 304 per node, never a wrong policy). Hints are only hints: the signed bundle
 * and its ETag stay the truth, and a relay that misses a hint still revalidates on `max_age`.
 */
import { randomBytes } from 'node:crypto';
import { parseDuration } from '@capstan/shared/config';
import { capstanError } from '@capstan/shared/errors';

/** Longest a poll may wait: below the usual proxy and load-balancer idle timeouts. */
export const MAX_CHANGES_WAIT_MS = 60_000;

/** `since` and `wait` (a duration, "30s" or seconds) of a changes poll; throws ERR_BAD_REQUEST. */
export function changesQuery(q: Record<string, string | undefined>): { since: string | undefined; waitMs: number } {
  const since = q.since === undefined || q.since === '' ? undefined : q.since;
  if (since !== undefined && !/^[0-9a-f]{12}\.\d{1,15}$/.test(since)) throw capstanError('ERR_BAD_REQUEST', 'since is not a cursor');
  const waitMs = q.wait === undefined ? 0 : parseDuration(q.wait);
  if (waitMs === null) throw capstanError('ERR_BAD_REQUEST', 'wait is not a duration');
  return { since, waitMs: Math.min(waitMs, MAX_CHANGES_WAIT_MS) };
}

export interface ChangesAnswer {
  cursor: string;
  nodes: string[];
  reset: boolean;
}

export class ChangeFeed {
  private epoch = randomBytes(6).toString('hex');
  private seq = 0;
  /** Remembered changes, oldest first; `floor` is the sequence before the oldest one kept. */
  private entries: Array<{ seq: number; nodes: string[] }> = [];
  private floor = 0;
  private remembered = 0;
  private readonly waiters = new Set<() => void>();
  private closed = false;

  /**
   * @param maxRemembered node ids kept for late pollers; a poller further behind gets a reset.
   * @param maxAnswer more changed nodes than this in one answer → a reset instead (cheaper for both).
   */
  constructor(private readonly opts: { maxRemembered?: number; maxAnswer?: number } = {}) {}

  cursor(): string {
    return `${this.epoch}.${this.seq}`;
  }

  /** Some nodes' policies changed. */
  publish(nodes: Iterable<string>): void {
    const list = [...new Set(nodes)];
    if (list.length === 0) return;
    this.entries.push({ seq: ++this.seq, nodes: list });
    this.remembered += list.length;
    const max = this.opts.maxRemembered ?? 100_000;
    while (this.remembered > max && this.entries.length > 1) {
      const old = this.entries.shift()!;
      this.remembered -= old.nodes.length;
      this.floor = old.seq;
    }
    this.wake();
  }

  /** Everything may have changed (the upstream reset us): every poller starts over. */
  reset(): void {
    this.epoch = randomBytes(6).toString('hex');
    this.entries = [];
    this.remembered = 0;
    this.floor = this.seq;
    this.wake();
  }

  private wake(): void {
    const w = [...this.waiters];
    this.waiters.clear();
    w.forEach((f) => f());
  }

  /** The answer for `since` now, or null when there is nothing new yet. */
  private answer(since: string | undefined): ChangesAnswer | null {
    const cursor = this.cursor();
    const m = since === undefined ? null : /^([0-9a-f]{12})\.(\d{1,15})$/.exec(since);
    if (!m || m[1] !== this.epoch) return { cursor, nodes: [], reset: true };
    const from = Number(m[2]);
    if (from > this.seq || from < this.floor) return { cursor, nodes: [], reset: true };
    if (from === this.seq) return null;
    const nodes = new Set<string>();
    for (const e of this.entries) if (e.seq > from) for (const n of e.nodes) nodes.add(n);
    if (nodes.size > (this.opts.maxAnswer ?? 10_000)) return { cursor, nodes: [], reset: true };
    return { cursor, nodes: [...nodes], reset: false };
  }

  /**
   * What changed since `since`, waiting up to `waitMs` for something to change. No cursor (a
   * relay's first poll) answers at once with a reset and the current cursor.
   */
  async since(since: string | undefined, waitMs: number, signal?: AbortSignal): Promise<ChangesAnswer> {
    const now = this.answer(since);
    if (now || waitMs <= 0 || this.closed) return now ?? { cursor: this.cursor(), nodes: [], reset: false };
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(done);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, waitMs);
      this.waiters.add(done);
      signal?.addEventListener('abort', done, { once: true });
    });
    return this.answer(since) ?? { cursor: this.cursor(), nodes: [], reset: false };
  }

  /** Answer every waiting poller now (shutdown: long polls must not hold a close). */
  close(): void {
    this.closed = true;
    this.wake();
  }
}
