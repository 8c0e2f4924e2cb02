/**
 * Inventories are read on worker threads (node:worker_threads), never on the event loop: an OCS
 * inventory of a few tens of kB gzip'd may expand to tens of MB of XML, and reading that took
 * seconds of CPU during which no request was answered (docs/capacity.md, "Inventories").
 *
 * - Inventories of at most `inventory_inline_size` decompressed (256 KiB) are read in the calling
 *   thread (ingest/inventory.ts): a few milliseconds, less than handing them over.
 * - A small pool (`[processing] inventory_workers`, default 1), started with the first inventory:
 *   a server that receives none costs no thread. Each worker reads one inventory at a time.
 * - Each inventory has `inventory_time_limit` to be read: past it its worker is ended and
 *   replaced, and the inventory is refused (ERR_INVENTORY_TOO_COSTLY, permanent: the file goes to
 *   failed/). Each worker's heap is bounded (`inventory_memory`, Worker resourceLimits): a worker
 *   that runs out is replaced and its inventory refused the same way.
 * - Waiting inventories are taken accepted nodes' first, then newcomers' (unverified: anyone may
 *   send one), in arrival order within each. At most `inventory_queue` wait; past it an
 *   inventory is answered ERR_INVENTORY_BUSY (transient: its file stays in the spool and is
 *   tried again later).
 */
import { Worker } from 'node:worker_threads';
import { CapstanError, capstanError } from '@capstan/shared/errors';
import type { InventoryDoc, InventoryReader } from './inventory.js';
import type { InventoryJob } from './inventory-read.js';
import type { InventoryReply, InventoryRequest } from './inventory-worker.js';

export interface InventoryPoolOptions {
  /** Worker threads (`[processing] inventory_workers`). */
  workers: number;
  /** Inventories waiting for a worker, at most (`inventory_queue`). */
  maxQueued: number;
  /** Longest one inventory may take to read, in ms (`inventory_time_limit`). */
  timeLimitMs: number;
  /** Heap of each worker, in bytes (`inventory_memory`). */
  memoryBytes: number;
  /** Inventories up to this size decompressed are read by the caller instead (`inventory_inline_size`; 0: none). */
  inlineBytes?: number;
}

interface Pending {
  job: InventoryJob;
  resolve: (doc: InventoryDoc) => void;
  reject: (err: unknown) => void;
}

interface Slot {
  worker: Worker;
  current: { id: number; p: Pending; timer: NodeJS.Timeout } | null;
  /** Its modules are loaded: it is handed inventories from then on. */
  ready: boolean;
}

const WORKER_URL = new URL('./inventory-worker.js', import.meta.url);

export class InventoryPool implements InventoryReader {
  private readonly slots: Slot[] = [];
  /** Accepted nodes' inventories, then newcomers'. */
  private readonly queues: [Pending[], Pending[]] = [[], []];
  private nextId = 1;
  private closed = false;
  /** Inventories refused for their cost since the start (GET /api/1/system/status could show it). */
  refusedForCost = 0;
  readonly inlineBytes: number;

  constructor(private readonly opts: InventoryPoolOptions) {
    if (!Number.isInteger(opts.workers) || opts.workers < 1) throw new RangeError('inventory_workers must be a positive integer');
    if (!(opts.timeLimitMs > 0)) throw new RangeError('inventory_time_limit must be positive');
    this.inlineBytes = opts.inlineBytes ?? 0;
  }

  get queued(): number {
    return this.queues[0].length + this.queues[1].length;
  }

  read(job: InventoryJob, accepted: boolean): Promise<InventoryDoc> {
    if (this.closed) return Promise.reject(capstanError('ERR_INTERNAL', 'inventory worker pool is closed', { transient: true }));
    if (this.queued >= this.opts.maxQueued) {
      return Promise.reject(capstanError('ERR_INVENTORY_BUSY', `${this.queued} inventories wait to be read ([processing] inventory_queue): tried again later`, { transient: true }));
    }
    // The raw bytes cross as shared memory (no copy into the message).
    if (!(job.raw.buffer instanceof SharedArrayBuffer)) {
      const raw = new Uint8Array(new SharedArrayBuffer(job.raw.byteLength));
      raw.set(job.raw);
      job = { ...job, raw };
    }
    while (this.slots.length < this.opts.workers) this.slots.push(this.spawn());
    return new Promise((resolve, reject) => {
      this.queues[accepted ? 0 : 1].push({ job, resolve, reject });
      this.pump();
    });
  }

  private spawn(): Slot {
    const mb = Math.max(16, Math.floor(this.opts.memoryBytes / (1024 * 1024)));
    const worker = new Worker(WORKER_URL, {
      resourceLimits: { maxOldGenerationSizeMb: mb, maxYoungGenerationSizeMb: Math.max(4, Math.min(64, Math.floor(mb / 8))) },
    });
    const slot: Slot = { worker, current: null, ready: false };
    worker.unref();
    // Held while it loads, so that a server waiting for an inventory's answer stays up.
    worker.ref();
    worker.on('message', (reply: InventoryReply) => {
      if ('ready' in reply) {
        slot.ready = true;
        worker.unref();
        this.pump();
        return;
      }
      const cur = slot.current;
      if (!cur || cur.id !== reply.id) return;
      clearTimeout(cur.timer);
      slot.current = null;
      worker.unref();
      if (reply.ok) {
        cur.p.resolve(reply.doc);
      } else {
        const e = reply.error;
        cur.p.reject(e.capstan
          ? new CapstanError(e.code!, e.message, { statusCode: e.statusCode, transient: e.transient })
          : capstanError('ERR_INTERNAL', e.message));
      }
      this.pump();
    });
    let gone = false;
    const died = (err: Error | null) => {
      if (gone) return;
      gone = true;
      const cur = slot.current;
      slot.current = null;
      if (cur) {
        clearTimeout(cur.timer);
        const memory = (err as { code?: string } | null)?.code === 'ERR_WORKER_OUT_OF_MEMORY';
        if (memory) this.refusedForCost++;
        cur.p.reject(memory
          ? capstanError('ERR_INVENTORY_TOO_COSTLY', `reading this inventory needed more than [processing] inventory_memory (${mb} MiB)`)
          : capstanError('ERR_INTERNAL', `inventory worker stopped: ${err?.message ?? 'exited'}`, { transient: true }));
      }
      const i = this.slots.indexOf(slot);
      if (i < 0 || this.closed) return;
      this.slots[i] = this.spawn();
      this.pump();
    };
    worker.on('error', died);
    worker.on('exit', () => died(null));
    return slot;
  }

  private pump(): void {
    for (const slot of this.slots) {
      if (slot.current || !slot.ready) continue;
      const p = this.queues[0].shift() ?? this.queues[1].shift();
      if (!p) return;
      const id = this.nextId++;
      const timer = setTimeout(() => this.overtime(slot, id), this.opts.timeLimitMs);
      timer.unref();
      slot.current = { id, p, timer };
      slot.worker.ref();
      slot.worker.postMessage({ id, job: p.job } satisfies InventoryRequest);
    }
  }

  /** The inventory took too long: refused, its worker ended and replaced. */
  private overtime(slot: Slot, id: number): void {
    const cur = slot.current;
    if (!cur || cur.id !== id) return;
    slot.current = null;
    this.refusedForCost++;
    cur.p.reject(capstanError('ERR_INVENTORY_TOO_COSTLY', `reading this inventory took more than [processing] inventory_time_limit (${this.opts.timeLimitMs} ms)`));
    const i = this.slots.indexOf(slot);
    if (i >= 0 && !this.closed) this.slots[i] = this.spawn();
    void slot.worker.terminate();
    this.pump();
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const q of this.queues) {
      for (const p of q.splice(0)) p.reject(capstanError('ERR_INTERNAL', 'inventory worker pool is closed', { transient: true }));
    }
    await Promise.all(this.slots.map((s) => s.worker.terminate()));
  }
}
