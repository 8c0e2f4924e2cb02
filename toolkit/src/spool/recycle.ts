/**
 * Spool files kept for reuse. A file that was forwarded or ingested is not unlinked but renamed
 * into spool/free/, and the next upload overwrites it in place instead of creating a new file.
 *
 * Why: a create has to find a free inode. ext4 without a journal (as on the machines this was
 * measured on) skips every inode freed in the last 60 s, 300 s while its inode table block is
 * dirty (recently_deleted() reads the inode table for each candidate), under the lock of the
 * directory being created in. A relay that creates and deletes thousands of files a second makes
 * that scan long: profiled with perf, creates after a burst of deletions cost ~1 ms of kernel CPU
 * per file, against ~150 µs for overwrite + fdatasync + rename of a file that already exists (no
 * inode allocated or freed, no block freed either when the size stays within the same 4 KiB
 * blocks). With a journal the scan is skipped, but allocating and freeing still cost more than
 * overwriting.
 *
 * Nothing durable depends on free/: its files hold bytes that were already delivered, are never
 * read, and a crash mid-overwrite leaves only a free file with mixed contents. The name an upload
 * gets in incoming/ still appears by one rename after fdatasync, as before.
 *
 * FreePool is the bookkeeping; Recycler moves the files (an upload takes one through the pool,
 * write.ts).
 */
import { randomUUID } from 'node:crypto';
import { lstat, readdir, rename, rm, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';

/** A file in free/ and its size in bytes. */
export interface FreeFile {
  path: string;
  size: number;
}

const BLOCK = 4096;

const blocksOf = (size: number) => Math.ceil(size / BLOCK);

export class FreePool {
  /** By size in 4 KiB blocks: a body goes into a file of its own block count when there is one. */
  private readonly byBlocks = new Map<number, FreeFile[]>();
  private files = 0;
  private bytes = 0;
  /** Slots promised to removals that are renaming into free/ (so that they cannot overshoot). */
  private reservedFiles = 0;
  private reservedBytes = 0;

  constructor(
    readonly maxFiles: number,
    readonly maxBytes: number,
    /** Files larger than this are unlinked, not kept. */
    readonly maxFileBytes: number,
  ) {}

  get count(): number {
    return this.files;
  }

  get size(): number {
    return this.bytes;
  }

  /**
   * A free file for a body of `size` bytes, or null (then create one). Preference: the same block
   * count (nothing allocated or freed), else the largest smaller file (only grows), else the
   * smallest larger one (the caller truncates it).
   */
  take(size: number): FreeFile | null {
    if (this.files === 0) return null;
    const want = blocksOf(size);
    let key = this.byBlocks.has(want) ? want : -1;
    if (key < 0) {
      let below = -1;
      let above = Infinity;
      for (const k of this.byBlocks.keys()) {
        if (k < want && k > below) below = k;
        if (k > want && k < above) above = k;
      }
      key = below >= 0 ? below : above;
    }
    const list = this.byBlocks.get(key);
    if (!list) return null;
    const f = list.pop()!;
    if (list.length === 0) this.byBlocks.delete(key);
    this.files--;
    this.bytes -= f.size;
    return f;
  }

  /** Reserve room for a file of `size` bytes about to be renamed into free/; false: unlink it instead. */
  reserve(size: number): boolean {
    if (size <= 0 || size > this.maxFileBytes) return false;
    if (this.files + this.reservedFiles + 1 > this.maxFiles) return false;
    if (this.bytes + this.reservedBytes + size > this.maxBytes) return false;
    this.reservedFiles++;
    this.reservedBytes += size;
    return true;
  }

  /** Give back a reservation: the rename failed. */
  release(size: number): void {
    this.reservedFiles--;
    this.reservedBytes -= size;
  }

  /** Add a file now in free/ (after reserve(), or at start-up when adopting what is there). */
  put(f: FreeFile, reserved: boolean): void {
    if (reserved) this.release(f.size);
    const key = blocksOf(f.size);
    let list = this.byBlocks.get(key);
    if (!list) {
      list = [];
      this.byBlocks.set(key, list);
    }
    list.push(f);
    this.files++;
    this.bytes += f.size;
  }

  /** Everything in the pool, which is left empty (the caller unlinks them: disk space is short). */
  drain(): FreeFile[] {
    const out = [...this.byBlocks.values()].flat();
    this.byBlocks.clear();
    this.files = 0;
    this.bytes = 0;
    return out;
  }
}

/**
 * At start: what free/ holds from before is adopted up to the pool's limits, the rest (and all of
 * it when recycling is off, `pool` null) is unlinked. Contents do not matter: each is overwritten
 * whole.
 */
export async function adoptFree(dir: string, pool: FreePool | null): Promise<void> {
  for (const n of await readdir(dir)) {
    const p = join(dir, n);
    // lstat: only regular files are adopted (a link planted in free/ is removed, never written through).
    const s = await lstat(p).catch(() => null);
    if (!s) continue;
    if (s.isFile() && pool?.reserve(s.size)) pool.put({ path: p, size: s.size }, true);
    else await rm(p, { recursive: true, force: true });
  }
}

/** The files of free/: adopted at start (adoptFree), filled by removals, released when disk space runs short. */
export class Recycler {
  readonly pool: FreePool;
  /** Files taken from free/ by an upload since start (counted by the writer that took them). */
  reused = 0;

  constructor(readonly dir: string, maxFiles: number, maxBytes: number, maxFileBytes: number) {
    this.pool = new FreePool(maxFiles, maxBytes, maxFileBytes);
  }

  /**
   * A delivered file at `path` (in incoming/), of `size` bytes when known for sure: moved into
   * free/ when the pool has room. Returns its size (read from the file once moved, when it was
   * not known), or null when the pool has no room for it: the caller unlinks it.
   */
  async retire(path: string, size: number | undefined): Promise<number | null> {
    if (size === undefined) {
      // Size unknown: move the file out of the way first, then read the size of what was moved.
      const dest = `${this.dir}/${randomUUID()}`;
      await rename(path, dest);
      const moved = (await stat(dest)).size;
      if (this.pool.reserve(moved)) this.pool.put({ path: dest, size: moved }, true);
      else await unlink(dest);
      return moved;
    }
    if (!this.pool.reserve(size)) return null;
    const dest = `${this.dir}/${randomUUID()}`;
    try {
      await rename(path, dest);
    } catch (err) {
      this.pool.release(size);
      throw err;
    }
    this.pool.put({ path: dest, size }, true);
    return size;
  }

  /** Unlink every file in free/ (disk space is running short: they are only an optimisation). */
  async release(): Promise<number> {
    const files = this.pool.drain();
    await Promise.all(files.map((f) => unlink(f.path).catch(() => {})));
    return files.reduce((n, f) => n + f.size, 0);
  }
}
