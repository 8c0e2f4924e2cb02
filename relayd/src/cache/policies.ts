/**
 * The relay's policy cache: one file per node, `<dir>/<node-id>.json` holding the upstream's
 * signed answer exactly as received, its ETag and when it was last confirmed. The relay cannot
 * forge or alter what it caches (the agent verifies the server's signature), so serving a stale
 * copy while the upstream is unreachable is safe: at worst the node runs a policy that was valid.
 */
import { randomUUID } from 'node:crypto';
import { readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ChangeFeed, type ChangesAnswer } from '@capstan/toolkit/policy/changes';
import { makeDir } from '@capstan/shared/dir';
import { type Logger } from '@capstan/shared/log';

export interface CachedPolicy {
  etag: string;
  body: string;
  /** When the upstream last gave or confirmed it (ms since epoch). */
  confirmed_at: number;
}

/** Node ids are UUIDs (or RUDDER's `root`): anything else never becomes a file name. */
export const NODE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,255}$/;

export class PolicyCache {
  private ready: Promise<unknown> | null = null;

  constructor(private readonly dir: string) {}

  private file(nodeId: string): string {
    if (!NODE_ID.test(nodeId)) throw new Error(`not a node id: ${nodeId}`);
    return join(this.dir, `${nodeId}.json`);
  }

  async get(nodeId: string): Promise<CachedPolicy | null> {
    try {
      const c = JSON.parse(await readFile(this.file(nodeId), 'utf8')) as CachedPolicy;
      return typeof c.etag === 'string' && typeof c.body === 'string' && typeof c.confirmed_at === 'number' ? c : null;
    } catch {
      // Missing or torn (a crash between write and rename leaves only the temporary): refetch.
      return null;
    }
  }

  /** Write atomically (temporary file, then rename), so a reader never sees half a bundle. */
  async put(nodeId: string, c: CachedPolicy): Promise<void> {
    this.ready ??= makeDir(this.dir, 0o750);
    await this.ready;
    const tmp = join(this.dir, `.${nodeId}.${randomUUID()}.tmp`);
    await writeFile(tmp, JSON.stringify(c), { mode: 0o640 });
    await rename(tmp, this.file(nodeId)).catch(async (err: unknown) => {
      await rm(tmp, { force: true });
      throw err;
    });
  }

  async delete(nodeId: string): Promise<void> {
    await rm(this.file(nodeId), { force: true });
  }
}

/**
 * Push hints (toolkit/src/policy/changes.ts): the relay long-polls its upstream for the nodes
 * whose policy changed and marks their cached copies stale, so the next agent request revalidates
 * (a 200 with the new bundle) instead of being answered from a cache younger than max_age. The
 * marks live in memory: at start the first poll answers `reset`, which marks everything cached
 * before it stale (the relay cannot know what changed while it was down). The relay republishes
 * what it learns in its own feed, for the relays below it.
 */
export class PolicyHints {
  /** What this relay tells the relays below it. */
  readonly feed = new ChangeFeed();
  private staleBefore = 0;
  private readonly hinted = new Map<string, number>();
  private stopped = false;
  private readonly abort = new AbortController();
  private loop: Promise<void> | null = null;
  /** Answers received (tests, status). */
  polls = 0;

  constructor(private readonly opts: { maxAgeMs: number; log: Logger }) {}

  /** Was this node's cached copy (confirmed at `confirmedAt`) overtaken by a hint? */
  stale(nodeId: string, confirmedAt: number): boolean {
    return confirmedAt <= this.staleBefore || confirmedAt <= (this.hinted.get(nodeId) ?? -1);
  }

  /**
   * Apply one answer of the upstream's feed; `askedAt` is when its poll was sent. A reset marks
   * stale what was cached before that moment only: a copy fetched while the poll was waiting is
   * newer than the feed's new start, and later changes come as hints. (Marking up to the answer's
   * arrival made a copy cached a moment after the relay started look stale: it was revalidated at
   * once, which made max_age a matter of timing.)
   */
  apply(a: ChangesAnswer, askedAt = Date.now()): void {
    const now = Date.now();
    this.polls++;
    if (a.reset) {
      this.staleBefore = Math.min(askedAt, now);
      this.hinted.clear();
      this.feed.reset();
      return;
    }
    for (const n of a.nodes) this.hinted.set(n, now);
    this.feed.publish(a.nodes);
    // A mark older than max_age changes nothing (the copy is revalidated anyway): forget it.
    if (this.hinted.size > 100_000) for (const [n, at] of this.hinted) if (now - at > this.opts.maxAgeMs) this.hinted.delete(n);
  }

  /** Poll until stop(): `poll(cursor, signal)` asks the upstream; failures back off up to a minute. */
  start(poll: (since: string | undefined, signal: AbortSignal) => Promise<ChangesAnswer | 'unsupported'>): void {
    this.loop = (async () => {
      let cursor: string | undefined;
      let failures = 0;
      let saidUnsupported = false;
      while (!this.stopped) {
        try {
          const askedAt = Date.now();
          const a = await poll(cursor, this.abort.signal);
          if (a === 'unsupported') {
            if (!saidUnsupported) this.opts.log.info('upstream has no policy change feed; cached policies follow max_age only');
            saidUnsupported = true;
            failures = 10; // check again now and then (an upgraded upstream)
            throw new Error('unsupported');
          }
          this.apply(a, askedAt);
          cursor = a.cursor;
          failures = 0;
        } catch (err) {
          if (this.stopped) break;
          failures++;
          if (failures === 1) this.opts.log.warn({ reason: (err as Error).message }, 'policy change feed unavailable, retrying');
          // Whatever happened while we were cut off is unknown: start over with a reset.
          cursor = undefined;
          await sleep(Math.min(60_000, 500 * 2 ** Math.min(failures, 7)), undefined, { signal: this.abort.signal }).catch(() => undefined);
        }
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.abort.abort();
    this.feed.close();
    await this.loop;
  }
}
