/**
 * The durable spool shared by relayd and server: what a PUT receives is on disk (fsync'd, renamed
 * into place, directory fsync'd) before the client hears 2xx, so an acknowledged file survives a
 * crash or `kill -9`. Layout under the root:
 *
 *   tmp/                         partial uploads (never processed; stale ones are swept)
 *   free/                        delivered files kept to be overwritten by later uploads (recycle.ts)
 *   incoming/<kind>/<name>       complete files waiting to be forwarded or ingested
 *   failed/<kind>/<name>         permanently refused files, with <name>.reason beside them
 */
import { createHash, randomUUID } from 'node:crypto';
import {
  closeSync, openSync, writevSync, close as fsClose, constants as fsc, fdatasync as fsFdatasync, fsync as fsFsync, ftruncate as fsFtruncate, open as fsOpen, writev as fsWritev,
} from 'node:fs';
import { promisify } from 'node:util';
import { lstat, readdir, rename, rm, stat, statfs, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { capstanError } from '../errors.js';
import { makeDir } from '../dir.js';
import { SPOOL_KINDS, type SpoolKind } from '../protocol.js';
import { FreePool, type FreeFile } from './recycle.js';
import { SpoolWriter } from './writer.js';

export interface SpoolOptions {
  root: string;
  /** Largest file accepted (the PUT body limit). */
  maxFileBytes: number;
  /** Refuse new files (ERR_SPOOL_FULL) when the file system has less free space than this. */
  minFreeBytes?: number;
  /**
   * Quota on the bytes waiting in incoming/ (all kinds): a file that would go over it is refused
   * with ERR_SPOOL_FULL before any byte is written. 0 or absent = no quota (and no extra stat calls).
   */
  maxIncomingBytes?: number;
  /**
   * Bodies kept in memory for the caller (AcceptOptions.keepBytes) by all uploads in progress
   * together, at most: past it an upload is only written (its reader reads the file). Default 16 MiB.
   */
  maxKeptBytes?: number;
  /**
   * Threads that write bodies received whole in memory (writer.ts); 0: node:fs on the event
   * loop's thread pool, as large bodies always are. Default 2.
   */
  writerThreads?: number;
  /**
   * Delivered files kept in free/ to be overwritten by the next uploads instead of creating and
   * deleting a file each time (recycle.ts), at most this many; 0: unlink them. Default 1024.
   */
  recycleFiles?: number;
  /** ... and at most this many bytes together (default 64 MiB). Released when disk space runs short. */
  recycleBytes?: number;
  /**
   * Bounds on failed/ (all kinds together): past either, the oldest failed files (and their
   * .reason) are removed as new ones arrive, down to 90% of the bound. 0 or absent: no bound.
   * Anyone who can upload can fill failed/ with refused files; these keep that finite.
   */
  failedMaxFiles?: number;
  failedMaxBytes?: number;
}

/** Bodies up to this size are read into memory and handed to a writer thread whole. */
const IN_MEMORY_MAX = 1024 * 1024;

export interface Accepted {
  path: string;
  bytes: number;
  sha256: string;
  /** The bytes written, when the caller asked to keep them (AcceptOptions.keepBytes). */
  data?: Buffer;
}

export interface AcceptOptions {
  /** Return the body in `data` when it is at most this long (a relay forwards it without re-reading). */
  keepBytes?: number;
  /**
   * Called with the kept body once it is fsync'd and just before it appears in incoming/, so a
   * watcher that sees the file at once can already find its bytes in memory.
   */
  onWritten?: (data: Buffer) => void;
}

const openFd = promisify(fsOpen);
const writevFd = promisify(fsWritev);
const fsyncFd = promisify(fsFsync);
const fdatasyncFd = promisify(fsFdatasync);
const closeFd = promisify(fsClose);
const ftruncateFd = promisify(fsFtruncate);

/**
 * Bodies up to this size are written with writevSync. Only the calls that do not wait for the
 * disk block the event loop (open of a reused file, a small write into the page cache, close);
 * fdatasync, rename and the directory fsync stay on the thread pool. Measured under the relay
 * bench: with four pool threads mostly blocked in fdatasync, an open or a close queued behind
 * them for longer than the blocking call takes.
 */
const SYNC_WRITE_MAX = 256 * 1024;

/** Sizes of files in incoming/ remembered for their removal (beyond this, removal stats the file). */
const MAX_SIZES_KNOWN = 65_536;

/** What is left of `bufs` once its first `n` bytes are written (writev may write less than asked). */
function skipBytes(bufs: Buffer[], n: number): Buffer[] {
  let i = 0;
  while (i < bufs.length && n >= bufs[i]!.length) n -= bufs[i++]!.length;
  if (i === bufs.length) return [];
  return [bufs[i]!.subarray(n), ...bufs.slice(i + 1)];
}

/** A spool entry name must be one plain path component: callers validate the format itself. */
export function assertPlainName(name: string): void {
  if (
    name.length === 0 || name.length > 255 || name.startsWith('.') || /[/\\\0]/.test(name) || name.endsWith('.reason')
  ) {
    throw capstanError('ERR_BAD_PATH', 'file name must be a single plain path component');
  }
}


export class Spool {
  readonly root: string;
  private readonly maxFileBytes: number;
  private readonly minFreeBytes: number;
  private readonly maxIncomingBytes: number;
  private readonly maxKeptBytes: number;
  /** Bytes of bodies being kept by uploads in progress (see maxKeptBytes). */
  private keptInFlight = 0;
  /** Bytes in incoming/ plus bytes being written, tracked only when a quota is set. */
  private incomingBytes = 0;
  /** Free bytes at the last statfs, less what was written since, and when that statfs was. */
  private freeSeen = 0;
  private freeCheckedAt = 0;
  /** Directory fsyncs in progress / queued per directory, shared by concurrent accepts. */
  private readonly dirSyncs = new Map<string, { running: Promise<void> | null; next: Promise<void> | null }>();
  /**
   * One read-only descriptor per directory, opened at its first fsync and kept: an open and a
   * close per fsync were ~3% of the relay's CPU in its bench. close() releases them.
   */
  private readonly dirFds = new Map<string, Promise<number>>();
  private readonly writer: SpoolWriter | null;
  private readonly pool: FreePool | null;
  /**
   * The spool's directories, joined once: a file's path is then `${dir}/${name}` (names are one
   * plain component, assertPlainName). path.join per upload was ~5 KB of garbage per file.
   */
  private readonly dirs: { tmp: string; free: string; incoming: Record<SpoolKind, string>; failed: Record<SpoolKind, string> };
  /**
   * Size of each file this spool put in incoming/ ("kind/name"), for the pool and the quota at
   * removal. Only sizes known for sure: none while an upload of that name is in progress, nor
   * after two overlapped (which of them is in place then depends on the order of their renames).
   * A reused file's size decides whether it is cut after the overwrite, so a wrong one would leave
   * old bytes at its end; unknown sizes are read from the file once it is in free/.
   */
  private readonly sizes = new Map<string, number>();
  /** Uploads in progress per "kind/name", and whether two of them overlapped. */
  private readonly writing = new Map<string, { n: number; overlapped: boolean }>();
  /** Files recycled (taken from free/ by an upload) since start. */
  private reused = 0;
  private readonly failedMaxFiles: number;
  private readonly failedMaxBytes: number;
  /** Files and bytes in failed/ (reasons excluded), counted at init and kept up to date. */
  private failedFiles = 0;
  private failedBytes = 0;
  /** Failed files removed by the bounds since start. */
  private failedEvicted = 0;
  private trimming: Promise<number> | null = null;

  constructor(opts: SpoolOptions) {
    this.root = opts.root;
    this.maxFileBytes = opts.maxFileBytes;
    this.minFreeBytes = opts.minFreeBytes ?? 0;
    this.maxIncomingBytes = opts.maxIncomingBytes ?? 0;
    this.maxKeptBytes = opts.maxKeptBytes ?? 16 * 1024 * 1024;
    const threads = opts.writerThreads ?? 2;
    this.writer = threads > 0 ? new SpoolWriter(threads) : null;
    const byKind = (sub: string) => Object.fromEntries(SPOOL_KINDS.map((k) => [k, join(this.root, sub, k)])) as Record<SpoolKind, string>;
    this.dirs = { tmp: join(this.root, 'tmp'), free: join(this.root, 'free'), incoming: byKind('incoming'), failed: byKind('failed') };
    const recycleFiles = opts.recycleFiles ?? 1024;
    this.pool = recycleFiles > 0 ? new FreePool(recycleFiles, opts.recycleBytes ?? 64 * 1024 * 1024, IN_MEMORY_MAX) : null;
    this.failedMaxFiles = opts.failedMaxFiles ?? 0;
    this.failedMaxBytes = opts.failedMaxBytes ?? 0;
  }

  /** What failed/ holds (reasons excluded), its bounds (0: none) and how many files the bounds removed since start. */
  get failedUsage(): { files: number; bytes: number; maxFiles: number; maxBytes: number; evicted: number } {
    return { files: this.failedFiles, bytes: this.failedBytes, maxFiles: this.failedMaxFiles, maxBytes: this.failedMaxBytes, evicted: this.failedEvicted };
  }

  /** Every failed file (reasons excluded) with its kind, size and mtime. */
  private async listFailed(): Promise<Array<{ kind: SpoolKind; name: string; size: number; mtimeMs: number }>> {
    const out: Array<{ kind: SpoolKind; name: string; size: number; mtimeMs: number }> = [];
    for (const kind of SPOOL_KINDS) {
      const dir = this.failedDir(kind);
      for (const name of await readdir(dir)) {
        if (name.endsWith('.reason')) continue;
        const s = await lstat(join(dir, name)).catch(() => null);
        if (s?.isFile()) out.push({ kind, name, size: s.size, mtimeMs: s.mtimeMs });
      }
    }
    return out;
  }

  private async countFailed(): Promise<void> {
    const all = await this.listFailed();
    this.failedFiles = all.length;
    this.failedBytes = all.reduce((n, f) => n + f.size, 0);
  }

  private overFailedBounds(): boolean {
    return (this.failedMaxFiles > 0 && this.failedFiles > this.failedMaxFiles) || (this.failedMaxBytes > 0 && this.failedBytes > this.failedMaxBytes);
  }

  /**
   * Remove the oldest failed files until failed/ is within 90% of its bounds. One pass at a time;
   * files failed meanwhile are counted by fail() and trimmed by the next pass.
   */
  private async trimFailed(): Promise<void> {
    while (this.overFailedBounds()) {
      this.trimming ??= this.trimPass().finally(() => {
        this.trimming = null;
      });
      if ((await this.trimming) === 0) break;
    }
  }

  /** One pass: list, remove the oldest beyond 90% of the bounds; returns how many went. */
  private async trimPass(): Promise<number> {
    const all = (await this.listFailed()).sort((a, b) => a.mtimeMs - b.mtimeMs);
    let files = all.length;
    let bytes = all.reduce((n, f) => n + f.size, 0);
    const files90 = Math.floor(this.failedMaxFiles * 0.9);
    const bytes90 = Math.floor(this.failedMaxBytes * 0.9);
    let removed = 0;
    for (const f of all) {
      if ((this.failedMaxFiles <= 0 || files <= files90) && (this.failedMaxBytes <= 0 || bytes <= bytes90)) break;
      const path = join(this.failedDir(f.kind), f.name);
      await rm(path, { force: true });
      await rm(`${path}.reason`, { force: true });
      files--;
      bytes -= f.size;
      removed++;
      this.failedEvicted++;
      this.failedFiles--;
      this.failedBytes -= f.size;
    }
    // Nothing to remove although the counts say over: they drifted (files removed by hand); recount.
    if (removed === 0) await this.countFailed();
    return removed;
  }

  get freeDir(): string {
    return this.dirs.free;
  }

  /** Files waiting in free/ to be overwritten, and how many uploads reused one since start. */
  get recycling(): { files: number; bytes: number; reused: number } {
    return { files: this.pool?.count ?? 0, bytes: this.pool?.size ?? 0, reused: this.reused };
  }

  async init(): Promise<void> {
    await makeDir(join(this.root, 'tmp'));
    await this.adoptFree();
    for (const kind of SPOOL_KINDS) {
      await makeDir(this.incomingDir(kind));
      await makeDir(this.failedDir(kind));
    }
    await this.countFailed();
    if (this.overFailedBounds()) await this.trimFailed();
    if (this.maxIncomingBytes > 0) {
      this.incomingBytes = 0;
      for (const kind of SPOOL_KINDS) {
        for (const n of await readdir(this.incomingDir(kind))) {
          const s = await stat(join(this.incomingDir(kind), n)).catch(() => null);
          if (s?.isFile()) this.incomingBytes += s.size;
        }
      }
    }
  }

  /** Bytes waiting in incoming/ when a quota is set (null without one). */
  get usage(): { bytes: number; quota: number } | null {
    return this.maxIncomingBytes > 0 ? { bytes: this.incomingBytes, quota: this.maxIncomingBytes } : null;
  }

  incomingDir(kind: SpoolKind): string {
    return this.dirs.incoming[kind];
  }

  failedDir(kind: SpoolKind): string {
    return this.dirs.failed[kind];
  }

  /**
   * Write a body into the spool. `declaredLength` is the request's Content-Length: more or fewer
   * bytes than declared is an error and leaves nothing behind.
   */
  async accept(
    kind: SpoolKind, name: string, body: AsyncIterable<Buffer | Uint8Array> | Iterable<Buffer | Uint8Array>, declaredLength: number,
    opts: AcceptOptions = {},
  ): Promise<Accepted> {
    assertPlainName(name);
    if (declaredLength > this.maxFileBytes) {
      throw capstanError('ERR_BODY_TOO_LARGE', `body of ${declaredLength} bytes exceeds the limit of ${this.maxFileBytes}`);
    }
    await this.checkFreeSpace(declaredLength);
    // Reserve the quota before writing, so concurrent uploads cannot overshoot it together.
    if (this.maxIncomingBytes > 0) {
      if (this.incomingBytes + declaredLength > this.maxIncomingBytes) {
        throw capstanError('ERR_SPOOL_FULL', `spool quota of ${this.maxIncomingBytes} bytes reached`);
      }
      this.incomingBytes += declaredLength;
    }
    const state = { renamed: false };
    const key = `${kind}/${name}`;
    this.sizes.delete(key);
    const w = this.writing.get(key);
    if (w) {
      w.n++;
      w.overlapped = true;
    } else {
      this.writing.set(key, { n: 1, overlapped: false });
    }
    // Memory for bodies held whole (kept for the caller, or on their way to a writer thread) is
    // bounded across uploads, so that a burst of thousands stays bounded.
    const inMemory = this.writer !== null && declaredLength <= IN_MEMORY_MAX;
    const keep = (inMemory || declaredLength <= (opts.keepBytes ?? 0)) && this.keptInFlight + declaredLength <= this.maxKeptBytes;
    if (keep) this.keptInFlight += declaredLength;
    try {
      const done = keep && inMemory
        ? await this.writeWhole(kind, name, body, declaredLength, state, opts)
        : await this.write(kind, name, body, declaredLength, state, keep ? opts : { ...opts, keepBytes: 0 });
      const mine = this.writing.get(key)!;
      if (!mine.overlapped && (this.sizes.size < MAX_SIZES_KNOWN)) this.sizes.set(key, done.bytes);
      return done;
    } finally {
      const mine = this.writing.get(key)!;
      if (--mine.n === 0) this.writing.delete(key);
      if (keep) this.keptInFlight -= declaredLength;
      if (!state.renamed && this.maxIncomingBytes > 0) this.incomingBytes -= declaredLength;
    }
  }

  private async write(
    kind: SpoolKind, name: string, body: AsyncIterable<Buffer | Uint8Array> | Iterable<Buffer | Uint8Array>, declaredLength: number,
    state: { renamed: boolean }, opts: AcceptOptions,
  ): Promise<Accepted> {
    const keepBytes = opts.keepBytes ?? 0;
    const hash = createHash('sha256');
    let bytes = 0;
    // Plain descriptors rather than FileHandle objects: at thousands of uploads a second the
    // FileHandle's bookkeeping was the largest cost on the main thread (measured by the relay bench).
    const { fd, path: tmp, reusedSize } = await this.openTarget(declaredLength);
    // Chunks are gathered and written together (one writev for a small file), at most this much
    // at once: with the socket paused meanwhile, that bounds an upload's memory whatever its size.
    const FLUSH = 256 * 1024;
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    const kept: Buffer[] | null = declaredLength <= keepBytes ? [] : null;
    // A small body is written with a blocking call: into the page cache, tens of µs, where the
    // thread pool would queue it behind fdatasyncs of other uploads (see openTarget()).
    const syncWrite = declaredLength <= SYNC_WRITE_MAX;
    const flush = async () => {
      let bufs = pending;
      pending = [];
      pendingBytes = 0;
      while (bufs.length > 0) {
        const n = syncWrite ? writevSync(fd, bufs) : (await writevFd(fd, bufs)).bytesWritten;
        bufs = skipBytes(bufs, n);
      }
    };
    let ok = false;
    try {
      for await (const c of body) {
        const chunk = Buffer.isBuffer(c) ? c : Buffer.from(c.buffer, c.byteOffset, c.byteLength);
        bytes += chunk.length;
        if (bytes > declaredLength || bytes > this.maxFileBytes) {
          throw capstanError('ERR_BODY_TOO_LARGE', 'body is longer than its Content-Length or the limit');
        }
        hash.update(chunk);
        pending.push(chunk);
        kept?.push(chunk);
        pendingBytes += chunk.length;
        if (pendingBytes >= FLUSH) await flush();
      }
      if (bytes !== declaredLength) {
        throw capstanError('ERR_BAD_REQUEST', `body has ${bytes} bytes, Content-Length said ${declaredLength}`);
      }
      await flush();
      // A reused file longer than this body is cut to it (its size is part of what fdatasync saves).
      if (reusedSize > bytes) await ftruncateFd(fd, bytes);
      // fdatasync: the data and what reading it back needs (the size), not the timestamps; the
      // name is made durable by the rename and the directory fsync below.
      await fdatasyncFd(fd);
      ok = true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOSPC') {
        throw capstanError('ERR_SPOOL_FULL', 'no space left in the spool', { cause: err });
      }
      throw err;
    } finally {
      closeSync(fd); // no disk wait on a local file system (see SYNC_WRITE_MAX)
      if (!ok) await rm(tmp, { force: true });
    }
    // One chunk that owns its whole memory is kept as it is (a copy would double the churn); a
    // slice of a larger read buffer is copied, or keeping it would pin the whole buffer.
    const only = kept?.length === 1 ? kept[0]! : null;
    const data = only && only.byteOffset === 0 && only.buffer.byteLength === only.length ? only : kept ? Buffer.concat(kept, bytes) : undefined;
    if (data) opts.onWritten?.(data);
    const dest = `${this.dirs.incoming[kind]}/${name}`;
    // A re-sent file replaces its earlier copy: the quota must not count both.
    const replaced = this.maxIncomingBytes > 0 ? (await stat(dest).catch(() => null))?.size ?? 0 : 0;
    try {
      await rename(tmp, dest);
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
    state.renamed = true;
    this.incomingBytes -= replaced;
    await this.syncDir(this.incomingDir(kind));
    this.freeSeen -= bytes;
    return { path: dest, bytes, sha256: hash.digest('hex'), ...(data ? { data } : {}) };
  }

  /**
   * The body read whole into one buffer of its declared length, then written by a writer thread
   * (create, write, fdatasync, rename, directory fsync there). Same promises as write().
   */
  private async writeWhole(
    kind: SpoolKind, name: string, body: AsyncIterable<Buffer | Uint8Array> | Iterable<Buffer | Uint8Array>, declaredLength: number,
    state: { renamed: boolean }, opts: AcceptOptions,
  ): Promise<Accepted> {
    // Shared memory: the writer thread reads these very bytes (a plain buffer would be copied into
    // the message and again into the thread's heap), while this thread keeps them for forwarding
    // or ingest.
    const data = Buffer.from(new SharedArrayBuffer(declaredLength));
    let bytes = 0;
    for await (const c of body) {
      if (bytes + c.byteLength > declaredLength) {
        throw capstanError('ERR_BODY_TOO_LARGE', 'body is longer than its Content-Length or the limit');
      }
      data.set(c, bytes);
      bytes += c.byteLength;
    }
    if (bytes !== declaredLength) {
      throw capstanError('ERR_BAD_REQUEST', `body has ${bytes} bytes, Content-Length said ${declaredLength}`);
    }
    // Handed over before the writer renames it into incoming/, so that a watcher seeing the file
    // at once finds its bytes in memory. Should the write fail, no file refers to them.
    const keep = declaredLength <= (opts.keepBytes ?? 0);
    if (keep) opts.onWritten?.(data);
    const dest = `${this.dirs.incoming[kind]}/${name}`;
    let written: { sha256: string; replaced: number };
    const reuse = this.pool?.take(declaredLength) ?? null;
    if (reuse) this.reused++;
    try {
      written = reuse
        ? await this.writer!.write(reuse.path, dest, data, reuse.size)
        : await this.writer!.write(`${this.dirs.tmp}/${randomUUID()}.part`, dest, data);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOSPC') throw capstanError('ERR_SPOOL_FULL', 'no space left in the spool', { cause: err });
      throw err;
    }
    state.renamed = true;
    if (this.maxIncomingBytes > 0) this.incomingBytes -= written.replaced;
    this.freeSeen -= bytes;
    return { path: dest, bytes, sha256: written.sha256, ...(keep ? { data } : {}) };
  }

  /**
   * fsync a directory after a rename into it. Concurrent callers share one fsync, but never one
   * that started before their rename: a caller arriving while an fsync runs waits for the next.
   * Under load this halves the fsyncs per upload without weakening what a 2xx promises.
   */
  private syncDir(dir: string): Promise<void> {
    let st = this.dirSyncs.get(dir);
    if (!st) {
      st = { running: null, next: null };
      this.dirSyncs.set(dir, st);
    }
    const s = st;
    const start = (): Promise<void> => {
      const p = this.fsyncDir(dir).finally(() => {
        if (s.running === p) s.running = null;
      });
      s.running = p;
      return p;
    };
    if (!s.running) return start();
    if (!s.next) {
      s.next = s.running.catch(() => {}).then(() => {
        s.next = null;
        return start();
      });
    }
    return s.next;
  }

  private async fsyncDir(dir: string): Promise<void> {
    let fd = this.dirFds.get(dir);
    if (!fd) {
      fd = openFd(dir, fsc.O_RDONLY);
      this.dirFds.set(dir, fd);
      fd.catch(() => this.dirFds.delete(dir));
    }
    await fsyncFd(await fd);
  }

  /** Release the directory descriptors kept for fsync (the spool stays usable: they reopen). */
  async close(): Promise<void> {
    await this.writer?.close();
    const fds = [...this.dirFds.values()];
    this.dirFds.clear();
    for (const fd of fds) await closeFd(await fd).catch(() => {});
  }

  /** Put bytes already in memory into the spool (used by the server for files it relays to itself). */
  async acceptBuffer(kind: SpoolKind, name: string, data: Buffer): Promise<Accepted> {
    return this.accept(kind, name, [data], data.length);
  }

  /**
   * Refuse when the file system would keep less than its reserve. statfs is asked at most every
   * 500 ms while far from the reserve (one call per upload was measurable at thousands a second);
   * meanwhile what this spool writes is subtracted, and near the reserve every upload asks again.
   */
  private async checkFreeSpace(need: number): Promise<void> {
    if (this.minFreeBytes <= 0) return;
    const now = Date.now();
    if (now - this.freeCheckedAt > 500 || this.freeSeen - need < this.minFreeBytes * 2) {
      const s = await statfs(this.root);
      this.freeSeen = Number(s.bavail) * Number(s.bsize);
      this.freeCheckedAt = now;
    }
    if (this.freeSeen - need < this.minFreeBytes && (this.pool?.count ?? 0) > 0) {
      // The files kept for reuse go first: they are only there to save work.
      await this.releaseFree();
      const s = await statfs(this.root);
      this.freeSeen = Number(s.bavail) * Number(s.bsize);
      this.freeCheckedAt = Date.now();
    }
    if (this.freeSeen - need < this.minFreeBytes) {
      throw capstanError('ERR_SPOOL_FULL', `spool file system has ${this.freeSeen} bytes free, keeping ${this.minFreeBytes} in reserve`);
    }
  }

  /** Names waiting in incoming/<kind>, oldest first (by mtime), dot files and temp files excluded. */
  async list(kind: SpoolKind): Promise<string[]> {
    const dir = this.incomingDir(kind);
    const names = (await readdir(dir)).filter((n) => !n.startsWith('.'));
    const withTimes = await Promise.all(
      names.map(async (n) => {
        try {
          return { n, t: (await stat(join(dir, n))).mtimeMs };
        } catch {
          return null; // removed meanwhile
        }
      }),
    );
    return withTimes
      .filter((x): x is { n: string; t: number } => x !== null)
      .sort((a, b) => a.t - b.t)
      .map((x) => x.n);
  }

  /**
   * A file is done with: kept in free/ for a later upload to overwrite when the pool has room
   * (recycle.ts), unlinked otherwise. Not through a writer thread: there it would wait behind a
   * pass of fdatasyncs, and the caller (a forward's slot) with it.
   */
  async remove(kind: SpoolKind, name: string): Promise<void> {
    const path = `${this.dirs.incoming[kind]}/${name}`;
    const key = `${kind}/${name}`;
    // While an upload of the same name is in progress, the file renamed here may be either copy.
    let size = this.writing.has(key) ? undefined : this.sizes.get(key);
    this.sizes.delete(key);
    try {
      if (this.pool && size === undefined) {
        // Size unknown: move the file out of the way first, then read the size of what was moved.
        const dest = `${this.dirs.free}/${randomUUID()}`;
        await rename(path, dest);
        size = (await stat(dest)).size;
        if (this.pool.reserve(size)) this.pool.put({ path: dest, size }, true);
        else await unlink(dest);
      } else if (this.pool && size !== undefined && this.pool.reserve(size)) {
        const dest = `${this.dirs.free}/${randomUUID()}`;
        try {
          await rename(path, dest);
        } catch (err) {
          this.pool.release(size);
          throw err;
        }
        this.pool.put({ path: dest, size }, true);
      } else {
        if (size === undefined && this.maxIncomingBytes > 0) size = (await stat(path).catch(() => null))?.size;
        await unlink(path);
      }
      if (size !== undefined && this.maxIncomingBytes > 0) this.incomingBytes -= size;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }

  /**
   * The descriptor an upload writes to: a file from free/ opened for overwriting when the pool has
   * one (its old size, to cut it to the new one), else a new temp file.
   */
  private async openTarget(size: number): Promise<{ fd: number; path: string; reusedSize: number }> {
    const reuse = this.pool?.take(size) ?? null;
    try {
      if (reuse) {
        try {
          // Blocking: the inode was in use moments ago (cached), so this is a few µs (see SYNC_WRITE_MAX).
          const fd = openSync(reuse.path, fsc.O_WRONLY | fsc.O_NOFOLLOW);
          this.reused++;
          return { fd, path: reuse.path, reusedSize: reuse.size };
        } catch (err) {
          // Removed behind our back (an admin cleaning free/), or replaced by a link (ELOOP, not
          // followed): dropped, and a new file will do.
          const code = (err as NodeJS.ErrnoException).code;
          if (code !== 'ENOENT' && code !== 'ELOOP') throw err;
          if (code === 'ELOOP') await unlink(reuse.path).catch(() => {});
        }
      }
      const path = `${this.dirs.tmp}/${randomUUID()}.part`;
      return { fd: await openFd(path, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL, 0o640), path, reusedSize: 0 };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOSPC') throw capstanError('ERR_SPOOL_FULL', 'no space left in the spool', { cause: err });
      throw err;
    }
  }

  /**
   * At start: what free/ holds from before is adopted up to the pool's limits, the rest (and all
   * of it when recycling is off) is unlinked. Contents do not matter: each is overwritten whole.
   */
  private async adoptFree(): Promise<void> {
    await makeDir(this.freeDir);
    for (const n of await readdir(this.freeDir)) {
      const p = join(this.freeDir, n);
      // lstat: only regular files are adopted (a link planted in free/ is removed, never written through).
      const s = await lstat(p).catch(() => null);
      if (!s) continue;
      if (s.isFile() && this.pool?.reserve(s.size)) this.pool.put({ path: p, size: s.size }, true);
      else await rm(p, { recursive: true, force: true });
    }
  }

  /** Unlink every file in free/ (disk space is running short: they are only an optimisation). */
  private async releaseFree(): Promise<number> {
    const files: FreeFile[] = this.pool?.drain() ?? [];
    await Promise.all(files.map((f) => unlink(f.path).catch(() => {})));
    return files.reduce((n, f) => n + f.size, 0);
  }

  /** Move a file to failed/ with a one-line reason beside it; the bytes are kept, never dropped. */
  async fail(kind: SpoolKind, name: string, reason: string): Promise<void> {
    const dest = join(this.failedDir(kind), name);
    const src = join(this.incomingDir(kind), name);
    const size = (await stat(src).catch(() => null))?.size;
    const replaced = (await lstat(dest).catch(() => null))?.size;
    await writeFile(`${dest}.reason`, `${new Date().toISOString()} ${reason.replace(/\s+/g, ' ')}\n`);
    await rename(src, dest);
    this.sizes.delete(`${kind}/${name}`);
    if (size !== undefined && this.maxIncomingBytes > 0) this.incomingBytes -= size;
    if (replaced === undefined) this.failedFiles++;
    this.failedBytes += (size ?? 0) - (replaced ?? 0);
    if (this.overFailedBounds()) await this.trimFailed();
  }

  /**
   * Remove failed files (and their .reason) older than `maxAgeMs`: failed/ is kept for an admin to
   * look at, not forever (RUDDER never cleaned it, #19435).
   */
  async sweepFailed(maxAgeMs: number, now = Date.now()): Promise<number> {
    let removed = 0;
    for (const kind of SPOOL_KINDS) {
      const dir = this.failedDir(kind);
      for (const n of await readdir(dir)) {
        const p = join(dir, n);
        const s = await stat(p).catch(() => null);
        if (s && now - s.mtimeMs > maxAgeMs) {
          await rm(p, { force: true });
          if (!n.endsWith('.reason')) removed++;
        }
      }
    }
    await this.countFailed();
    if (this.overFailedBounds()) await this.trimFailed();
    return removed;
  }

  /** Modification time of the oldest file waiting in incoming/<kind>, or null when it is empty. */
  async oldest(kind: SpoolKind): Promise<number | null> {
    const dir = this.incomingDir(kind);
    let oldest: number | null = null;
    for (const n of await readdir(dir)) {
      const s = await stat(join(dir, n)).catch(() => null);
      if (s && (oldest === null || s.mtimeMs < oldest)) oldest = s.mtimeMs;
    }
    return oldest;
  }

  async depth(): Promise<Record<SpoolKind, number>> {
    const out = {} as Record<SpoolKind, number>;
    for (const kind of SPOOL_KINDS) out[kind] = (await readdir(this.incomingDir(kind))).length;
    return out;
  }

  /** Remove partial uploads older than `maxAgeMs` (left by a crash mid-upload). */
  async sweepTmp(maxAgeMs: number, now = Date.now()): Promise<number> {
    const dir = join(this.root, 'tmp');
    let removed = 0;
    for (const n of await readdir(dir)) {
      const p = join(dir, n);
      const s = await stat(p).catch(() => null);
      if (s && now - s.mtimeMs > maxAgeMs) {
        await rm(p, { force: true });
        removed++;
      }
    }
    return removed;
  }
}
