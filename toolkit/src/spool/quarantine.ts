/**
 * Quarantine: a spooled file whose handling killed or stalled the program (out of memory, a
 * watchdog kill of a blocked event loop) would be taken again at every restart, and kill it again.
 * The attempt ledger remembers, across restarts, each handling that started and never ended: one
 * line `S <name>` is appended before a file is handled and `E <name>` after (whatever its fate),
 * written synchronously so that a kill right after leaves them in the file (the page cache keeps
 * them; a host crash, which is no file's fault, may lose the last ones). A name with `max` starts
 * that never ended is moved to `quarantine/<kind>/` with a `.reason` beside it instead of being
 * handled again.
 *
 * The ledger is compacted when it is opened: only names still open (with their count, `C <count>
 * <name>`) are kept.
 */
import { closeSync, mkdirSync, openSync, readFileSync, renameSync, writeFileSync, writeSync } from 'node:fs';
import { link, mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export class AttemptLedger {
  /** name → handlings that started and never ended (the current one not counted). */
  private readonly crashes = new Map<string, number>();
  private fd: number | null = null;

  /**
   * `path`: the ledger file (made if absent); `max`: starts without an end before a file is
   * quarantined (0: never). `quarantineDir`: where such files go (`<spool>/quarantine/<kind>`).
   */
  constructor(private readonly path: string, readonly max: number, readonly quarantineDir: string) {}

  /** Read what an earlier run left, compact the file and keep it open for appending. */
  open(): void {
    const open = new Map<string, boolean>();
    let text = '';
    try {
      text = readFileSync(this.path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    for (const line of text.split('\n')) {
      const m = /^([SEC]) (?:(\d+) )?(.+)$/.exec(line);
      if (!m) continue;
      const [, op, count, name] = m as unknown as [string, string, string | undefined, string];
      if (op === 'C') this.crashes.set(name, Number(count));
      else if (op === 'S') {
        if (open.get(name)) this.crashes.set(name, (this.crashes.get(name) ?? 0) + 1);
        open.set(name, true);
      } else {
        open.set(name, false);
        this.crashes.delete(name);
      }
    }
    // A start left open when the file ended: that run died while handling it.
    for (const [name, isOpen] of open) if (isOpen) this.crashes.set(name, (this.crashes.get(name) ?? 0) + 1);
    mkdirSync(join(this.path, '..'), { recursive: true });
    const tmp = `${this.path}.tmp`;
    writeFileSync(tmp, [...this.crashes].map(([name, n]) => `C ${n} ${name}\n`).join(''));
    renameSync(tmp, this.path);
    this.fd = openSync(this.path, 'a');
  }

  close(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }

  /** Handlings of `name` that started and never ended, in earlier runs. */
  crashesOf(name: string): number {
    return this.crashes.get(name) ?? 0;
  }

  /** Whether `name` killed the program often enough to be quarantined rather than handled. */
  exhausted(name: string): boolean {
    return this.max > 0 && this.crashesOf(name) >= this.max;
  }

  started(name: string): void {
    this.append(`S ${name}\n`);
  }

  ended(name: string): void {
    this.append(`E ${name}\n`);
    this.crashes.delete(name);
  }

  /**
   * A line the full disk (ENOSPC, EDQUOT) has no room for is skipped: the handling goes on and
   * answers with its own outcome (a coded ERR_SPOOL_FULL where it needs the disk), instead of an
   * uncoded error for its ledger's sake; a crash during it goes uncounted.
   */
  private append(line: string): void {
    if (this.fd === null) return;
    try {
      writeSync(this.fd, line);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOSPC' && code !== 'EDQUOT') throw err;
    }
  }

  /** Why a file is quarantined (without the code). */
  reasonFor(name: string): string {
    return `handling it stopped the program ${this.crashesOf(name)} times (killed or stalled) without finishing`;
  }

  /** Move `path` (or write `data`) to the quarantine directory with a one-line reason; the ledger forgets it. */
  async quarantine(path: string | null, name: string, data?: Uint8Array): Promise<string> {
    const reason = `ERR_INGEST_QUARANTINED: ${this.reasonFor(name)}`;
    await mkdir(this.quarantineDir, { recursive: true });
    const dest = join(this.quarantineDir, name);
    await writeFile(`${dest}.reason`, `${new Date().toISOString()} ${reason}\n`);
    await rm(dest, { force: true });
    if (path !== null) {
      await link(path, dest);
      await rm(path, { force: true });
    } else await writeFile(dest, data ?? new Uint8Array());
    this.ended(name);
    return reason;
  }
}
