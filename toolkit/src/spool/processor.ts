/**
 * Drains one spool directory: inotify (fs.watch on the directory) tells us about new files at
 * once, a periodic
 * catch-up listing finds anything the watcher missed and re-offers files whose retry is due, and a
 * start-up pass takes what was spooled before a restart. RUDDER ships its catch-up disabled, which
 * silently loses retries; here it is always on.
 *
 * Fate of a file (RUDDER processing.rs): handler resolves → deleted; permanent error → failed/
 * with the reason; transient error → left in place and retried with exponential backoff and jitter,
 * per file, so one stuck file never blocks the others.
 */
import { EventEmitter, setMaxListeners } from 'node:events';
import { watch as watchDir, type FSWatcher as DirWatcher } from 'node:fs';
import { stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import chokidar, { type FSWatcher } from 'chokidar';
import { isCapstanError, isTransient } from '@capstan/shared/errors';
import type { Logger } from '@capstan/shared/log';
import type { SpoolKind } from '@capstan/shared/protocol';
import { Fifo } from './fifo.js';
import type { Spool } from './spool.js';
import { isWaiting, watchCandidates } from './ocs-pair.js';
import type { AttemptLedger } from './quarantine.js';

export type Outcome = 'done' | 'failed' | 'retry';

export interface ProcessedEvent {
  kind: SpoolKind;
  name: string;
  outcome: Outcome;
  error?: unknown;
  ms: number;
}

export interface ProcessorOptions {
  kind: SpoolKind;
  spool: Spool;
  /**
   * Resolve when the file is fully handled (forwarded, ingested); throw to fail or retry it.
   * `signal` aborts when stop() gives up waiting: the file then stays in incoming/ for next time.
   */
  handle: (path: string, name: string, signal: AbortSignal) => Promise<void>;
  log: Logger;
  concurrency?: number;
  catchupIntervalMs?: number;
  retryMinMs?: number;
  retryMaxMs?: number;
  /** Poll (chokidar) instead of inotify, for file systems without inotify. */
  usePolling?: boolean;
  /**
   * Names this processor takes; any other file in the directory is left alone, neither handled
   * nor moved to failed/ (RUDDER's relayd ignores a `bob.log` dropped into its incoming/ the same
   * way). Absent: every name.
   */
  accepts?: (name: string) => boolean;
  /** Files that killed the program while handled are quarantined after a few (quarantine.ts). */
  ledger?: AttemptLedger;
}

interface RetryState {
  attempts: number;
  dueAt: number;
}

export class SpoolProcessor extends EventEmitter {
  private readonly o: Required<Omit<ProcessorOptions, 'usePolling' | 'accepts' | 'ledger'>> & { usePolling: boolean; accepts?: (name: string) => boolean; ledger?: AttemptLedger };
  /** Names refused by `accepts` and already logged (bounded: the catch-up listing sees them again). */
  private readonly ignored = new Set<string>();
  private readonly dir: string;
  private watcher: FSWatcher | null = null;
  private dirWatcher: DirWatcher | null = null;
  private timer: NodeJS.Timeout | null = null;
  private readonly queue = new Fifo<string>();
  private readonly queued = new Set<string>();
  private readonly inFlight = new Set<string>();
  private readonly retries = new Map<string, RetryState>();
  /**
   * Names whose inotify events are not worth a stat: ones the API announced (notify() takes them)
   * and ones just handled (the event is their removal). name → until when, oldest first, bounded.
   * Profiled under the relay bench, those stats (mostly ENOENT, each an exception) were ~5% of
   * the relay's CPU. The catch-up listing still sees every file, so skipping an event loses none.
   */
  private readonly quiet = new Map<string, number>();
  private running = 0;
  private stopped = false;
  private paused = false;
  private readonly abort = new AbortController();
  /** Told of every file offered, so that pairing OCS halves here never lists the directory. */
  private candidates: ReturnType<typeof watchCandidates> | null = null;

  constructor(opts: ProcessorOptions) {
    super();
    this.o = {
      concurrency: 4,
      catchupIntervalMs: 10_000,
      retryMinMs: 1_000,
      retryMaxMs: 300_000,
      usePolling: false,
      ...opts,
    };
    this.dir = opts.spool.incomingDir(opts.kind);
    // Every handler in flight listens on the one shutdown signal: that is not a leak.
    setMaxListeners(0, this.abort.signal);
  }

  async start(): Promise<void> {
    this.candidates = watchCandidates(this.dir);
    if (this.o.usePolling) await this.startPolling();
    else this.startInotify();
    await this.catchUp();
    this.timer = setInterval(() => void this.catchUp(), this.o.catchupIntervalMs);
    this.timer.unref();
  }

  /**
   * One inotify watch on the directory; each event names the file, so a new file costs one stat.
   * (chokidar, used here before, re-lists the whole directory and lstat()s every entry on each
   * change, and puts a watch on every file: with a backlog of n files each arrival cost O(n), which
   * the ingest benchmark measured as over half of relayd's CPU with 1,000 files waiting.)
   */
  private startInotify(): void {
    this.dirWatcher = watchDir(this.dir, (_event, name) => {
      if (typeof name === 'string') void this.seen(name);
    });
    this.dirWatcher.on('error', (err: unknown) => this.o.log.warn({ err }, 'spool watcher error'));
  }

  /** An inotify event names a file that was created, renamed in or removed: offer it if it is there. */
  private async seen(name: string): Promise<void> {
    if (this.stopped || name.startsWith('.') || this.queued.has(name) || this.inFlight.has(name)) return;
    const q = this.quiet.get(name);
    if (q !== undefined && q > Date.now()) return;
    const st = await stat(join(this.dir, name)).catch(() => null);
    if (st?.isFile()) this.offer(name);
  }

  /** chokidar's polling, for file systems without inotify (network mounts). */
  private async startPolling(): Promise<void> {
    this.watcher = chokidar.watch(this.dir, {
      depth: 0,
      ignoreInitial: true,
      usePolling: this.o.usePolling,
      // Judge only the name inside the spool directory: the directory's own path may contain
      // dot components (a regression: `.tap/fixtures/…` made every file look hidden).
      ignored: (p: string) => p !== this.dir && basename(p).startsWith('.'),
    });
    this.watcher.on('add', (p: string) => this.offer(p.slice(this.dir.length + 1)));
    this.watcher.on('error', (err: unknown) => this.o.log.warn({ err }, 'spool watcher error'));
    await new Promise<void>((resolve) => this.watcher!.once('ready', () => resolve()));
  }

  /**
   * Stop watching and let handlers in flight finish, so a file is never half-processed. After
   * `graceMs` their signal is aborted (a hung upstream must not hold a shutdown forever); an
   * aborted file stays in incoming/ and is taken again by the next start.
   */
  async stop(graceMs = Infinity): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.watcher?.close();
    this.dirWatcher?.close();
    this.candidates?.release();
    const until = Date.now() + graceMs;
    while (this.running > 0) {
      if (Date.now() >= until && !this.abort.signal.aborted) this.abort.abort();
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  /** Files known to this processor and not yet done (waiting, in flight or backing off). */
  get pending(): number {
    return this.queued.size + this.inFlight.size + this.retries.size;
  }

  /** Files being handled right now. */
  get active(): number {
    return this.inFlight.size;
  }

  /** Offer a file the caller just put into incoming/ (skips waiting for the watcher). */
  notify(name: string): void {
    this.hush(name);
    this.offer(name);
  }

  /**
   * The caller is about to put `name` into incoming/ and will notify() it: the watcher's event for
   * it is redundant. Until then the file is not offered by the watcher (the catch-up still would).
   */
  expect(name: string): void {
    this.hush(name);
  }

  /** Ignore the watcher's events for `name` for a few seconds (see `quiet`). */
  private hush(name: string): void {
    const QUIET_MS = 5_000;
    const MAX = 16_384;
    this.quiet.delete(name);
    this.quiet.set(name, Date.now() + QUIET_MS);
    if (this.quiet.size > MAX) {
      for (const k of this.quiet.keys()) {
        this.quiet.delete(k);
        if (this.quiet.size <= MAX) break;
      }
    }
  }

  /**
   * Start no new handler until resume(): for when the handler's target is known to be down, so
   * that every waiting file does not spend a retry on it. Files keep being queued meanwhile.
   */
  pause(): void {
    this.paused = true;
  }

  /** Undo pause() and make every backing-off file due now (its target just came back). */
  resume(): void {
    this.paused = false;
    this.retryAll();
  }

  get isPaused(): boolean {
    return this.paused;
  }

  /** Make one file due now, whether it waits on a retry timer or not (a partner arrived: ocs-pair.ts). */
  prompt(name: string): void {
    const r = this.retries.get(name);
    if (r) r.dueAt = 0;
    this.offer(name);
  }

  /** Make every file waiting on a retry timer due now. */
  retryAll(): void {
    const names = [...this.retries.keys()];
    for (const name of names) {
      const r = this.retries.get(name);
      if (r) r.dueAt = 0;
      this.offer(name);
    }
    this.pump();
  }

  /**
   * List the directory and offer every file that is not waiting on a retry timer. Files already
   * queued, in flight or waiting are not stat'd again: only new names are ordered by age.
   */
  async catchUp(): Promise<void> {
    if (this.stopped) return;
    const now = Date.now();
    const waiting = (name: string) => {
      const r = this.retries.get(name);
      return r !== undefined && r.dueAt > now;
    };
    let scan: { all: string[]; fresh: string[] };
    try {
      scan = await this.o.spool.scan(this.o.kind, (name) => this.queued.has(name) || this.inFlight.has(name) || waiting(name));
    } catch (err) {
      this.o.log.warn({ err }, 'spool listing failed');
      return;
    }
    const present = new Set(scan.all);
    for (const [name] of this.retries) if (!present.has(name) && !this.inFlight.has(name)) this.retries.delete(name);
    for (const name of scan.fresh) {
      if (waiting(name)) continue;
      this.offer(name);
    }
  }

  private offer(name: string): void {
    if (this.stopped || name.length === 0 || name.includes('/') || name.startsWith('.')) return;
    this.candidates?.note(name);
    if (this.queued.has(name) || this.inFlight.has(name)) return;
    if (this.o.accepts && !this.o.accepts(name)) {
      if (!this.ignored.has(name) && this.ignored.size < 1024) {
        this.ignored.add(name);
        this.o.log.warn({ file: name, kind: this.o.kind }, 'not a file name this spool takes, left alone');
      }
      return;
    }
    const r = this.retries.get(name);
    if (r && r.dueAt > Date.now()) return;
    this.queued.add(name);
    this.queue.push(name);
    this.pump();
  }

  private pump(): void {
    while (!this.stopped && !this.paused && this.running < this.o.concurrency && this.queue.length > 0) {
      const name = this.queue.shift()!;
      this.queued.delete(name);
      this.inFlight.add(name);
      this.running++;
      void this.run(name).finally(() => {
        this.inFlight.delete(name);
        this.running--;
        this.pump();
      });
    }
  }

  private async run(name: string): Promise<void> {
    const started = Date.now();
    const path = `${this.dir}/${name}`;
    // Made only when there is something to say: a child logger per file costs at thousands a second.
    const log = () => this.o.log.child({ file: name, kind: this.o.kind });
    const ledger = this.o.ledger;
    if (ledger?.exhausted(name)) {
      try {
        const reason = await ledger.quarantine(path, name);
        this.retries.delete(name);
        log().error({ code: 'ERR_INGEST_QUARANTINED', reason, dir: ledger.quarantineDir }, 'file quarantined');
        this.emit('processed', { kind: this.o.kind, name, outcome: 'failed', error: new Error(reason), ms: 0 } satisfies ProcessedEvent);
      } catch (err) {
        log().error({ err }, 'cannot quarantine file');
      }
      return;
    }
    ledger?.started(name);
    try {
      await this.run1(path, name, started, log);
    } finally {
      ledger?.ended(name);
    }
  }

  private async run1(path: string, name: string, started: number, log: () => Logger): Promise<void> {
    try {
      await this.o.handle(path, name, this.abort.signal);
      await this.o.spool.remove(this.o.kind, name);
      this.hush(name); // the watcher's event now is the removal
      this.retries.delete(name);
      this.emit('processed', { kind: this.o.kind, name, outcome: 'done', ms: Date.now() - started } satisfies ProcessedEvent);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT' && !isCapstanError(err)) {
        // Gone meanwhile (processed by another path or removed by an admin): nothing to do.
        this.retries.delete(name);
        return;
      }
      if (isTransient(err)) {
        const prev = this.retries.get(name)?.attempts ?? 0;
        const base = Math.min(this.o.retryMaxMs, this.o.retryMinMs * 2 ** Math.min(prev, 30));
        const delay = Math.round(base / 2 + Math.random() * (base / 2));
        this.retries.set(name, { attempts: prev + 1, dueAt: Date.now() + delay });
        // Timers may fire a millisecond before Date.now() reaches dueAt: mark the retry due
        // explicitly, or offer() would skip it until the next catch-up listing.
        setTimeout(() => {
          const state = this.retries.get(name);
          if (state) state.dueAt = 0;
          this.offer(name);
        }, delay).unref();
        // A half of an OCS pair waiting for the other is expected, not a failure worth a warning.
        if (isWaiting(err)) log().debug({ reason: (err as Error).message, retryInMs: delay }, 'waiting for the other half');
        else log().warn({ err, attempts: prev + 1, retryInMs: delay }, 'processing failed, will retry');
        this.emit('processed', { kind: this.o.kind, name, outcome: 'retry', error: err, ms: Date.now() - started } satisfies ProcessedEvent);
        return;
      }
      const code = isCapstanError(err) ? err.code : 'ERR_INTERNAL';
      const message = err instanceof Error ? err.message : String(err);
      try {
        await this.o.spool.fail(this.o.kind, name, `${code}: ${message}`);
      } catch (moveErr) {
        log().error({ err: moveErr }, 'cannot move file to failed/');
      }
      this.retries.delete(name);
      log().warn({ code, reason: message }, 'file refused, moved to failed/');
      this.emit('processed', { kind: this.o.kind, name, outcome: 'failed', error: err, ms: Date.now() - started } satisfies ProcessedEvent);
    }
  }
}
