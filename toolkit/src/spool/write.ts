/**
 * How a body reaches incoming/, durably (fdatasync'd, renamed into place, directory fsync'd)
 * before the caller hears of it. Two ways, both measured under the relay bench (docs/capacity.md):
 *
 * - whole(): a body up to IN_MEMORY_MAX, read into shared memory and written by a writer thread
 *   (writer.ts) in one message;
 * - stream(): node:fs on plain descriptors, chunks gathered and written together, a small body
 *   with blocking calls; large bodies always, and every body when writer threads are off.
 *
 * Both overwrite a delivered file from free/ when the pool has one (recycle.ts) instead of
 * creating a file, and both can hand the body back in memory (AcceptOptions.keepBytes).
 */
import { createHash, randomUUID } from 'node:crypto';
import {
  closeSync, lstatSync, openSync, writevSync, constants as fsc, fdatasync as fsFdatasync, ftruncate as fsFtruncate, open as fsOpen, writev as fsWritev,
} from 'node:fs';
import { rm, unlink } from 'node:fs/promises';
import { promisify } from 'node:util';
import { capstanError } from '@capstan/shared/errors';
import type { SpoolKind } from '@capstan/shared/protocol';
import { asSpoolFull, type Admission } from './admission.js';
import type { DirSync } from './dir-sync.js';
import { candidateName } from './ocs-pair.js';
import { asConflict, placeFile } from './place.js';
import type { SpoolDirs } from './layout.js';
import type { Recycler } from './recycle.js';
import type { SpoolWriter } from './writer.js';

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

export type Body = AsyncIterable<Buffer | Uint8Array> | Iterable<Buffer | Uint8Array>;

/** Bodies up to this size are read into memory and handed to a writer thread whole. */
export const IN_MEMORY_MAX = 1024 * 1024;

/**
 * Bodies up to this size are written with writevSync. Only the calls that do not wait for the
 * disk block the event loop (open of a reused file, a small write into the page cache, close);
 * fdatasync, rename and the directory fsync stay on the thread pool. Measured under the relay
 * bench: with four pool threads mostly blocked in fdatasync, an open or a close queued behind
 * them for longer than the blocking call takes.
 */
const SYNC_WRITE_MAX = 256 * 1024;

/**
 * Chunks are gathered and written together (one writev for a small file), at most this much at
 * once: with the socket paused meanwhile, that bounds an upload's memory whatever its size.
 */
const FLUSH = 256 * 1024;

const openFd = promisify(fsOpen);
const writevFd = promisify(fsWritev);
const fdatasyncFd = promisify(fsFdatasync);
const ftruncateFd = promisify(fsFtruncate);

/** What is left of `bufs` once its first `n` bytes are written (writev may write less than asked). */
function skipBytes(bufs: Buffer[], n: number): Buffer[] {
  let i = 0;
  while (i < bufs.length && n >= bufs[i]!.length) n -= bufs[i++]!.length;
  if (i === bufs.length) return [];
  return [bufs[i]!.subarray(n), ...bufs.slice(i + 1)];
}

/** Nothing is spooled under this path yet (a stat without an exception for the usual ENOENT). */
function nameFree(path: string): boolean {
  return lstatSync(path, { throwIfNoEntry: false }) === undefined;
}

export class Writes {
  constructor(
    private readonly dirs: SpoolDirs,
    private readonly admission: Admission,
    private readonly dirSync: DirSync,
    /** null: recycling is off. */
    private readonly recycler: Recycler | null,
    /** null: no writer threads, whole() is never used. */
    readonly writer: SpoolWriter | null,
  ) {}

  /**
   * Through node:fs. `state.renamed` is set once the file is in incoming/ (the quota then counts
   * it). More or fewer bytes than `declaredLength` is an error and leaves nothing behind.
   */
  async stream(
    kind: SpoolKind, name: string, body: Body, declaredLength: number, state: { renamed: boolean }, opts: AcceptOptions,
  ): Promise<Accepted> {
    const keepBytes = opts.keepBytes ?? 0;
    const hash = createHash('sha256');
    let bytes = 0;
    // Plain descriptors rather than FileHandle objects: at thousands of uploads a second the
    // FileHandle's bookkeeping was the largest cost on the main thread (measured by the relay bench).
    const { fd, path: tmp, reusedSize } = await this.openTarget(declaredLength);
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
        if (bytes > declaredLength || bytes > this.admission.maxFileBytes) {
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
      throw asSpoolFull(err);
    } finally {
      closeSync(fd); // no disk wait on a local file system (see SYNC_WRITE_MAX)
      if (!ok) await rm(tmp, { force: true });
    }
    // One chunk that owns its whole memory is kept as it is (a copy would double the churn); a
    // slice of a larger read buffer is copied, or keeping it would pin the whole buffer.
    const only = kept?.length === 1 ? kept[0]! : null;
    const data = only && only.byteOffset === 0 && only.buffer.byteLength === only.length ? only : kept ? Buffer.concat(kept, bytes) : undefined;
    const dir = this.dirs.incoming[kind];
    const dest = `${dir}/${name}`;
    const sha256 = hash.digest('hex');
    // Handed over only while the name is free (no other upload of it runs: Spool.accept), so that
    // bytes kept in memory under a name are always the bytes spooled under it.
    if (data && nameFree(dest)) opts.onWritten?.(data);
    let placed;
    try {
      placed = await placeFile(tmp, dest, sha256, await candidateName(kind, dir, name, sha256));
    } catch (err) {
      await rm(tmp, { force: true });
      throw asConflict(err);
    }
    state.renamed = true;
    // A re-send of bytes already there: the quota must not count them twice.
    if (placed.placed === 'same') this.admission.left(bytes);
    else await this.dirSync.sync(dir);
    this.admission.written(bytes);
    return { path: placed.path, bytes, sha256, ...(data ? { data } : {}) };
  }

  /**
   * The body read whole into one buffer of its declared length, then written by a writer thread
   * (create, write, fdatasync, rename, directory fsync there). Same promises as stream().
   */
  async whole(
    kind: SpoolKind, name: string, body: Body, declaredLength: number, state: { renamed: boolean }, opts: AcceptOptions,
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
    const dir = this.dirs.incoming[kind];
    const dest = `${dir}/${name}`;
    // See stream(): bytes kept in memory under a name are always the ones spooled under it.
    if (keep && nameFree(dest)) opts.onWritten?.(data);
    let written: { sha256: string; replaced: number; path: string };
    const alt = kind === 'inventories' ? await candidateName(kind, dir, name, createHash('sha256').update(data).digest('hex')) : undefined;
    const reuse = this.recycler?.pool.take(declaredLength) ?? null;
    if (reuse) this.recycler!.reused++;
    try {
      written = reuse
        ? await this.writer!.write(reuse.path, dest, data, reuse.size, alt)
        : await this.writer!.write(`${this.dirs.tmp}/${randomUUID()}.part`, dest, data, undefined, alt);
    } catch (err) {
      throw asConflict(asSpoolFull(err));
    }
    state.renamed = true;
    this.admission.left(written.replaced);
    this.admission.written(bytes);
    return { path: written.path, bytes, sha256: written.sha256, ...(keep ? { data } : {}) };
  }

  /**
   * The descriptor stream() writes to: a file from free/ opened for overwriting when the pool has
   * one (its old size, to cut it to the new one), else a new temp file.
   */
  private async openTarget(size: number): Promise<{ fd: number; path: string; reusedSize: number }> {
    const reuse = this.recycler?.pool.take(size) ?? null;
    try {
      if (reuse) {
        try {
          // Blocking: the inode was in use moments ago (cached), so this is a few µs (see SYNC_WRITE_MAX).
          const fd = openSync(reuse.path, fsc.O_WRONLY | fsc.O_NOFOLLOW);
          this.recycler!.reused++;
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
      throw asSpoolFull(err);
    }
  }
}
