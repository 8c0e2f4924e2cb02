/**
 * The durable spool shared by relayd and server: what a PUT receives is on disk (fsync'd, renamed
 * into place, directory fsync'd) before the client hears 2xx, so an acknowledged file survives a
 * crash or `kill -9`. Layout under the root:
 *
 *   tmp/                         partial uploads (never processed; stale ones are swept)
 *   incoming/<kind>/<name>       complete files waiting to be forwarded or ingested
 *   failed/<kind>/<name>         permanently refused files, with <name>.reason beside them
 */
import { createHash, randomUUID } from 'node:crypto';
import { constants as fsc } from 'node:fs';
import { mkdir, open, readdir, rename, rm, stat, statfs, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { capstanError } from '../errors.js';
import { SPOOL_KINDS, type SpoolKind } from '../protocol.js';

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
}

export interface Accepted {
  path: string;
  bytes: number;
  sha256: string;
}

/** A spool entry name must be one plain path component: callers validate the format itself. */
export function assertPlainName(name: string): void {
  if (
    name.length === 0 || name.length > 255 || name.startsWith('.') || /[/\\\0]/.test(name) || name.endsWith('.reason')
  ) {
    throw capstanError('ERR_BAD_PATH', 'file name must be a single plain path component');
  }
}

async function fsyncDir(dir: string): Promise<void> {
  const fh = await open(dir, fsc.O_RDONLY);
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

export class Spool {
  readonly root: string;
  private readonly maxFileBytes: number;
  private readonly minFreeBytes: number;
  private readonly maxIncomingBytes: number;
  /** Bytes in incoming/ plus bytes being written, tracked only when a quota is set. */
  private incomingBytes = 0;
  /** Directory fsyncs in progress / queued per directory, shared by concurrent accepts. */
  private readonly dirSyncs = new Map<string, { running: Promise<void> | null; next: Promise<void> | null }>();

  constructor(opts: SpoolOptions) {
    this.root = opts.root;
    this.maxFileBytes = opts.maxFileBytes;
    this.minFreeBytes = opts.minFreeBytes ?? 0;
    this.maxIncomingBytes = opts.maxIncomingBytes ?? 0;
  }

  async init(): Promise<void> {
    await mkdir(join(this.root, 'tmp'), { recursive: true });
    for (const kind of SPOOL_KINDS) {
      await mkdir(this.incomingDir(kind), { recursive: true });
      await mkdir(this.failedDir(kind), { recursive: true });
    }
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
    return join(this.root, 'incoming', kind);
  }

  failedDir(kind: SpoolKind): string {
    return join(this.root, 'failed', kind);
  }

  /**
   * Write a body into the spool. `declaredLength` is the request's Content-Length: more or fewer
   * bytes than declared is an error and leaves nothing behind.
   */
  async accept(kind: SpoolKind, name: string, body: AsyncIterable<Buffer | Uint8Array> | Iterable<Buffer | Uint8Array>, declaredLength: number): Promise<Accepted> {
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
    try {
      return await this.write(kind, name, body, declaredLength, state);
    } finally {
      if (!state.renamed && this.maxIncomingBytes > 0) this.incomingBytes -= declaredLength;
    }
  }

  private async write(
    kind: SpoolKind, name: string, body: AsyncIterable<Buffer | Uint8Array> | Iterable<Buffer | Uint8Array>, declaredLength: number,
    state: { renamed: boolean },
  ): Promise<Accepted> {
    const tmp = join(this.root, 'tmp', `${randomUUID()}.part`);
    const hash = createHash('sha256');
    let bytes = 0;
    let fh;
    try {
      fh = await open(tmp, 'wx', 0o640);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOSPC') throw capstanError('ERR_SPOOL_FULL', 'no space left in the spool', { cause: err });
      throw err;
    }
    let ok = false;
    try {
      for await (const chunk of body) {
        bytes += chunk.length;
        if (bytes > declaredLength || bytes > this.maxFileBytes) {
          throw capstanError('ERR_BODY_TOO_LARGE', 'body is longer than its Content-Length or the limit');
        }
        hash.update(chunk);
        await fh.write(chunk);
      }
      if (bytes !== declaredLength) {
        throw capstanError('ERR_BAD_REQUEST', `body has ${bytes} bytes, Content-Length said ${declaredLength}`);
      }
      await fh.sync();
      ok = true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOSPC') {
        throw capstanError('ERR_SPOOL_FULL', 'no space left in the spool', { cause: err });
      }
      throw err;
    } finally {
      await fh.close();
      if (!ok) await rm(tmp, { force: true });
    }
    const dest = join(this.incomingDir(kind), name);
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
    return { path: dest, bytes, sha256: hash.digest('hex') };
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
      const p = fsyncDir(dir).finally(() => {
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

  /** Put bytes already in memory into the spool (used by the server for files it relays to itself). */
  async acceptBuffer(kind: SpoolKind, name: string, data: Buffer): Promise<Accepted> {
    return this.accept(kind, name, [data], data.length);
  }

  private async checkFreeSpace(need: number): Promise<void> {
    if (this.minFreeBytes <= 0) return;
    const s = await statfs(this.root);
    const free = Number(s.bavail) * Number(s.bsize);
    if (free - need < this.minFreeBytes) {
      throw capstanError('ERR_SPOOL_FULL', `spool file system has ${free} bytes free, keeping ${this.minFreeBytes} in reserve`);
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

  async remove(kind: SpoolKind, name: string): Promise<void> {
    const path = join(this.incomingDir(kind), name);
    const size = this.maxIncomingBytes > 0 ? (await stat(path).catch(() => null))?.size : undefined;
    try {
      await unlink(path);
      if (size !== undefined) this.incomingBytes -= size;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }

  /** Move a file to failed/ with a one-line reason beside it; the bytes are kept, never dropped. */
  async fail(kind: SpoolKind, name: string, reason: string): Promise<void> {
    const dest = join(this.failedDir(kind), name);
    const src = join(this.incomingDir(kind), name);
    const size = this.maxIncomingBytes > 0 ? (await stat(src).catch(() => null))?.size : undefined;
    await writeFile(`${dest}.reason`, `${new Date().toISOString()} ${reason.replace(/\s+/g, ' ')}\n`);
    await rename(src, dest);
    if (size !== undefined) this.incomingBytes -= size;
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
