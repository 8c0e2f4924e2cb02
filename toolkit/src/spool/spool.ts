/**
 * The durable spool shared by relayd and server: what a PUT receives is on disk (fsync'd, renamed
 * into place, directory fsync'd) before the client hears 2xx, so an acknowledged file survives a
 * crash or `kill -9`. This class wires the spool's jobs together:
 *
 *   layout.ts        the directories (tmp/, free/, incoming/<kind>/, failed/<kind>/) and names
 *   admission.ts     size limit, free-space reserve, incoming/ quota, bodies held in memory
 *   write.ts         the write strategies (writer threads, node:fs), which reuse files from
 *   recycle.ts       free/, delivered files kept to be overwritten
 *   dir-sync.ts      batched directory fsyncs
 *   sizes.ts         the sizes of files in incoming/ known for sure
 *   housekeeping.ts  failed/ bounds and retention, stale partial uploads
 */
import { randomUUID } from 'node:crypto';
import { open, readdir, rm, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { capstanError } from '@capstan/shared/errors';
import { SPOOL_KINDS, type SpoolKind } from '@capstan/shared/protocol';
import { Admission } from './admission.js';
import { DirSync } from './dir-sync.js';
import { asSpoolFull } from './admission.js';
import { FailedFiles, sweepOld } from './housekeeping.js';
import { assertPlainName, makeSpoolDirs, namesByAge, oldestIn, scanByAge, spoolDirs, type SpoolDirs } from './layout.js';
import { adoptFree, Recycler } from './recycle.js';
import { KnownSizes } from './sizes.js';
import { IN_MEMORY_MAX, Writes, type Accepted, type AcceptOptions, type Body } from './write.js';
import { SpoolWriter } from './writer.js';

export type { Accepted, AcceptOptions } from './write.js';

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
   * deleting a file each time (recycle.ts), at most this many; 0: unlink them. Default 4096.
   */
  recycleFiles?: number;
  /** ... and at most this many bytes together (default 256 MiB). Released when disk space runs short. */
  recycleBytes?: number;
  /**
   * Bounds on failed/ (all kinds together): past either, the oldest failed files (and their
   * .reason) are removed as new ones arrive, down to 90% of the bound. 0 or absent: no bound.
   * Anyone who can upload can fill failed/ with refused files; these keep that finite.
   */
  failedMaxFiles?: number;
  failedMaxBytes?: number;
}

export class Spool {
  readonly root: string;
  private readonly dirs: SpoolDirs;
  private readonly admission: Admission;
  private readonly recycler: Recycler | null;
  private readonly writes: Writes;
  private readonly dirSync = new DirSync();
  private readonly sizes = new KnownSizes();
  private readonly failed: FailedFiles;
  /** `kind/name` of the uploads being received: a second upload of a name waits for none, it is refused. */
  private readonly receiving = new Set<string>();

  constructor(opts: SpoolOptions) {
    this.root = opts.root;
    this.dirs = spoolDirs(this.root);
    const recycleFiles = opts.recycleFiles ?? 4096;
    this.recycler = recycleFiles > 0 ? new Recycler(this.dirs.free, recycleFiles, opts.recycleBytes ?? 256 * 1024 * 1024, IN_MEMORY_MAX) : null;
    this.admission = new Admission({
      root: this.root,
      maxFileBytes: opts.maxFileBytes,
      minFreeBytes: opts.minFreeBytes ?? 0,
      maxIncomingBytes: opts.maxIncomingBytes ?? 0,
      maxKeptBytes: opts.maxKeptBytes ?? 16 * 1024 * 1024,
    }, this.recycler);
    const threads = opts.writerThreads ?? 2;
    this.writes = new Writes(this.dirs, this.admission, this.dirSync, this.recycler, threads > 0 ? new SpoolWriter(threads) : null);
    this.failed = new FailedFiles(this.dirs.failed, opts.failedMaxFiles ?? 0, opts.failedMaxBytes ?? 0);
  }

  async init(): Promise<void> {
    await makeSpoolDirs(this.dirs);
    await adoptFree(this.dirs.free, this.recycler?.pool ?? null);
    await this.failed.init();
    await this.admission.init(this.dirs);
  }

  /** What failed/ holds (reasons excluded), its bounds (0: none) and how many files the bounds removed since start. */
  get failedUsage(): { files: number; bytes: number; maxFiles: number; maxBytes: number; evicted: number } {
    return this.failed.usage;
  }

  get freeDir(): string {
    return this.dirs.free;
  }

  /** Files waiting in free/ to be overwritten, and how many uploads reused one since start. */
  get recycling(): { files: number; bytes: number; reused: number } {
    const r = this.recycler;
    return { files: r?.pool.count ?? 0, bytes: r?.pool.size ?? 0, reused: r?.reused ?? 0 };
  }

  /** ERR_SPOOL_FULL when `length` more bytes on the spool's file system would eat into spool.min_free_space (Admission.keepReserve). */
  keepReserve(length: number): Promise<void> {
    return this.admission.keepReserve(length);
  }

  /** Bytes waiting in incoming/ when a quota is set (null without one). */
  get usage(): { bytes: number; quota: number } | null {
    return this.admission.usage;
  }

  incomingDir(kind: SpoolKind): string {
    return this.dirs.incoming[kind];
  }

  failedDir(kind: SpoolKind): string {
    return this.dirs.failed[kind];
  }

  /**
   * Write a body into the spool. `declaredLength` is the request's Content-Length: more or fewer
   * bytes than declared is an error and leaves nothing behind. A file already spooled under the
   * name is never replaced (place.ts): the same bytes are a success, different ones
   * ERR_SPOOL_CONFLICT, or for an OCS half a candidate beside it (`accepted.path` says where).
   */
  async accept(kind: SpoolKind, name: string, body: Body, declaredLength: number, opts: AcceptOptions = {}): Promise<Accepted> {
    assertPlainName(name);
    const key = `${kind}/${name}`;
    // One upload of a name at a time: what it keeps in memory under the name, and the name it
    // takes in incoming/, are then its own (write.ts, place.ts).
    if (this.receiving.has(key)) throw capstanError('ERR_SPOOL_CONFLICT', `${name} is being received already`);
    this.receiving.add(key);
    try {
      return await this.acceptOne(kind, name, key, body, declaredLength, opts);
    } finally {
      this.receiving.delete(key);
    }
  }

  private async acceptOne(kind: SpoolKind, name: string, key: string, body: Body, declaredLength: number, opts: AcceptOptions): Promise<Accepted> {
    await this.admission.admit(declaredLength);
    const state = { renamed: false };
    this.sizes.begin(key);
    // Memory for bodies held whole (kept for the caller, or on their way to a writer thread) is
    // bounded across uploads, so that a burst of thousands stays bounded.
    const inMemory = this.writes.writer !== null && declaredLength <= IN_MEMORY_MAX;
    const keep = (inMemory || declaredLength <= (opts.keepBytes ?? 0)) && this.admission.hold(declaredLength);
    try {
      const done = keep && inMemory
        ? await this.writes.whole(kind, name, body, declaredLength, state, opts)
        : await this.writes.stream(kind, name, body, declaredLength, state, keep ? opts : { ...opts, keepBytes: 0 });
      this.sizes.written(key, done.bytes);
      return done;
    } finally {
      this.sizes.end(key);
      if (keep) this.admission.unhold(declaredLength);
      if (!state.renamed) this.admission.unreserve(declaredLength);
    }
  }

  /** Put bytes already in memory into the spool (used by the server for files it relays to itself). */
  async acceptBuffer(kind: SpoolKind, name: string, data: Buffer): Promise<Accepted> {
    return this.accept(kind, name, [data], data.length);
  }

  /** Names waiting in incoming/<kind>, oldest first (by mtime), dot files and temp files excluded. */
  async list(kind: SpoolKind): Promise<string[]> {
    return namesByAge(this.incomingDir(kind));
  }

  /**
   * Every name waiting in incoming/<kind> (`all`), and those `known` does not claim, oldest first
   * (`fresh`): a processor's catch-up stats only the files it does not hold already.
   */
  async scan(kind: SpoolKind, known: (name: string) => boolean): Promise<{ all: string[]; fresh: string[] }> {
    return scanByAge(this.incomingDir(kind), known);
  }

  /**
   * A file is done with: kept in free/ for a later upload to overwrite when the pool has room
   * (recycle.ts), unlinked otherwise. Not through a writer thread: there it would wait behind a
   * pass of fdatasyncs, and the caller (a forward's slot) with it.
   */
  async remove(kind: SpoolKind, name: string): Promise<void> {
    const path = `${this.dirs.incoming[kind]}/${name}`;
    let size = this.sizes.take(`${kind}/${name}`);
    try {
      const kept = this.recycler ? await this.recycler.retire(path, size) : null;
      if (kept !== null) {
        size = kept;
      } else {
        if (size === undefined && this.admission.maxIncomingBytes > 0) size = (await stat(path).catch(() => null))?.size;
        await unlink(path);
      }
      if (size !== undefined) this.admission.left(size);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }

  /** Move a file to failed/ with a one-line reason beside it; the bytes are kept, never dropped. */
  async fail(kind: SpoolKind, name: string, reason: string): Promise<void> {
    const moved = await this.failed.move(join(this.incomingDir(kind), name), kind, name, reason);
    this.sizes.forget(`${kind}/${name}`);
    if (moved.size !== undefined) this.admission.left(moved.size);
    await this.failed.added(moved);
  }

  /**
   * Keep bytes that were never spooled (a run log the server took straight from a batch, and
   * refused) in failed/ with a one-line reason, durably before this resolves: written to tmp/,
   * fdatasync'd, renamed into failed/, the directory fsync'd.
   */
  async failBuffer(kind: SpoolKind, name: string, data: Uint8Array, reason: string): Promise<void> {
    assertPlainName(name);
    const tmp = `${this.dirs.tmp}/${randomUUID()}.part`;
    try {
      const fh = await open(tmp, 'wx', 0o640);
      try {
        await fh.writeFile(data);
        await fh.datasync();
      } finally {
        await fh.close();
      }
      const moved = await this.failed.move(tmp, kind, name, reason);
      await this.dirSync.sync(this.dirs.failed[kind]);
      await this.failed.added(moved);
    } catch (err) {
      await rm(tmp, { force: true });
      throw asSpoolFull(err);
    }
  }

  /**
   * Remove failed files (and their .reason) older than `maxAgeMs`: failed/ is kept for an admin to
   * look at, not forever.
   */
  async sweepFailed(maxAgeMs: number, now = Date.now()): Promise<number> {
    return this.failed.sweep(maxAgeMs, now);
  }

  /** Remove partial uploads older than `maxAgeMs` (left by a crash mid-upload). */
  async sweepTmp(maxAgeMs: number, now = Date.now()): Promise<number> {
    return sweepOld(this.dirs.tmp, maxAgeMs, now);
  }

  /** Modification time of the oldest file waiting in incoming/<kind>, or null when it is empty. */
  async oldest(kind: SpoolKind): Promise<number | null> {
    return oldestIn(this.incomingDir(kind));
  }

  async depth(): Promise<Record<SpoolKind, number>> {
    const out = {} as Record<SpoolKind, number>;
    for (const kind of SPOOL_KINDS) out[kind] = (await readdir(this.incomingDir(kind))).length;
    return out;
  }

  /** Stop the writer threads and release the directory descriptors kept for fsync (the spool stays usable: they reopen). */
  async close(): Promise<void> {
    await this.writes.writer?.close();
    await this.dirSync.close();
  }
}
