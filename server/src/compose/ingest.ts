/**
 * The ingest pipeline as the server runs it: the spool, one processor per kind watching its
 * incoming/, run logs prepared on worker threads and stored several per transaction, inventories
 * (Capstan's JSON and RUDDER's OCS with their `.sign`) registering nodes through the registry, and
 * the relays' upload batches taken from memory.
 */
import { join } from 'node:path';
import type { BatchResult } from '@capstan/shared/batch';
import type { Logger } from '@capstan/shared/log';
import { SPOOL_KINDS, type SpoolKind } from '@capstan/shared/protocol';
import type { BatchUpload } from '@capstan/toolkit/http/batch';
import { DecompressBudget } from '@capstan/shared/envelope/budget';
import { uploadNameOf } from '@capstan/toolkit/spool/ocs-pair';
import { SpoolProcessor, type ProcessedEvent } from '@capstan/toolkit/spool/processor';
import { RecentBodies } from '@capstan/toolkit/spool/recent';
import { Spool } from '@capstan/toolkit/spool/spool';
import { AttemptLedger } from '@capstan/toolkit/spool/quarantine';
import type { ServerConfig } from '../config.js';
import { batchTaker } from '../ingest/batch.js';
import { ingestInventory } from '../ingest/inventory.js';
import { handleOcsUpload } from '../ingest/ocs-ingest.js';
import { InventoryPool } from '../ingest/inventory-pool.js';
import { RunLogIngest, type IngestDeps } from '../ingest/runlog.js';
import { SettledFiles } from '../ingest/settled.js';
import type { ServerMetrics } from '../metrics.js';
import { enrollmentRules } from '../registry/enrollment.js';
import type { NodeRegistry } from '../registry/nodes.js';
import type { Store } from '../store/store.js';

export interface IngestPipeline {
  spool: Spool;
  processors: Record<SpoolKind, SpoolProcessor>;
  /** Files processed, by kind and outcome (GET /api/1/system/status). */
  counters: Record<string, number>;
  /** What the HTTP app hands over: uploads taken at once, run logs from memory, relays' batches. */
  app: {
    onAccepted: (kind: SpoolKind, name: string) => void;
    runLogsInMemory: { keepBytes: number; onWritten: (name: string, data: Buffer) => void };
    takeBatch: (kind: SpoolKind, files: BatchUpload[]) => Promise<BatchResult[]>;
    /** Resolves true once the ingest is done with an uploaded file (false after `ms`). */
    ingested: (kind: SpoolKind, name: string, ms: number) => Promise<boolean>;
  };
  start(): Promise<void>;
  /** Stop taking files (the ones in flight finish), then the workers. */
  stop(): Promise<void>;
}

export function ingestDeps(config: ServerConfig, store: Store, nodes: NodeRegistry): IngestDeps {
  const l = config.limits;
  return {
    store,
    nodes,
    limits: {
      maxDecompressedBytes: l.max_decompressed_size,
      maxReports: l.max_reports,
      maxLineBytes: l.max_line_length,
      changes: { maxPerRun: config.changes.max_per_run, maxMessageChars: config.changes.max_message_length, maxDiffChars: config.changes.max_diff_length },
      allowSha1: config.signatures.allow_sha1,
      maxClockSkewMs: l.max_clock_skew,
      ocs: { maxBytes: l.ocs_max_size, maxDepth: l.ocs_max_depth, maxElements: l.ocs_max_elements },
      // One budget for every decompression in flight, in this thread and the workers.
      budget: new DecompressBudget(config.processing.decompress_budget).share,
    },
    enrollment: enrollmentRules(config.enrollment),
  };
}

export async function openSpool(config: ServerConfig): Promise<Spool> {
  const spool = new Spool({
    root: join(config.general.data_dir, 'spool'),
    maxFileBytes: config.limits.max_body_size,
    writerThreads: config.processing.writer_threads,
    recycleFiles: config.processing.recycle_files,
    recycleBytes: config.processing.recycle_size,
    minFreeBytes: config.spool.min_free_space,
    failedMaxFiles: config.spool.failed_max_files,
    failedMaxBytes: config.spool.failed_max_size,
  });
  await spool.init();
  return spool;
}

export function ingestPipeline(config: ServerConfig, log: Logger, deps: IngestDeps, spool: Spool, metrics: ServerMetrics): IngestPipeline {
  const p = config.processing;
  // Run logs: CPU work on worker threads, inserts grouped several per transaction (ingest/runlog.ts).
  const runLogs = new RunLogIngest({
    ...deps,
    workers: p.workers,
    workerHoldBytes: p.worker_hold_size,
    batchSize: p.batch_size,
    batchWindowMs: p.batch_window,
    // PostgreSQL: a few batches at once, each on its own connection (the rest serve the API).
    parallelBatches: config.database.url ? Math.max(1, Math.min(4, config.database.pool_size - 1)) : 1,
  });
  // Inventories: read on their own worker threads, under a time and a memory limit (ingest/inventory-pool.ts).
  const inventoryPool = new InventoryPool({
    workers: p.inventory_workers, maxQueued: p.inventory_queue, timeLimitMs: p.inventory_time_limit, memoryBytes: p.inventory_memory, inlineBytes: p.inventory_inline_size,
  });
  const inventoryDeps: IngestDeps = { ...deps, inventoryReader: inventoryPool };
  // Run logs just uploaded, in memory until their ingest takes them (the file stays the truth).
  const recent = new RecentBodies(16 * 1024 * 1024);
  const counters: Record<string, number> = {};
  const settled = new SettledFiles();
  const count = (kind: SpoolKind, e: ProcessedEvent) => {
    const k = `${kind}_${e.outcome}`;
    counters[k] = (counters[k] ?? 0) + 1;
    metrics.onProcessed(e);
    settled.settle(kind, e.name);
  };
  const processors = {} as Record<SpoolKind, SpoolProcessor>;
  const handlers: Record<SpoolKind, (path: string, name: string) => Promise<void>> = {
    reports: async (path, name) => {
      const r = await runLogs.ingest(path, name, recent.take(name));
      log.info({ file: name, runId: r.runId, duplicate: !r.inserted }, r.inserted ? 'run stored' : 'run already stored');
    },
    inventories: async (path, name) => {
      // A RUDDER agent's OCS inventory is verified with the `.sign` uploaded beside it. The
      // registry's effects regenerate the node's policy (dynamic groups follow the inventory).
      // An OCS half kept as a candidate (`<name>~<8 hex>`) is read under its upload's name.
      const upName = uploadNameOf(name);
      const node = await handleOcsUpload(spool, name, config.limits.ocs_pair_wait, (data) => processors.inventories.prompt(data),
        (ocsSignature) => ingestInventory(inventoryDeps, path, upName, { ocsSignature })) ?? await ingestInventory(inventoryDeps, path, upName);
      log.info({ file: name, nodeId: node.id, accepted: node.accepted }, 'inventory stored');
    },
  };
  // Files that killed the server while ingested: quarantined after [processing] quarantine_after.
  const spoolRoot = join(config.general.data_dir, 'spool');
  const ledgers = {} as Record<SpoolKind, AttemptLedger>;
  for (const kind of SPOOL_KINDS) {
    ledgers[kind] = new AttemptLedger(join(spoolRoot, 'attempts', `${kind}.log`), p.quarantine_after, join(spoolRoot, 'quarantine', kind));
    ledgers[kind].open();
  }
  for (const kind of SPOOL_KINDS) {
    processors[kind] = new SpoolProcessor({
      ledger: ledgers[kind],
      kind, spool, log,
      // A run log's handler waits for its batch's commit: enough of them in flight to fill one.
      concurrency: kind === 'reports' ? Math.max(p.concurrency, runLogs.inFlightHint) : p.concurrency,
      catchupIntervalMs: p.catchup_interval,
      retryMinMs: p.retry_min,
      retryMaxMs: p.retry_max,
      handle: handlers[kind],
    });
    processors[kind].on('processed', (e: ProcessedEvent) => count(kind, e));
  }
  const written = (name: string, data: Buffer): void => {
    processors.reports.expect(name);
    recent.put(name, data);
  };
  return {
    spool, processors, counters,
    app: {
      // Taken at once rather than when inotify says so, and without reading the file back.
      onAccepted: (kind, name) => processors[kind].notify(name),
      runLogsInMemory: { keepBytes: 1024 * 1024, onWritten: written },
      // Relays send their run logs up in batches, ingested from memory (ingest/batch.ts).
      takeBatch: batchTaker({
        spool, runLogs, log, maxInMemory: p.max_in_memory, written, ledger: ledgers.reports,
        spooled: (kind, name) => processors[kind].notify(name),
        processed: (e) => count(e.kind, e),
      }),
      ingested: (kind, name, ms) => settled.wait(kind, name, ms),
    },
    async start() {
      for (const kind of SPOOL_KINDS) await processors[kind].start();
    },
    async stop() {
      for (const kind of SPOOL_KINDS) await processors[kind].stop();
      for (const kind of SPOOL_KINDS) ledgers[kind].close();
      await runLogs.close();
      await inventoryPool.close();
    },
  };
}
