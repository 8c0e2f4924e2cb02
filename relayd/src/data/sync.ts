/**
 * The node list synced from the upstream (`GET /rudder/relay-api/1/nodes`, served by the server
 * and by every relay from its own synced copy): fetched at start, every `nodes_sync.interval`, on
 * reload, and when a run log comes from a node the list does not know (at most every
 * `nodes_sync.miss_refresh`). Conditional requests (ETag / If-None-Match) keep the periodic
 * fetch cheap. The last list is cached on disk, so a restart while the upstream is down still
 * routes.
 *
 * What makes it authoritative: an upstream that answers the endpoint with a list. An upstream
 * that does not serve it (404, or an answer without the envelope) leaves the relay as it was
 * without a list: everything is forwarded and the upstream decides.
 *
 * `nodes_list_file` wins: when it is set, the relay routes by that file alone (RUDDER's
 * behaviour, an admin's explicit choice) and still syncs, so that it can serve its sub-relays.
 */
import { open, readFile, rename, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { capstanError } from '@capstan/shared/errors';
import { type Logger } from '@capstan/shared/log';
import { NodesList } from './nodes.js';

export const NODES_LIST_PATH = '/rudder/relay-api/1/nodes';

export interface FetchResult {
  status: number;
  etag: string | null;
  body: string;
}

export interface NodesSyncOptions {
  myId: string;
  /** GET the list from the upstream, with If-None-Match when `etag` is given. */
  fetch: (etag: string | null) => Promise<FetchResult>;
  cacheFile: string;
  intervalMs: number;
  /** Least time between two refreshes asked for by unknown nodes. */
  missRefreshMs: number;
  log: Logger;
  /** Called after a fetch brought a different list. */
  onChange?: () => void;
}

interface CacheFile {
  etag: string | null;
  fetched_at: string;
  /** The upstream's answer as received: served to sub-relays byte for byte (same ETag). */
  body: string;
}

/** Most key ids accepted in a list's `keys` (rotation keeps a few). */
const MAX_KEYS = 100;

/**
 * The key ids the upstream's JWKS publishes (`data.keys`, a Capstan extension), or null when the
 * list carries none (an older server, RUDDER): then the JWKS copy only ages out.
 */
function keysOf(body: string | null): string[] | null {
  if (body === null) return null;
  try {
    const keys = (JSON.parse(body) as { data?: { keys?: unknown } }).data?.keys;
    return Array.isArray(keys) && keys.length <= MAX_KEYS && keys.every((k) => typeof k === 'string') ? (keys as string[]) : null;
  } catch {
    return null;
  }
}

/** The envelope's list, or null when the text is not a node-list answer. */
function nodesOf(body: string): Record<string, unknown> | null {
  try {
    const v = JSON.parse(body) as { action?: unknown; result?: unknown; data?: { nodes?: unknown } };
    if (v?.action !== 'getNodesList' || v.result !== 'success') return null;
    const nodes = v.data?.nodes;
    return nodes && typeof nodes === 'object' && !Array.isArray(nodes) ? (nodes as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

export class NodesSync {
  private list: NodesList | null = null;
  private body: string | null = null;
  private etag: string | null = null;
  /** When the list in hand was last confirmed by the upstream (200 or 304); 0 = never (cache only). */
  private confirmed = 0;
  private lastAttempt = 0;
  private running: Promise<boolean> | null = null;
  private timer: NodeJS.Timeout | null = null;
  private missTimer: NodeJS.Timeout | null = null;
  private stopped = false;
  private lastError: string | null = null;

  constructor(private readonly o: NodesSyncOptions) {}

  /** The synced list (from the upstream or the disk cache), or null when there is none. */
  get current(): NodesList | null {
    return this.list;
  }

  /** Time (ms since epoch) the upstream last confirmed the list; 0 when it never did in this run. */
  get confirmedAt(): number {
    return this.confirmed;
  }

  /** The key ids the upstream publishes, as of the list in hand (null: the list says nothing). */
  get keys(): string[] | null {
    return keysOf(this.body);
  }

  /** The upstream's answer and ETag, to serve the same list to sub-relays. */
  get served(): { body: string; etag: string | null } | null {
    return this.body === null ? null : { body: this.body, etag: this.etag };
  }

  status(): { synced: boolean; nodes?: number; confirmed_at?: string; error?: string } {
    return {
      synced: this.list !== null,
      ...(this.list ? { nodes: this.list.size } : {}),
      ...(this.confirmed ? { confirmed_at: new Date(this.confirmed).toISOString() } : {}),
      ...(this.lastError ? { error: this.lastError } : {}),
    };
  }

  /** Read the disk cache; a missing or unreadable one is no list (logged), never a start-up failure. */
  async load(): Promise<void> {
    let text: string;
    try {
      text = await readFile(this.o.cacheFile, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.o.log.warn({ err, file: this.o.cacheFile }, 'cannot read the cached nodes list');
      return;
    }
    try {
      const c = JSON.parse(text) as CacheFile;
      const nodes = nodesOf(c.body);
      if (!nodes) throw new Error('not a nodes list');
      this.list = NodesList.parse(this.o.myId, JSON.stringify(nodes), `upstream (cached ${c.fetched_at})`);
      this.body = c.body;
      this.etag = c.etag;
    } catch (err) {
      this.o.log.warn({ err: (err as Error).message, file: this.o.cacheFile }, 'ignoring the unreadable cached nodes list');
    }
  }

  /** Fetch once now, then every interval. */
  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), this.o.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    if (this.missTimer) clearTimeout(this.missTimer);
  }

  /**
   * Ask the upstream now (concurrent callers share one request). Resolves true when the list in
   * hand is confirmed by the upstream; false when it could not be asked (kept as it was).
   */
  refresh(): Promise<boolean> {
    this.running ??= this.fetchOnce().finally(() => {
      this.running = null;
    });
    return this.running;
  }

  /**
   * A node the list does not know sent a file: refresh, at most every `missRefreshMs` (a burst of
   * unknown nodes costs one request). Returns the refresh when one runs now; null when it is too
   * soon, in which case one is scheduled for when it is allowed (the caller retries its file).
   */
  refreshOnMiss(): Promise<boolean> | null {
    if (this.running) return this.running;
    const wait = this.lastAttempt + this.o.missRefreshMs - Date.now();
    if (wait <= 0) return this.refresh();
    if (!this.missTimer && !this.stopped) {
      this.missTimer = setTimeout(() => {
        this.missTimer = null;
        void this.refresh();
      }, wait);
      this.missTimer.unref();
    }
    return null;
  }

  private async fetchOnce(): Promise<boolean> {
    if (this.stopped) return false;
    this.lastAttempt = Date.now();
    const asked = Date.now();
    let res: FetchResult;
    try {
      res = await this.o.fetch(this.body !== null ? this.etag : null);
    } catch (err) {
      this.lastError = `upstream unreachable: ${(err as Error).message}`;
      this.o.log.debug({ err }, 'nodes list not synced: upstream unreachable');
      return false;
    }
    if (res.status === 304 && this.list) {
      this.confirmed = asked;
      this.lastError = null;
      return true;
    }
    const nodes = res.status === 200 ? nodesOf(res.body) : null;
    if (!nodes) {
      // An upstream without the endpoint (an older server, a stand-in): no list, as before.
      this.lastError = `upstream answered ${res.status} without a nodes list`;
      this.o.log.debug({ status: res.status }, 'upstream serves no nodes list');
      return false;
    }
    let list: NodesList;
    try {
      list = NodesList.parse(this.o.myId, JSON.stringify(nodes), 'upstream');
    } catch (err) {
      this.lastError = (err as Error).message;
      this.o.log.warn({ err }, 'upstream sent an invalid nodes list; keeping the previous one');
      return false;
    }
    const changed = this.body !== res.body;
    // On disk first: once the new list is in use, a restart must find it.
    if (changed) {
      const c: CacheFile = { etag: res.etag, fetched_at: new Date(asked).toISOString(), body: res.body };
      await this.save(c).catch((err: unknown) => this.o.log.warn({ err, file: this.o.cacheFile }, 'cannot cache the nodes list'));
    }
    this.list = list;
    this.body = res.body;
    this.etag = res.etag;
    this.confirmed = asked;
    this.lastError = null;
    if (changed) {
      this.o.log.info({ nodes: list.size }, 'nodes list synced from the upstream');
      this.o.onChange?.();
    }
    return true;
  }

  /** Write the cache atomically (temp file, fsync, rename): a crash leaves the old one or the new one. */
  private async save(c: CacheFile): Promise<void> {
    const tmp = join(dirname(this.o.cacheFile), `.${process.pid}.nodes-list.tmp`);
    const fh = await open(tmp, 'w', 0o640);
    try {
      await fh.writeFile(JSON.stringify(c));
      await fh.sync();
    } finally {
      await fh.close();
    }
    try {
      await rename(tmp, this.o.cacheFile);
    } catch (err) {
      await rm(tmp, { force: true });
      throw capstanError('ERR_IO', `cannot write ${this.o.cacheFile}: ${(err as Error).message}`, { cause: err });
    }
  }
}
