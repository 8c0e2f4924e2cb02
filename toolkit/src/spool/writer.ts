/**
 * Spool writes on a few threads of their own. A body already in memory goes to a writer thread
 * in one message; the thread creates, writes, fdatasyncs and renames it with blocking calls and
 * fsyncs the directory once for everything it took in that pass (writer-worker.ts).
 *
 * Why: through node:fs each upload cost the event loop seven thread-pool round trips (open,
 * writev, fdatasync, close, rename, directory fsync, and the unlink after forwarding), each a
 * request object, a promise and a wake-up. Profiled under the relay bench that was a fifth of the
 * relay's main thread; one message each way costs a fraction of it. The kernel's work is the
 * same, but it now runs beside the event loop instead of queueing behind it.
 *
 * Removals stay on node:fs: behind a pass of fdatasyncs they would wait for the whole pass.
 *
 * A writer thread that dies fails what it held with a transient error (the client sends again,
 * a partial temp file is swept later) and is replaced at the next write.
 */
import { Worker } from 'node:worker_threads';
import { capstanError } from '@capstan/shared/errors';
import type { WriterReply, WriterRequest } from './writer-worker.js';

type WriteRequest = Extract<WriterRequest, { op: 'write' }>;
type Distributive<T> = T extends unknown ? Omit<T, 'id'> : never;

interface Pending {
  resolve: (r: Extract<WriterReply, { ok: true }>) => void;
  reject: (err: unknown) => void;
}

interface Thread {
  worker: Worker;
  pending: Map<number, Pending>;
}

const WORKER_URL = new URL('./writer-worker.js', import.meta.url);

/** An errno-style error from a writer thread, as node:fs would have thrown it. */
function errnoError(code: string, message: string): NodeJS.ErrnoException {
  const err = new Error(message) as NodeJS.ErrnoException;
  err.code = code;
  return err;
}

export class SpoolWriter {
  private readonly threads: Array<Thread | null>;
  private nextId = 1;

  constructor(readonly size = 2) {
    if (!Number.isInteger(size) || size < 1) throw new RangeError('spool writer threads must be a positive integer');
    this.threads = Array.from({ length: size }, () => null);
  }

  /**
   * Write `data` to `tmp`, fdatasync, link to `dest` without replacing (place.ts; `alt` on a
   * conflict), fsync its directory. `replaced` is the body's size when the same bytes were there. With `reusedSize`,
   * `tmp` is an existing file of that size to overwrite (spool/free/, recycle.ts), not a new one.
   */
  write(tmp: string, dest: string, data: Uint8Array, reusedSize?: number, alt?: string): Promise<{ sha256: string; replaced: number; path: string }> {
    const req: Omit<WriteRequest, 'id'> = { op: 'write', tmp, dest, data, ...(reusedSize !== undefined && { reusedSize }), ...(alt !== undefined && { alt }) };
    return this.send(req).then((r) => ({
      sha256: r.sha256!,
      replaced: r.replaced ?? 0,
      path: r.path ?? dest,
    }));
  }

  private send(req: Distributive<WriterRequest>): Promise<Extract<WriterReply, { ok: true }>> {
    const id = this.nextId++;
    // The least busy thread: a pass that is stuck on a slow fsync does not hold the others up.
    let best = 0;
    for (let i = 1; i < this.threads.length; i++) {
      if ((this.threads[i]?.pending.size ?? 0) < (this.threads[best]?.pending.size ?? 0)) best = i;
    }
    const thread = this.threads[best] ?? this.spawn(best);
    return new Promise((resolve, reject) => {
      thread.pending.set(id, { resolve, reject });
      if (thread.pending.size === 1) thread.worker.ref();
      // A body over a SharedArrayBuffer is shared with the thread, any other is copied into the
      // message; either way the caller keeps its buffer.
      thread.worker.postMessage({ ...req, id } as WriterRequest);
    });
  }

  private spawn(index: number): Thread {
    const thread: Thread = { worker: new Worker(WORKER_URL), pending: new Map() };
    thread.worker.unref();
    thread.worker.on('message', (replies: WriterReply[]) => {
      for (const r of replies) {
        const p = thread.pending.get(r.id);
        if (!p) continue;
        thread.pending.delete(r.id);
        if (r.ok) p.resolve(r);
        else p.reject(errnoError(r.code, r.message));
      }
      if (thread.pending.size === 0) thread.worker.unref();
    });
    const fail = (err: unknown) => {
      if (this.threads[index] === thread) this.threads[index] = null;
      if (thread.pending.size === 0) return;
      const pending = [...thread.pending.values()];
      thread.pending.clear();
      for (const p of pending) p.reject(capstanError('ERR_IO', 'spool writer thread stopped', { cause: err }));
    };
    thread.worker.on('error', fail);
    thread.worker.on('exit', (code) => fail(new Error(`exit ${code}`)));
    this.threads[index] = thread;
    return thread;
  }

  /** Stop the threads once what they hold is done (a later write starts a thread again). */
  async close(): Promise<void> {
    const threads = this.threads.filter((t): t is Thread => t !== null);
    this.threads.fill(null);
    await Promise.all(threads.map(async (t) => {
      while (t.pending.size > 0) await new Promise((r) => setTimeout(r, 5));
      await t.worker.terminate();
    }));
  }
}
