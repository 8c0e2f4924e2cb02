/**
 * A fixed pool of ingest worker threads (node:worker_threads), one per core by default: S/MIME
 * verification, decompression, parsing and recompression of run logs run there, so the event
 * loop that serves HTTP and writes the database is not stalled by them (profiled under ingest,
 * they were a quarter of the server's CPU, all on the main thread).
 *
 * Each worker has at most `perWorker` jobs outstanding, handed out by the main thread. The ingest
 * gives a batch's worth (ingest/runlog.ts): the event loop writes a batch of run logs in one
 * transaction, tens of milliseconds during which it hands out nothing, and the workers must hold
 * enough to prepare the next batch meanwhile. With two each (one being prepared, one waiting)
 * they prepared four run logs and idled for the rest of every commit: the steady bench measured
 * the server's two cores 1.6 busy, p99 to visible 1.6–1.8 s; with 64 each, 1.7–1.8 busy, 1.1–1.2 s.
 * What a worker holds is bounded in bytes too (`perWorkerBytes`, `[processing] worker_hold_size`,
 * of run logs as received; two jobs whatever their size): its prepared runs, their logs
 * decompressed, wait in the port for the event loop, and 64 large run logs would be that many
 * times their expanded size.
 * A worker that dies fails its jobs with a transient error (the spooled files are retried) and
 * is replaced.
 */
import { Worker } from 'node:worker_threads';
import { CapstanError, capstanError } from '@capstan/shared/errors';
import type { PrepareJob, PreparedRun } from './runlog-prepare.js';
import type { WorkerReply, WorkerRequest } from './runlog-worker.js';

interface Pending {
  job: PrepareJob;
  resolve: (run: PreparedRun) => void;
  reject: (err: unknown) => void;
}

interface Slot {
  worker: Worker;
  jobs: Map<number, Pending>;
  /** Bytes of the run logs in `jobs`, as received (compressed). */
  bytes: number;
}

/** `[processing] worker_hold_size`'s default. */
const DEFAULT_PER_WORKER_BYTES = 4 * 1024 * 1024;

/** Jobs a worker takes whatever their size (one being prepared, one waiting), within `perWorker`. */
const MIN_PER_WORKER = 2;

const WORKER_URL = new URL('./runlog-worker.js', import.meta.url);

export class PrepareWorkerPool {
  private readonly slots: Slot[] = [];
  private readonly queue: Pending[] = [];
  private nextId = 1;
  private closed = false;

  constructor(readonly size: number, private readonly perWorker = MIN_PER_WORKER, private readonly perWorkerBytes: number = DEFAULT_PER_WORKER_BYTES) {
    if (!Number.isInteger(perWorker) || perWorker < 1) throw new RangeError('jobs per worker must be a positive integer');
    if (!(perWorkerBytes >= 0)) throw new RangeError('bytes per worker must be a number of bytes ([processing] worker_hold_size)');
    if (!Number.isInteger(size) || size < 1) throw new RangeError('worker pool size must be a positive integer');
  }

  private spawn(): Slot {
    const slot: Slot = { worker: new Worker(WORKER_URL), jobs: new Map(), bytes: 0 };
    slot.worker.unref();
    slot.worker.on('message', (reply: WorkerReply) => {
      const p = slot.jobs.get(reply.id);
      if (!p) return;
      slot.jobs.delete(reply.id);
      slot.bytes -= p.job.raw.byteLength;
      if (slot.jobs.size === 0) slot.worker.unref();
      if (reply.ok) {
        // Buffers arrive as plain Uint8Arrays (structured clone); the store wants Buffers.
        const buf = (u: unknown) => {
          const a = u as Uint8Array;
          return Buffer.from(a.buffer, a.byteOffset, a.byteLength);
        };
        const { changes_json: changes, ...wire } = reply.run;
        p.resolve({
          ...wire,
          changes: JSON.parse(changes) as PreparedRun['changes'],
          ...(reply.run.log_compressed ? { log_compressed: buf(reply.run.log_compressed) } : {}),
          ...(reply.run.log_text ? { log_text: buf(reply.run.log_text) } : {}),
          ...(reply.run.outcomes_packed ? { outcomes_packed: buf(reply.run.outcomes_packed) } : {}),
          ...(reply.run.outcomes_json ? { outcomes_json: buf(reply.run.outcomes_json) } : {}),
          ...(reply.run.against ? { against: { base_id: reply.run.against.base_id, log: buf(reply.run.against.log), outcomes: buf(reply.run.against.outcomes) } } : {}),
        });
      } else {
        const e = reply.error;
        p.reject(e.capstan
          ? new CapstanError(e.code!, e.message, { statusCode: e.statusCode, transient: e.transient })
          : Object.assign(new Error(e.message), e.code ? { code: e.code } : {}));
      }
      this.pump();
    });
    const died = (err: unknown) => {
      const i = this.slots.indexOf(slot);
      if (i < 0) return;
      for (const p of slot.jobs.values()) {
        p.reject(capstanError('ERR_INTERNAL', 'ingest worker stopped', { cause: err, transient: true }));
      }
      slot.jobs.clear();
      slot.bytes = 0;
      if (this.closed) return;
      this.slots[i] = this.spawn();
      this.pump();
    };
    slot.worker.on('error', died);
    slot.worker.on('exit', (code) => died(new Error(`ingest worker exited with code ${code}`)));
    return slot;
  }

  prepare(job: PrepareJob): Promise<PreparedRun> {
    if (this.closed) return Promise.reject(capstanError('ERR_INTERNAL', 'ingest worker pool is closed', { transient: true }));
    // Shared memory crosses to the worker as it is. A plain buffer would be copied into the
    // message and out of it; a view into a larger buffer (a slice of a read) would carry the whole
    // of that buffer. One copy into shared memory of its own bytes is the least.
    if (!(job.raw.buffer instanceof SharedArrayBuffer)) {
      const raw = new Uint8Array(new SharedArrayBuffer(job.raw.byteLength));
      raw.set(job.raw);
      job = { ...job, raw };
    }
    // Started with the first run log: a server that receives none costs no threads.
    while (this.slots.length < this.size) this.slots.push(this.spawn());
    return new Promise((resolve, reject) => {
      this.queue.push({ job, resolve, reject });
      this.pump();
    });
  }

  /** What each worker holds: jobs handed to it and not answered yet, and their bytes as received. */
  get held(): Array<{ jobs: number; bytes: number }> {
    return this.slots.map((s) => ({ jobs: s.jobs.size, bytes: s.bytes }));
  }

  /** Jobs waiting for a worker or being prepared. */
  get pending(): number {
    return this.queue.length + this.slots.reduce((n, s) => n + s.jobs.size, 0);
  }

  private pump(): void {
    while (this.queue.length > 0) {
      // The least busy worker below its limits.
      const size = this.queue[0]!.job.raw.byteLength;
      let best: Slot | null = null;
      for (const s of this.slots) {
        const room = s.jobs.size < this.perWorker && (s.jobs.size < MIN_PER_WORKER || s.bytes + size <= this.perWorkerBytes);
        if (room && (!best || s.jobs.size < best.jobs.size)) best = s;
      }
      if (!best) return;
      const p = this.queue.shift()!;
      const id = this.nextId++;
      best.jobs.set(id, p);
      best.bytes += size;
      if (best.jobs.size === 1) best.worker.ref();
      best.worker.postMessage({ id, job: p.job } satisfies WorkerRequest);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const p of this.queue.splice(0)) p.reject(capstanError('ERR_INTERNAL', 'ingest worker pool is closed', { transient: true }));
    await Promise.all(this.slots.map((s) => s.worker.terminate()));
  }
}
