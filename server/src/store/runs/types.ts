/**
 * Runs in the registry. A run is one record (RUDDER writes one row per report line, which is what
 * limits its ingest): the verified run log, kept against its node-day's base (run-codec.ts), plus
 * its parsed summary. Report-level reads decompress and re-parse the stored log.
 */
import type { RunOutcome } from '@capstan/shared/compliance/compute';
import { CHECKED, lookup, REFUSE, type NulRules } from '../guard.js';
import type { ChangeInput } from '../changes/types.js';
import type { FindingInput } from '../findings/types.js';
import type { Page } from '../store.js';

/** One component's outcome in a run (shared compliance module). */
export type RunSummaryOutcome = RunOutcome;

/** What a run is, as the ingest hands it over and as it is listed back. */
export interface RunFields {
  node_id: string;
  /** The run's start time (first report's start datetime), ISO 8601 with offset as reported. */
  started_at: string;
  config_id: string | null;
  complete: boolean;
  report_count: number;
  /** Reports by event type, e.g. {"result_success": 35}. */
  counts: Record<string, number>;
  outcomes: RunSummaryOutcome[];
  /** The file name it arrived under, and the sha256 hex of the bytes received. */
  file_name: string;
  sha256: string;
  received_at: string;
}

export interface RunInsert extends Omit<RunFields, 'outcomes'> {
  /**
   * The run's outcomes; or `outcomes_json` alone, which the store parses only when it needs them
   * as objects (to compute compliance): the ingest workers hand over the JSON, since copying the
   * objects across threads cost more than parsing them again.
   */
  outcomes?: RunSummaryOutcome[];
  /**
   * The verified run log text (S/MIME stripped), compressed by the caller (zstd): stored as
   * given and returned as given by getRunLog. Either this or `log_text`.
   */
  log_compressed?: Buffer;
  /**
   * The verified run log text itself: the store keeps it against the node-day's base (migration
   * 14, runs/run-codec.ts), ~5× smaller than compressed alone. The ingest gives this.
   */
  log_text?: Buffer;
  /**
   * `outcomes` already packed (runs/outcomes.ts: the packed JSON of exactly `outcomes`), by a
   * caller that did it off the event loop (the ingest workers). Absent: the store packs them.
   */
  outcomes_packed?: Buffer;
  /**
   * `JSON.stringify(outcomes)` as UTF-8, by a caller that made it off the event loop (the ingest
   * workers, which need it for `outcomes_packed`). The store encodes it against the node-day's
   * base; absent, the store makes it.
   */
  outcomes_json?: Buffer;
  /**
   * `log_text` and `outcomes_json` already encoded against the node-day's base `base_id` (what
   * runs/run-codec.ts encodeRun makes of them), by a caller that did it off the event loop (the
   * ingest workers, given the base by getRunBase). Used when `base_id` is still the run's base
   * when it is stored; otherwise the store encodes them itself.
   */
  against?: { base_id: number; log: Buffer; outcomes: Buffer };
  /** The changes the run reported (its repairs); stored with the run, labelled by the store. */
  changes?: ChangeInput[];
  /** The run's failing reports (audit non-compliances, errors): what a finding this run opens says. */
  findings?: FindingInput[];
}

/** A node-day's base (runs/run-codec.ts): its id, its day, and its two texts. */
export interface RunBase {
  id: number;
  day: string;
  log: Buffer;
  outcomes: Buffer;
}

/** One batch of compactRuns: what it did, how far it has looked (run ids), and whether it is done. */
export interface CompactProgress {
  converted: number;
  /** Looked at and left as they were (not zstd). */
  skipped: number;
  through_id: number;
  max_id: number;
  /** Nothing whole is left above through_id. */
  done: boolean;
}

/** A stored run (its log is read apart: getRunLog, getRunLogText). */
export interface RunRecord extends RunFields {
  id: number;
  /** Why, when the stored outcomes cannot be read (damaged bytes): `outcomes` is then empty. */
  outcomes_unreadable?: string;
}

/** A time range on a run's start, `from` inclusive, `to` exclusive; RFC 3339. */
export interface RunRange {
  from?: string;
  to?: string;
}

export type InsertRunResult = { inserted: true; id: number } | { inserted: false; reason: 'duplicate'; id: number };

/** One run of an insertRuns batch: its own result, or why it alone was refused. */
export type RunBatchResult = { ok: true; result: InsertRunResult } | { ok: false; error: unknown };

export interface RunStore {
  /**
   * Store a run and update the node's last run, config, contact and status in one transaction
   * (and its compliance, when the run is its newest complete one). A run with the same
   * (node_id, started_at instant) is a duplicate: nothing is written.
   */
  insertRun(run: RunInsert): Promise<InsertRunResult>;
  /**
   * insertRun for several runs in one transaction, so they share one commit (the ingest's group
   * commit). Each run succeeds or fails alone (savepoints): a refused run gets its error in its
   * slot and the others are stored. Rejects as a whole only when the transaction itself fails
   * (database down, commit failed): then none of them is stored.
   */
  insertRuns(runs: RunInsert[]): Promise<RunBatchResult[]>;
  /** Runs of a node, newest start first, optionally within a range of start times. */
  listRuns(nodeId: string, page: number, perPage: number, range?: RunRange): Promise<Page<RunRecord>>;
  /**
   * A run's log, zstd-compressed: the bytes stored for a run given `log_compressed`, a zstd frame
   * of the text for one given `log_text`. Null when the run is unknown.
   */
  getRunLog(runId: number): Promise<Buffer | null>;
  /**
   * A run's log text, decompressed (ERR_DECOMPRESSED_TOO_LARGE beyond `maxBytes`); null when the
   * run is unknown. What report-level reads use.
   */
  getRunLogText(runId: number, maxBytes: number): Promise<Buffer | null>;
  /**
   * Converts up to `limit` runs stored whole (before migration 14) to the node-day form, oldest
   * id first, one transaction per call; resumable (the last id looked at is kept in the
   * database). A run whose log is not a zstd frame is left as it is.
   */
  compactRuns(limit: number): Promise<CompactProgress>;
  /**
   * The base of a node's runs on `day` (UTC, YYYY-MM-DD), null while that day has none: for the
   * ingest to encode a run against it before the run is stored (RunInsert.against). Its texts
   * are in shared memory, so handing them to a worker thread copies nothing.
   */
  getRunBase(nodeId: string, day: string): Promise<RunBase | null>;
}

/** How each run method treats U+0000 (guard.ts): a run's summary is checked by input.ts checkRun, run by run. */
export const RUNS_NUL: NulRules<RunStore> = {
  insertRun: CHECKED,
  insertRuns: CHECKED,
  listRuns: lookup([0], () => ({ data: [], total: 0 })),
  getRunLog: REFUSE,
  getRunLogText: REFUSE,
  compactRuns: REFUSE,
  getRunBase: lookup([0], () => null),
};
