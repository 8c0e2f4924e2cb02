/**
 * Keeping the spool finite: failed/ bounded in files and bytes and aged out, stale partial
 * uploads in tmp/ swept, and the timer that runs the retention in the programs that own a spool.
 *
 * failed/ holds evidence (a forged run log) beside junk anyone can send. Past a bound, files go
 * by fair share rather than by age alone: from the refusal code with the most files, within it
 * from the node with the most, oldest first. A flood of one-byte uploads evicts its own kind,
 * not the rare refusal beside it. A refused file never replaces one kept under its name.
 */
import { randomBytes } from 'node:crypto';
import { link, lstat, readdir, readFile, rm, stat, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseInventoryName, parseRunInfo } from '@capstan/shared/runlog/name';
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

/** The refusal code at the head of a reason line (`<date> ERR_…: message`), or '' when none. */
const codeOf = (reason: string) => /^\S+ (ERR_[A-Z0-9_]+)/.exec(reason)?.[1] ?? '';

/** The node a failed file's name claims (a run log or an inventory name), or '' when none. */
function nodeOf(kind: SpoolKind, name: string): string {
  const base = name.replace(/~[0-9a-f]{8}$/, '');
  try {
    return kind === 'reports' ? parseRunInfo(base).nodeId : parseInventoryName(base).nodeId;
  } catch {
    return '';
  }
}

interface FailedEntry { kind: SpoolKind; name: string; size: number; mtimeMs: number }

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
  /** Refusal code of each failed file (`kind/name`) seen, so that a trim need not read every reason. */
  private readonly codes = new Map<string, string>();

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
   * dropped. A name already taken there is not replaced: the file is kept as `<name>~<8 hex>`.
   * Returns the size moved (`replaced` is always undefined: nothing is replaced); the caller
   * settles its own accounts, then calls added().
   */
  async move(src: string, kind: SpoolKind, name: string, reason: string): Promise<{ size: number | undefined; replaced: number | undefined }> {
    const size = (await stat(src).catch(() => null))?.size;
    const line = `${new Date().toISOString()} ${reason.replace(/\s+/g, ' ')}\n`;
    for (let attempt = 0; ; attempt++) {
      const file = attempt === 0 ? name : `${name}~${randomBytes(4).toString('hex')}`;
      const dest = join(this.dirs[kind], file);
      // The reason first, created exclusively: its name being free says the file's is too.
      try {
        await writeFile(`${dest}.reason`, line, { flag: 'wx' });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EEXIST' && attempt < 16) continue;
        throw err;
      }
      try {
        // link + unlink: a rename that never replaces what is there.
        await link(src, dest);
      } catch (err) {
        await rm(`${dest}.reason`, { force: true });
        if ((err as NodeJS.ErrnoException).code === 'EEXIST' && attempt < 16) continue;
        throw err;
      }
      await unlink(src);
      this.codes.set(`${kind}/${file}`, codeOf(line));
      return { size, replaced: undefined };
    }
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
  private async list(): Promise<FailedEntry[]> {
    const out: FailedEntry[] = [];
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

  /** A failed file's refusal code, from the cache or its .reason. */
  private async code(f: FailedEntry): Promise<string> {
    const key = `${f.kind}/${f.name}`;
    let code = this.codes.get(key);
    if (code === undefined) {
      code = codeOf(await readFile(join(this.dirs[f.kind], `${f.name}.reason`), 'utf8').catch(() => ''));
      this.codes.set(key, code);
    }
    return code;
  }

  private async count(): Promise<void> {
    const all = await this.list();
    this.files = all.length;
    this.bytes = all.reduce((n, f) => n + f.size, 0);
    // Codes of files gone meanwhile (aged out, removed by hand) are forgotten.
    const present = new Set(all.map((f) => `${f.kind}/${f.name}`));
    for (const key of this.codes.keys()) if (!present.has(key)) this.codes.delete(key);
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

  /**
   * One pass: list, then remove beyond 90% of the bounds by fair share (the code with the most
   * files, within it the node with the most, its oldest first); returns how many went.
   */
  private async trimPass(): Promise<number> {
    const all = await this.list();
    let files = all.length;
    let bytes = all.reduce((n, f) => n + f.size, 0);
    const files90 = Math.floor(this.maxFiles * 0.9);
    const bytes90 = Math.floor(this.maxBytes * 0.9);
    const within = () => (this.maxFiles <= 0 || files <= files90) && (this.maxBytes <= 0 || bytes <= bytes90);
    // code → node → files, oldest last (popped first).
    const groups = new Map<string, { count: number; nodes: Map<string, FailedEntry[]> }>();
    for (const f of all) {
      const code = await this.code(f);
      const g = groups.get(code) ?? { count: 0, nodes: new Map<string, FailedEntry[]>() };
      groups.set(code, g);
      const node = nodeOf(f.kind, f.name);
      g.nodes.set(node, [...(g.nodes.get(node) ?? []), f]);
      g.count++;
    }
    for (const g of groups.values()) for (const list of g.nodes.values()) list.sort((a, b) => b.mtimeMs - a.mtimeMs);
    // Ties go to the group holding the oldest file.
    const oldest = (list: FailedEntry[]) => list[list.length - 1]?.mtimeMs ?? Infinity;
    const largest = <T>(entries: Iterable<[string, T]>, size: (v: T) => number, age: (v: T) => number): T | undefined => {
      let best: T | undefined;
      for (const [, v] of entries) {
        if (size(v) === 0) continue;
        if (best === undefined || size(v) > size(best) || (size(v) === size(best) && age(v) < age(best))) best = v;
      }
      return best;
    };
    const groupAge = (g: { nodes: Map<string, FailedEntry[]> }) => Math.min(...[...g.nodes.values()].map(oldest));
    let removed = 0;
    while (!within()) {
      const g = largest(groups.entries(), (v) => v.count, groupAge);
      if (!g) break;
      const list = largest(g.nodes.entries(), (v) => v.length, oldest)!;
      const f = list.pop()!;
      g.count--;
      const path = join(this.dirs[f.kind], f.name);
      await rm(path, { force: true });
      await rm(`${path}.reason`, { force: true });
      this.codes.delete(`${f.kind}/${f.name}`);
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
