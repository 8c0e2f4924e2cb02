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

  constructor(opts: SpoolOptions) {
    this.root = opts.root;
    this.maxFileBytes = opts.maxFileBytes;
    this.minFreeBytes = opts.minFreeBytes ?? 0;
  }

  async init(): Promise<void> {
    await mkdir(join(this.root, 'tmp'), { recursive: true });
    for (const kind of SPOOL_KINDS) {
      await mkdir(this.incomingDir(kind), { recursive: true });
      await mkdir(this.failedDir(kind), { recursive: true });
    }
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
    const tmp = join(this.root, 'tmp', `${randomUUID()}.part`);
    const hash = createHash('sha256');
    let bytes = 0;
    const fh = await open(tmp, 'wx', 0o640);
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
    await rename(tmp, dest);
    await fsyncDir(this.incomingDir(kind));
    return { path: dest, bytes, sha256: hash.digest('hex') };
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
    await unlink(join(this.incomingDir(kind), name)).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
  }

  /** Move a file to failed/ with a one-line reason beside it; the bytes are kept, never dropped. */
  async fail(kind: SpoolKind, name: string, reason: string): Promise<void> {
    const dest = join(this.failedDir(kind), name);
    await writeFile(`${dest}.reason`, `${new Date().toISOString()} ${reason.replace(/\s+/g, ' ')}\n`);
    await rename(join(this.incomingDir(kind), name), dest);
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
