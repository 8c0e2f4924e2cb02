/**
 * The relay's cache of the upstream's shared folder, for relays that do not hold the folder
 * themselves (`[shared_folder] path` empty). Files are stored by content, `objects/<sha256>`, and
 * each shared-folder path has an index entry `index/<sha256 of the path>.json` naming the content
 * it had when last fetched or confirmed.
 *
 * - A request that names the sha256 it wants (`?hash=`, which agents send: the signed directive
 *   carries it) is served from the cache without asking the upstream when the cached content has
 *   that hash: bytes with the right hash are the right bytes, however old the entry.
 * - Otherwise an entry younger than `max_age` is served as is; an older one is revalidated with a
 *   `HEAD ?hash=<cached sha256>` (304: still good) and downloaded again only when it changed.
 * - The governor: upstream work runs at most `max_downloads` at a time, at most `max_queued` more
 *   wait (beyond that: ERR_BUSY, 503, the agent retries with jitter), and requests for one path
 *   share one upstream exchange while it is in flight, so 10,000 agents asking for a new file
 *   cost the upstream one download.
 * - Upstream unreachable (or 5xx): the cached copy is served, stale; agents check its hash anyway.
 */
import { createHash, randomUUID } from 'node:crypto';
import { open, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { makeDir } from '@capstan/shared/dir';
import { capstanError } from '@capstan/shared/errors';
import { type Logger } from '@capstan/shared/log';
import type { Upstream } from '../forward/upstream.js';

/**
 * The upstream's answer other than 200/304/404. 401/403 mean it refuses the token this relay
 * passed on (the agent's, or its own): `permanent` (not a reason to hand out a stale copy, nor to
 * retry) with the status in `details.status`, which the route answers as is so that the agent
 * renews its token; anything else is the upstream failing (502, stale copy when there is one).
 */
function upstreamRefusal(method: string, status: number): Error {
  const e = capstanError('ERR_UPSTREAM', `upstream answered ${method} with ${status}`, { details: { status } });
  if (status === 401 || status === 403) Object.assign(e, { permanent: true });
  return e;
}

export interface SharedFolderCacheOptions {
  dir: string;
  upstream: Upstream;
  timeoutMs: number;
  /** An entry confirmed this recently is served without asking the upstream (hashless requests). */
  maxAgeMs: number;
  maxDownloads: number;
  maxQueued: number;
  maxFileBytes: number;
  log: Logger;
}

export interface CachedFile {
  path: string;
  sha256: string;
  size: number;
  /** When the upstream last gave or confirmed it (ms since epoch). */
  confirmed_at: number;
}

/** A bounded number of concurrent tasks, a bounded queue behind them, refusal beyond. */
export class Governor {
  private active = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(private readonly max: number, private readonly maxQueued: number) {}

  get running(): number {
    return this.active;
  }

  get queued(): number {
    return this.waiting.length;
  }

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.active >= this.max) {
      if (this.waiting.length >= this.maxQueued) throw capstanError('ERR_BUSY', `${this.waiting.length} upstream downloads already queued`);
      // The slot is handed over by the task that finishes (active stays counted).
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    } else {
      this.active++;
    }
    try {
      return await task();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.active--;
    }
  }
}

const sha256Hex = (s: string) => createHash('sha256').update(s).digest('hex');

export class SharedFolderCache {
  private readonly inFlight = new Map<string, Promise<CachedFile | null>>();
  private readonly governor: Governor;
  private ready: Promise<unknown> | null = null;
  private sweeping: Promise<void> | null = null;

  constructor(private readonly o: SharedFolderCacheOptions) {
    this.governor = new Governor(o.maxDownloads, o.maxQueued);
  }

  /** The file's bytes on disk. */
  objectPath(sha256: string): string {
    return join(this.o.dir, 'objects', sha256);
  }

  private indexPath(path: string): string {
    return join(this.o.dir, 'index', `${sha256Hex(path)}.json`);
  }

  private async init(): Promise<void> {
    this.ready ??= Promise.all(['objects', 'index', 'tmp'].map((d) => makeDir(join(this.o.dir, d), 0o750)));
    await this.ready;
  }

  private async readIndex(path: string): Promise<CachedFile | null> {
    try {
      const c = JSON.parse(await readFile(this.indexPath(path), 'utf8')) as CachedFile;
      if (c.path !== path || !/^[0-9a-f]{64}$/.test(c.sha256) || typeof c.confirmed_at !== 'number') return null;
      // The object may have been swept or lost: then the entry is worth nothing.
      const s = await stat(this.objectPath(c.sha256)).catch(() => null);
      return s?.isFile() && s.size === c.size ? c : null;
    } catch {
      return null;
    }
  }

  private async writeIndex(c: CachedFile): Promise<void> {
    const tmp = join(this.o.dir, 'tmp', `${randomUUID()}.json`);
    await writeFile(tmp, JSON.stringify(c), { mode: 0o640 });
    await rename(tmp, this.indexPath(c.path));
  }

  /**
   * The cached file for a shared-folder path (segments joined with '/', already checked), fetched
   * or revalidated upstream when needed; null when the upstream has no such file.
   * `want`: the sha256 the caller expects, if it knows it (a GET wanting other content than the
   * cached one downloads without a HEAD first).
   */
  async get(path: string, want: string | undefined, authorization: string | undefined, opts: { head?: boolean } = {}): Promise<CachedFile | null> {
    await this.init();
    // A HEAD asks "is this hash still current?" (a relay below revalidating): answered from what
    // max_age allows, never from the bare fact that we hold that content; and a HEAD never
    // downloads on its own account.
    if (opts.head) want = undefined;
    const cached = await this.readIndex(path);
    if (cached && want !== undefined && cached.sha256 === want) return cached;
    if (cached && want === undefined && this.o.maxAgeMs > 0 && Date.now() - cached.confirmed_at < this.o.maxAgeMs) return cached;
    let p = this.inFlight.get(path);
    if (!p) {
      p = this.governor.run(() => this.refresh(path, want, authorization)).finally(() => this.inFlight.delete(path));
      this.inFlight.set(path, p);
    }
    return p;
  }

  private upstreamPath(path: string, query = ''): string {
    return `/rudder/relay-api/1/shared-folder/${path.split('/').map(encodeURIComponent).join('/')}${query}`;
  }

  private async refresh(path: string, want: string | undefined, authorization: string | undefined): Promise<CachedFile | null> {
    // Re-read: the request that was in flight before this one may just have stored it.
    const cached = await this.readIndex(path);
    if (cached && want !== undefined && cached.sha256 === want) return cached;
    const headers = authorization ? { authorization } : undefined;
    try {
      // A cached copy is revalidated with its hash unless the caller already wants another content.
      if (cached && (want === undefined || want === cached.sha256)) {
        const res = await this.o.upstream.request({ method: 'HEAD', path: this.upstreamPath(path, `?hash=${cached.sha256}`), headers, timeoutMs: this.o.timeoutMs });
        await res.body.dump();
        if (res.statusCode === 304) {
          const fresh = { ...cached, confirmed_at: Date.now() };
          await this.writeIndex(fresh);
          return fresh;
        }
        if (res.statusCode === 404) return this.forget(path);
        if (res.statusCode !== 200) throw upstreamRefusal('HEAD', res.statusCode);
      }
      return await this.download(path, want, headers, cached);
    } catch (err) {
      if (cached && (want === undefined || want === cached.sha256) && !(err as { permanent?: boolean }).permanent) {
        this.o.log.warn({ path, reason: (err as Error).message }, 'serving cached shared-folder file, upstream unavailable');
        return cached;
      }
      throw err;
    }
  }

  private async forget(path: string): Promise<null> {
    await rm(this.indexPath(path), { force: true });
    this.sweepSoon();
    return null;
  }

  private async download(path: string, want: string | undefined, headers: Record<string, string> | undefined, previous: CachedFile | null): Promise<CachedFile | null> {
    // The wanted hash goes along, so that a caching relay above can answer from its own cache.
    const res = await this.o.upstream.request({ method: 'GET', path: this.upstreamPath(path, want ? `?hash=${want}` : ''), headers, timeoutMs: this.o.timeoutMs });
    if (res.statusCode === 404) {
      await res.body.dump();
      return this.forget(path);
    }
    if (res.statusCode !== 200) {
      await res.body.dump();
      throw upstreamRefusal('GET', res.statusCode);
    }
    const declared = Number(res.headers['content-length']);
    if (Number.isFinite(declared) && declared > this.o.maxFileBytes) {
      res.body.destroy();
      throw capstanError('ERR_BODY_TOO_LARGE', `shared-folder ${path} is larger than ${this.o.maxFileBytes} bytes`);
    }
    const tmp = join(this.o.dir, 'tmp', randomUUID());
    const hash = createHash('sha256');
    let size = 0;
    const fh = await open(tmp, 'wx', 0o640);
    try {
      try {
        for await (const chunk of res.body) {
          size += (chunk as Buffer).length;
          if (size > this.o.maxFileBytes) {
            res.body.destroy();
            throw capstanError('ERR_BODY_TOO_LARGE', `shared-folder ${path} is larger than ${this.o.maxFileBytes} bytes`);
          }
          hash.update(chunk as Buffer);
          await fh.write(chunk as Buffer);
        }
        await fh.sync();
      } finally {
        await fh.close();
      }
      const sha256 = hash.digest('hex');
      await rename(tmp, this.objectPath(sha256));
      const entry = { path, sha256, size, confirmed_at: Date.now() };
      await this.writeIndex(entry);
      if (previous && previous.sha256 !== sha256) this.sweepSoon();
      return entry;
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
  }

  /** Remove objects no index entry names any more (old versions, deleted files). */
  private sweepSoon(): void {
    this.sweeping ??= this.sweep()
      .catch((err: unknown) => this.o.log.warn({ err }, 'shared-folder cache sweep failed'))
      .finally(() => (this.sweeping = null));
  }

  async sweep(): Promise<void> {
    await this.init();
    const keep = new Set<string>();
    for (const f of await readdir(join(this.o.dir, 'index'))) {
      try {
        keep.add((JSON.parse(await readFile(join(this.o.dir, 'index', f), 'utf8')) as CachedFile).sha256);
      } catch {
        /* torn or foreign: names nothing */
      }
    }
    // An object being written right now has no index entry yet: it lives in tmp/ until renamed,
    // and is named in the index right after; a grace period covers that gap.
    const now = Date.now();
    for (const f of await readdir(join(this.o.dir, 'objects'))) {
      if (keep.has(f)) continue;
      const s = await stat(join(this.o.dir, 'objects', f)).catch(() => null);
      if (s && now - s.mtimeMs > 60_000) await rm(join(this.o.dir, 'objects', f), { force: true });
    }
  }

  /** Wait for a sweep in progress (close, tests). */
  async idle(): Promise<void> {
    await this.sweeping;
  }
}
