/**
 * The CPU half of a run log's ingest, with no store and no I/O: decompress → S/MIME verify
 * against the node's pinned certificate → parse → summary → recompress the verified text. It
 * runs in the ingest worker threads (runlog-worker.ts) so that the server's event loop keeps to
 * HTTP, files and the database; it is also what the in-process path calls directly.
 */
import { createHash } from 'node:crypto';
import { summarize } from '@capstan/shared/compliance/compute';
import { decompressBudgeted, DecompressBudget, type BudgetShare } from '@capstan/shared/envelope/budget';
import type { RunInfo } from '@capstan/shared/runlog/name';
import { isCompleteRun, parseRunLog, type RunLog } from '@capstan/shared/runlog/parse';
import { verifySmime } from '@capstan/shared/smime/verify';
import { packOutcomes } from '../store/runs/outcomes.js';
import { DEFAULT_CHANGE_LIMITS, extractChanges, type ChangeLimits } from './changes.js';
import type { RunBase, RunInsert } from '../store/store.js';
import { dayOf, encodeRun } from '../store/runs/run-codec.js';
import type { OcsLimits } from './ocs.js';

export interface IngestLimits {
  maxDecompressedBytes: number;
  maxReports: number;
  maxLineBytes: number;
  /** What is kept of a run's changes (ingest/changes.ts); the defaults when absent. */
  changes?: ChangeLimits;
  /** `[signatures] allow_sha1`. */
  allowSha1?: boolean;
  /** `[limits] max_clock_skew` (ms): runs dated further ahead of the server's clock are refused. */
  maxClockSkewMs?: number;
  /** `[limits] ocs_max_size`, `ocs_max_depth`, `ocs_max_elements` (RUDDER agents' inventories); the defaults when absent. */
  ocs?: OcsLimits;
  /**
   * `[processing] decompress_budget`, shared by every thread (envelope/budget.ts), and how long a
   * decompression waits for room in it; absent: no common bound (tests, tools).
   */
  budget?: BudgetShare;
  budgetWaitMs?: number;
}

/** How long a decompression waits for room in the budget by default. */
export const DEFAULT_BUDGET_WAIT_MS = 30_000;

/** This thread's view of the process's decompression budget (one per shared buffer). */
const views = new WeakMap<SharedArrayBuffer, DecompressBudget>();
export function budgetOf(limits: IngestLimits): DecompressBudget | undefined {
  const share = limits.budget;
  if (!share) return undefined;
  let b = views.get(share.sab);
  if (!b) views.set(share.sab, (b = new DecompressBudget(share.limitBytes, share)));
  return b;
}

/** Decompress an upload within the budget; `release()` once its output is done with. */
export function decompressUpload(raw: Buffer, compression: RunInfo['compression'], maxBytes: number, limits: IngestLimits) {
  return decompressBudgeted(raw, compression, maxBytes, budgetOf(limits), limits.budgetWaitMs ?? DEFAULT_BUDGET_WAIT_MS);
}

/** The default of `[limits] max_clock_skew`. */
export const DEFAULT_MAX_CLOCK_SKEW_MS = 10 * 60_000;

/** What a worker needs for one run log: the bytes as received and what the file name says. */
export interface PrepareJob {
  raw: Uint8Array;
  compression: RunInfo['compression'];
  nodeId: string;
  timestamp: string;
  certificate: string;
  limits: IngestLimits;
  /** The node's base for the day the run is of, when it has one: the run is encoded against it here. */
  base?: RunBase;
}

/** A run ready to insert, but for the time it was received (the main thread sets it). */
export type PreparedRun = Omit<RunInsert, 'received_at' | 'file_name'>;

/** The run's start: the control start report's start time, else the first report's. */
export function runStart(log: RunLog): string {
  const start = log.reports.find((r) => r.event_type === 'control' && r.component === 'start');
  return (start ?? log.reports[0]!).start_datetime;
}

export async function prepareRunLog(job: PrepareJob): Promise<PreparedRun> {
  const raw = Buffer.isBuffer(job.raw) ? job.raw : Buffer.from(job.raw.buffer, job.raw.byteOffset, job.raw.byteLength);
  const { limits } = job;
  const { out: signed, release } = await decompressUpload(raw, job.compression, limits.maxDecompressedBytes, limits);
  try {
    return prepareDecompressed(job, raw, signed);
  } finally {
    // The expanded text and what was parsed from it are garbage now (the run keeps its own copies).
    release();
  }
}

function prepareDecompressed(job: PrepareJob, raw: Buffer, signed: Buffer): PreparedRun {
  const { limits } = job;
  const verified = verifySmime(signed, [job.certificate], { maxBytes: limits.maxDecompressedBytes, allowSha1: limits.allowSha1 === true });
  const log = parseRunLog(verified.content, { node_id: job.nodeId, timestamp: job.timestamp }, {
    maxBytes: limits.maxDecompressedBytes,
    maxReports: limits.maxReports,
    maxLineBytes: limits.maxLineBytes,
  });
  const { counts, outcomes } = summarize(log.reports);
  const json = Buffer.from(JSON.stringify(outcomes), 'utf8');
  const started = runStart(log);
  const text = verified.content;
  // Against the day's base now, where the event loop would have done it while storing the run.
  const base = job.base;
  const against = base && dayOf(started) === base.day ? { base_id: base.id, ...encodeRun(base, text, json) } : undefined;
  return {
    node_id: job.nodeId,
    started_at: started,
    config_id: log.config_id,
    complete: isCompleteRun(log),
    report_count: log.reports.length,
    counts,
    outcomes,
    changes: extractChanges(log.reports, limits.changes ?? DEFAULT_CHANGE_LIMITS),
    // Packed here, off the event loop (~70 µs for 80 outcomes).
    outcomes_packed: packOutcomes(json),
    // The store encodes this JSON against the node-day's base: made once, here, not again on the event loop.
    outcomes_json: json,
    sha256: createHash('sha256').update(raw).digest('hex'),
    // The store keeps it against the node-day's base (store/runs/run-codec.ts).
    // A view into a larger buffer would cross to the main thread whole: copied to its own.
    log_text: text.byteLength === text.buffer.byteLength ? text : Buffer.from(text),
    ...(against && { against }),
  };
}
