/**
 * Keeping the spool finite: failed/ bounded in files and bytes (oldest removed first as new ones
 * arrive) and aged out, stale partial uploads in tmp/ swept, and the timer that runs the
 * retention in the programs that own a spool.
 */
import { lstat, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '@capstan/shared/log';
import { SPOOL_KINDS, type SpoolKind } from '@capstan/shared/protocol';

/** Remove the entries of `dir` older than `maxAgeMs`; returns how many of those `counts` were removed. */
export async function sweepOld(dir: string, maxAgeMs: number, now: number, counts: (name: string) => boolean = () => true): Promise<number> {
  let removed = 0;
  for (const n of await readdir(dir)) {
    const p = join(dir, n);
    const s = await stat(p).catch(() => null);
    if (s && now - s.mtimeMs > maxAgeMs) {
      await rm(p, { force: true });
      if (counts(n)) removed++;
    }
  }
  return removed;
}

const isFailedFile = (name: string) => !name.endsWith('.reason');

/**
 * failed/: permanently refused files kept with a one-line reason for an admin to look at. Anyone
 * who can upload can fill it with refused files; the bounds keep that finite.
 */
export class FailedFiles {
  /** Files and bytes in failed/ (reasons excluded), counted at init and kept up to date. */
  private files = 0;
  private bytes = 0;
  /** Failed files removed by the bounds since start. */
  private evicted = 0;
  private trimming: Promise<number> | null = null;

  constructor(
    private readonly dirs: Record<SpoolKind, string>,
    /** 0: no bound. */
    private readonly maxFiles: number,
    private readonly maxBytes: number,
  ) {}

  /** What failed/ holds (reasons excluded), its bounds (0: none) and how many files the bounds removed since start. */
  get usage(): { files: number; bytes: number; maxFiles: number; maxBytes: number; evicted: number } {
    return { files: this.files, bytes: this.bytes, maxFiles: this.maxFiles, maxBytes: this.maxBytes, evicted: this.evicted };
  }

  /** Count what failed/ holds at start, and bring it within its bounds. */
  async init(): Promise<void> {
    await this.count();
    if (this.over()) await this.trim();
  }

  /**
   * Move `src` to failed/<kind>/<name> with a one-line reason beside it; the bytes are kept, never
   * dropped. Returns the size moved and the size of the failed file it replaced (undefined: none);
   * the caller settles its own accounts, then calls added().
   */
  async move(src: string, kind: SpoolKind, name: string, reason: string): Promise<{ size: number | undefined; replaced: number | undefined }> {
    const dest = join(this.dirs[kind], name);
    const size = (await stat(src).catch(() => null))?.size;
    const replaced = (await lstat(dest).catch(() => null))?.size;
    await writeFile(`${dest}.reason`, `${new Date().toISOString()} ${reason.replace(/\s+/g, ' ')}\n`);
    await rename(src, dest);
    return { size, replaced };
  }

  /** Count a file move() put in failed/, and trim failed/ when that takes it over its bounds. */
  async added({ size, replaced }: { size: number | undefined; replaced: number | undefined }): Promise<void> {
    if (replaced === undefined) this.files++;
    this.bytes += (size ?? 0) - (replaced ?? 0);
    if (this.over()) await this.trim();
  }

  /**
   * Remove failed files (and their .reason) older than `maxAgeMs`: failed/ is kept for an admin to
   * look at, not forever (RUDDER never cleaned it, #19435).
   */
  async sweep(maxAgeMs: number, now: number): Promise<number> {
    let removed = 0;
    for (const kind of SPOOL_KINDS) removed += await sweepOld(this.dirs[kind], maxAgeMs, now, isFailedFile);
    await this.count();
    if (this.over()) await this.trim();
    return removed;
  }

  /** Every failed file (reasons excluded) with its kind, size and mtime. */
  private async list(): Promise<Array<{ kind: SpoolKind; name: string; size: number; mtimeMs: number }>> {
    const out: Array<{ kind: SpoolKind; name: string; size: number; mtimeMs: number }> = [];
    for (const kind of SPOOL_KINDS) {
      const dir = this.dirs[kind];
      for (const name of await readdir(dir)) {
        if (!isFailedFile(name)) continue;
        const s = await lstat(join(dir, name)).catch(() => null);
        if (s?.isFile()) out.push({ kind, name, size: s.size, mtimeMs: s.mtimeMs });
      }
    }
    return out;
  }

  private async count(): Promise<void> {
    const all = await this.list();
    this.files = all.length;
    this.bytes = all.reduce((n, f) => n + f.size, 0);
  }

  private over(): boolean {
    return (this.maxFiles > 0 && this.files > this.maxFiles) || (this.maxBytes > 0 && this.bytes > this.maxBytes);
  }

  /**
   * Remove the oldest failed files until failed/ is within 90% of its bounds. One pass at a time;
   * files failed meanwhile are counted by added() and trimmed by the next pass.
   */
  private async trim(): Promise<void> {
    while (this.over()) {
      this.trimming ??= this.trimPass().finally(() => {
        this.trimming = null;
      });
      if ((await this.trimming) === 0) break;
    }
  }

  /** One pass: list, remove the oldest beyond 90% of the bounds; returns how many went. */
  private async trimPass(): Promise<number> {
    const all = (await this.list()).sort((a, b) => a.mtimeMs - b.mtimeMs);
    let files = all.length;
    let bytes = all.reduce((n, f) => n + f.size, 0);
    const files90 = Math.floor(this.maxFiles * 0.9);
    const bytes90 = Math.floor(this.maxBytes * 0.9);
    let removed = 0;
    for (const f of all) {
      if ((this.maxFiles <= 0 || files <= files90) && (this.maxBytes <= 0 || bytes <= bytes90)) break;
      const path = join(this.dirs[f.kind], f.name);
      await rm(path, { force: true });
      await rm(`${path}.reason`, { force: true });
      files--;
      bytes -= f.size;
      removed++;
      this.evicted++;
      this.files--;
      this.bytes -= f.size;
    }
    // Nothing to remove although the counts say over: they drifted (files removed by hand); recount.
    if (removed === 0) await this.count();
    return removed;
  }
}

/** What the clean-up timer asks of a spool (Spool has both). */
export interface SweepableSpool {
  sweepFailed(maxAgeMs: number): Promise<number>;
  sweepTmp(maxAgeMs: number): Promise<number>;
}

export interface SpoolCleanupOptions {
  /** Age past which failed files (and their reasons) are removed, in ms. */
  failedRetention: number;
  /** Age past which partial uploads in tmp/ are removed, in ms. */
  tmpRetention: number;
  /** Time between two clean-ups, in ms. */
  interval: number;
  log: Logger;
}

/**
 * The retention of failed/ (by age; its size and count are bounded as files arrive) and of partial
 * uploads: one clean-up now, awaited, then one every `interval` on a timer that does not hold the
 * process open. A failed clean-up is logged and tried again at the next tick. Returns the timer
 * (clearInterval() it at shutdown).
 */
export async function startSpoolCleanup(spool: SweepableSpool, o: SpoolCleanupOptions): Promise<NodeJS.Timeout> {
  const sweep = async () => {
    try {
      const failed = await spool.sweepFailed(o.failedRetention);
      const tmp = await spool.sweepTmp(o.tmpRetention);
      if (failed + tmp > 0) o.log.info({ failed, tmp }, 'spool clean-up');
    } catch (err) {
      o.log.warn({ err }, 'spool clean-up failed');
    }
  };
  await sweep();
  const timer = setInterval(() => void sweep(), o.interval);
  timer.unref();
  return timer;
}
