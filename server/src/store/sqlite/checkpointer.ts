/**
 * Checkpoints of the registry's WAL on a thread of their own. By default SQLite checkpoints in the
 * commit that takes the WAL past 1,000 pages: that commit reads every page of the WAL back and
 * writes it into the database file, and syncs both, on the event loop. Under heavy writes (a
 * generation of 100,000 nodes, a backlog of run logs) that is a good part of what commits cost:
 * a templated generation of 50,000 nodes spent 1.07–1.24 s of its event loop in COMMIT, 0.73–0.94 s
 * with the copies made here (docs/capacity.md).
 *
 * A small registry never needs it, so the thread starts only once the WAL file has grown past
 * `startBytes` (SQLite's own checkpoints keep it near 4 MiB until writes outrun them). From then
 * on the writer nudges the thread after its commits (at most every NUDGE_MS), and checkpoints
 * itself only when the WAL exceeds `limitBytes` (wal_autocheckpoint, a bound should the thread
 * fall behind); journal_size_limit trims the file back to that size when the WAL starts over. If
 * the thread fails, the writer goes back to checkpointing as SQLite does by default.
 */
import { statSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import type Database from 'better-sqlite3';
import type { CheckpointReply, CheckpointRequest, CheckpointWorkerData } from './checkpoint-worker.js';

const WORKER_URL = new URL('./checkpoint-worker.js', import.meta.url);

export interface CheckpointOptions {
  /** WAL file size from which checkpoints move to their thread (bytes); 0: never, SQLite checkpoints in commits. */
  startBytes: number;
  /** WAL size beyond which the writer checkpoints itself all the same (bytes). */
  limitBytes: number;
}

export const DEFAULT_CHECKPOINT: CheckpointOptions = { startBytes: 8 * 1024 * 1024, limitBytes: 64 * 1024 * 1024 };

/** Nudges at most this often (ms): a checkpoint with nothing new to copy is cheap, but not free. */
const NUDGE_MS = 100;
/** How often the WAL's size is looked at before the thread has started (ms). */
const LOOK_MS = 1000;
/** How long close() waits for the thread to close its connection (ms): it may be amid a checkpoint. */
const CLOSE_WAIT_MS = 30_000;

export class Checkpointer {
  private worker: Worker | null = null;
  private closed: Int32Array | null = null;
  private lastLook = 0;
  private lastNudge = 0;
  private inFlight = false;
  private timer: NodeJS.Timeout | null = null;
  private again = false;
  /** Set when the thread failed: SQLite's own checkpoints from then on. */
  private failed = false;
  /** Checkpoints the thread made, and frames they copied (for tests and the curious). */
  readonly stats = { checkpoints: 0, frames: 0, errors: 0 };

  constructor(
    private readonly handle: Database.Database,
    private readonly path: string,
    private readonly busyTimeoutMs: number,
    private readonly opts: CheckpointOptions,
  ) {}

  get running(): boolean {
    return this.worker !== null;
  }

  /** After a write transaction committed. */
  committed(): void {
    if (this.failed || this.opts.startBytes <= 0) return;
    const now = Date.now();
    if (this.worker) {
      if (now - this.lastNudge >= NUDGE_MS) this.nudge(now);
      else if (!this.timer) {
        // The last commits of a burst are copied too, a moment later.
        this.timer = setTimeout(() => {
          this.timer = null;
          if (this.worker) this.nudge(Date.now());
        }, NUDGE_MS - (now - this.lastNudge));
        this.timer.unref();
      }
      return;
    }
    if (now - this.lastLook < LOOK_MS) return;
    this.lastLook = now;
    // A write that committed stays a success: a WAL that cannot be looked at, or a thread that
    // cannot start, leaves the checkpoints where SQLite makes them.
    try {
      const size = statSync(`${this.path}-wal`, { throwIfNoEntry: false })?.size ?? 0;
      if (size >= this.opts.startBytes) this.start(now);
    } catch {
      this.fail();
    }
  }

  private start(now: number): void {
    const pageSize = this.handle.pragma('page_size', { simple: true }) as number;
    const shared = new SharedArrayBuffer(4);
    const data: CheckpointWorkerData = { path: this.path, busyTimeoutMs: this.busyTimeoutMs, closed: shared };
    const worker = new Worker(WORKER_URL, { workerData: data });
    worker.unref();
    worker.on('message', (r: CheckpointReply) => {
      this.inFlight = false;
      if ('error' in r) this.stats.errors++;
      else {
        this.stats.checkpoints++;
        this.stats.frames += Math.max(0, r.checkpointed);
      }
      if (this.again && this.worker === worker) {
        this.again = false;
        this.nudge(Date.now());
      }
    });
    worker.on('error', () => this.fail());
    worker.on('exit', () => {
      if (this.worker === worker) this.fail();
    });
    this.worker = worker;
    this.closed = new Int32Array(shared);
    this.handle.pragma(`wal_autocheckpoint = ${Math.max(1, Math.floor(this.opts.limitBytes / pageSize))}`);
    this.handle.pragma(`journal_size_limit = ${this.opts.limitBytes}`);
    this.nudge(now);
  }

  private nudge(now: number): void {
    if (!this.worker) return;
    this.lastNudge = now;
    if (this.inFlight) {
      this.again = true;
      return;
    }
    this.inFlight = true;
    this.worker!.postMessage('checkpoint' satisfies CheckpointRequest);
  }

  /** The thread is gone: the writer checkpoints in its commits again, as SQLite does by default. */
  private fail(): void {
    const worker = this.worker;
    this.worker = null;
    if (worker) void worker.terminate();
    this.failed = true;
    this.inFlight = false;
    try {
      if (this.handle.open) this.handle.pragma('wal_autocheckpoint = 1000');
    } catch {
      // The limit set at start stays: the commits still checkpoint past it.
    }
  }

  /** The thread's connection closed before the writer's: the last to close checkpoints and removes the WAL. */
  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const worker = this.worker;
    if (!worker) return;
    this.worker = null;
    worker.postMessage('close' satisfies CheckpointRequest);
    // Ended once its connection is closed (or after the wait, amid a checkpoint that SQLite's
    // recovery makes good): it has nothing left to do.
    Atomics.wait(this.closed!, 0, 0, CLOSE_WAIT_MS);
    void worker.terminate();
  }
}
