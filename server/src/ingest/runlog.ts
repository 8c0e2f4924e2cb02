/**
 * Run-log ingest at the root: name → node → decompress → S/MIME verify against the node's pinned
 * certificate → parse → summary → insert. Every refusal is a coded, permanent error (the spool
 * processor moves the file to failed/ with it); a database outage is transient.
 *
 * The server ingests through `RunLogIngest`: the CPU work runs in worker threads (pool.ts) and
 * the inserts are grouped, several run logs per transaction (group commit: one commit, one fsync
 * for the batch). A run log's promise settles when its batch has committed, so the spool file is
 * removed only once its run is durable; a run refused inside a batch fails alone.
 * `ingestRunLog` is the same pipeline on the calling thread, one run per transaction.
 */
import { readFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { capstanError } from '@capstan/shared/errors';
import { parseRunInfo } from '@capstan/shared/runlog/name';
import type { EnrollmentRules } from '../registry/enrollment.js';
import type { InsertRunResult, NodeTrust, RunInsert, Store } from '../store/store.js';
import { PrepareWorkerPool } from './pool.js';
import type { InventoryReader } from './inventory.js';
import { DEFAULT_MAX_CLOCK_SKEW_MS, prepareRunLog, runStart, type IngestLimits, type PrepareJob, type PreparedRun } from './runlog-prepare.js';
import { clockSkew } from '../registry/rules.js';
import type { NodeRegistry } from '../registry/nodes.js';
import { dayOf } from '../store/runs/run-codec.js';

export { runStart };

export interface IngestDeps {
  store: Store;
  /** The door for node changes: inventories register and refresh nodes through it. */
  nodes: NodeRegistry;
  limits: IngestLimits;
  now?: () => Date;
  /** Auto-accept rules applied to inventories of new or pending nodes; none: every node waits for an admin. */
  enrollment?: EnrollmentRules;
  /** Reads inventories on worker threads (inventory-pool.ts); none: in this thread. */
  inventoryReader?: InventoryReader;
  /** An inventory was stored for this node (vulnerability matching); its failures are its own to report. */
  onInventory?: (nodeId: string, inventory: Record<string, unknown>) => Promise<void>;
}

/** The node must be known and accepted, with a pinned certificate, before its run logs count. */
export function requireAccepted<N extends NodeTrust>(node: N | null, nodeId: string): N & { certificate: string } {
  if (!node) throw capstanError('ERR_NODE_UNKNOWN', `node ${nodeId} is unknown`);
  if (node.accepted === 'pending') throw capstanError('ERR_NODE_PENDING', `node ${nodeId} is pending acceptance`);
  if (node.accepted === 'refused') throw capstanError('ERR_NODE_REFUSED', `node ${nodeId} was refused`);
  if (!node.certificate) throw capstanError('ERR_CERTIFICATE', `node ${nodeId} has no pinned certificate`);
  return node as N & { certificate: string };
}

/**
 * Everything before the CPU work: the name parsed, the node's certificate, the bytes (`data`
 * when the upload handed them over in memory, else read from the spooled file).
 */
async function jobFor(deps: IngestDeps, path: string, name: string, data?: Buffer): Promise<PrepareJob> {
  const info = parseRunInfo(name);
  const node = requireAccepted(await deps.store.getNodeTrust(info.nodeId), info.nodeId);
  const raw = data ?? await readFile(path);
  // The base of the day the name says the run is of, for the worker to encode the run against
  // (off the event loop); a run of another day is encoded by the store.
  const day = dayOf(info.timestamp);
  const base = day === null ? null : await deps.store.getRunBase(info.nodeId, day);
  return {
    raw, compression: info.compression, nodeId: info.nodeId, timestamp: info.timestamp, certificate: node.certificate, limits: deps.limits,
    ...(base && { base }),
  };
}

/**
 * A run dated beyond the allowed skew ahead of the server's clock is refused (into failed/ with
 * the reason): stored, it would stay the node's last run and compliance base whatever genuine runs
 * came after, and retention (by start day) would never reach it. The node shows the skew seen.
 */
async function toInsert(deps: IngestDeps, run: PreparedRun, name: string): Promise<RunInsert> {
  const receivedAt = (deps.now?.() ?? new Date()).toISOString();
  const skew = clockSkew(run.started_at, receivedAt);
  const allowed = deps.limits.maxClockSkewMs ?? DEFAULT_MAX_CLOCK_SKEW_MS;
  if (skew !== null && skew * 1000 > allowed) {
    await deps.nodes.recordClockSkew(run.node_id, skew, receivedAt);
    throw capstanError('ERR_RUN_IN_FUTURE', `run started at ${run.started_at}, ${skew} s ahead of the server's clock (more than [limits] max_clock_skew): check the node's clock`, {
      details: { clock_skew: skew },
    });
  }
  return { ...run, file_name: name, received_at: receivedAt };
}

export async function ingestRunLog(deps: IngestDeps, path: string, name: string): Promise<{ inserted: boolean; runId: number }> {
  const run = await prepareRunLog(await jobFor(deps, path, name));
  const result = await deps.store.insertRun(await toInsert(deps, run, name));
  return { inserted: result.inserted, runId: result.id };
}

export interface RunLogIngestOptions extends IngestDeps {
  /** Worker threads for the CPU work; 0: one per core. */
  workers?: number;
  /** Bytes of run logs (as received) each worker holds ahead of its work, beyond two (pool.ts); default 4 MiB. */
  workerHoldBytes?: number;
  /** Most run logs in one transaction. */
  batchSize?: number;
  /** Longest a run log waits for its batch to fill before the batch is written anyway (ms). */
  batchWindowMs?: number;
  /**
   * Batches written at the same time (default 1). SQLite has one writer, so 1; PostgreSQL runs
   * each batch on its own pooled connection, one statement after another, so several at once.
   */
  parallelBatches?: number;
}

interface Waiting {
  run: RunInsert;
  resolve: (r: InsertRunResult) => void;
  reject: (err: unknown) => void;
}

export class RunLogIngest {
  private readonly deps: IngestDeps;
  private readonly pool: PrepareWorkerPool;
  private readonly batchSize: number;
  private readonly windowMs: number;
  private batch: Waiting[] = [];
  private timer: NodeJS.Timeout | null = null;
  /** A write asked for in the next turn of the event loop. */
  private immediate: NodeJS.Immediate | null = null;
  private readonly parallel: number;
  /** Batches being written, and a wake-up for close() when one ends. */
  private writing = 0;
  /** Run logs in the batches being written. */
  private writingRuns = 0;
  private written: (() => void) | null = null;
  /** Run logs started and not yet waiting in a batch: while there are none, a batch cannot grow. */
  private preparing = 0;
  /** When the last batch was written (ms since the epoch). */
  private lastWrite = 0;
  /** Batches written and the run logs in them, since start (the mean batch size shows how grouped commits are). */
  readonly stats = { batches: 0, runs: 0 };

  constructor(opts: RunLogIngestOptions) {
    this.deps = opts;
    this.batchSize = opts.batchSize ?? 64;
    // Each worker may hold a batch's worth: it prepares the next batch while this one commits (pool.ts).
    this.pool = new PrepareWorkerPool(opts.workers || availableParallelism(), Math.max(2, this.batchSize), opts.workerHoldBytes);
    this.windowMs = opts.batchWindowMs ?? 200;
    this.parallel = Math.max(1, opts.parallelBatches ?? 1);
  }

  /** How many run logs may usefully be in flight: enough to fill a batch while the previous one commits. */
  get inFlightHint(): number {
    return (this.parallel + 1) * this.batchSize;
  }

  /** Run logs being ingested: prepared, waiting for their batch, or being written. */
  get pending(): number {
    return this.preparing + this.batch.length + this.writingRuns;
  }

  /** Ingest the spooled file at `path`; `data`, when given, is its content (no read needed). */
  async ingest(path: string, name: string, data?: Buffer): Promise<{ inserted: boolean; runId: number }> {
    let run: RunInsert;
    this.preparing++;
    try {
      const job = await jobFor(this.deps, path, name, data);
      run = await toInsert(this.deps, await this.pool.prepare(job), name);
    } finally {
      this.preparing--;
      // The last one being prepared failed: what is waiting need not wait for the window.
      this.schedule();
    }
    const result = await new Promise<InsertRunResult>((resolve, reject) => {
      this.batch.push({ run, resolve, reject });
      this.schedule();
    });
    return { inserted: result.inserted, runId: result.id };
  }

  /**
   * At most one commit per window, unless a batch is full: under load run logs arrive a few at a
   * time, and committing whenever nothing else was being prepared made batches of one or two
   * (one fsync each, on the event loop). A run log arriving after a quiet window, with nothing
   * else on its way, is written at once.
   */
  private schedule(): void {
    if (this.batch.length === 0 || this.writing >= this.parallel) return;
    const wait = this.lastWrite + this.windowMs - Date.now();
    if (this.batch.length >= this.batchSize || (wait <= 0 && this.preparing === 0)) {
      // In a turn of its own: SQLite writes a batch synchronously, and batches written one after
      // another from here (each prepared run log's continuation may fill one) held the event loop
      // for seconds under a backlog, so the API (the console, relays' uploads) waited for it.
      this.immediate ??= setImmediate(() => {
        this.immediate = null;
        this.write();
      });
    } else if (!this.timer) {
      this.timer = setTimeout(() => {
        this.timer = null;
        this.write();
      }, Math.max(wait, 1));
    }
  }

  private write(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    if (this.immediate) {
      clearImmediate(this.immediate);
      this.immediate = null;
    }
    if (this.writing >= this.parallel || this.batch.length === 0) return;
    const items = this.batch.splice(0, this.batchSize);
    this.lastWrite = Date.now();
    this.stats.batches++;
    this.stats.runs += items.length;
    this.writing++;
    this.writingRuns += items.length;
    void this.deps.store.insertRuns(items.map((w) => w.run)).then(
      (results) => {
        results.forEach((r, i) => (r.ok ? items[i]!.resolve(r.result) : items[i]!.reject(r.error)));
      },
      (err: unknown) => {
        for (const w of items) w.reject(err);
      },
    ).finally(() => {
      this.writing--;
      this.writingRuns -= items.length;
      this.written?.();
      this.schedule();
    });
  }

  /** After the ingests in flight have settled: stops the workers. */
  async close(): Promise<void> {
    while (this.writing > 0 || this.batch.length > 0) {
      const ended = new Promise<void>((resolve) => (this.written = resolve));
      this.write();
      if (this.writing > 0) await ended;
    }
    await this.pool.close();
  }
}
