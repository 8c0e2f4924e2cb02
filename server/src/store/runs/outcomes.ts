/**
 * A run's outcomes as both backends store them since migration 8: the JSON packed in
 * `outcomes_packed`, and `[]` in the old `outcomes` column. Rows from before keep their JSON and
 * no packed form. Packing is deterministic for the same JSON, so the steady-state check ("same
 * outcomes as the base run") compares packed bytes.
 *
 * Packed with zstd at level 1 (one frame with its size and a checksum). Rows written before hold
 * raw deflate (node:zlib), read by what they start with: a raw deflate stream cannot start with
 * zstd's magic number (its first block would be a stored block whose length check fails). zstd
 * costs ~45 µs for a run's ~14 KB of outcomes where deflate cost ~100–150 µs (most of it setting
 * up a new zlib stream per call), and packs smaller. After an upgrade a node's first run compares
 * zstd bytes against the deflate ones of its compliance row, so compliance is recomputed once.
 */
import { inflateRawSync } from 'node:zlib';
import { isZstdFrame, zstdCompress, zstdDecompressFrame } from '@capstan/shared/envelope/zstd';
import type { RunSummaryOutcome } from '../store.js';

/** What the old column holds for rows that have a packed form. */
export const UNPACKED_PLACEHOLDER = '[]';
/** Refuse to inflate more than this from the database (a corrupt row must not exhaust memory). */
const MAX_UNPACKED = 256 * 1024 * 1024;

export function packOutcomes(json: string | Buffer): Buffer {
  return zstdCompress(typeof json === 'string' ? Buffer.from(json, 'utf8') : json, 1);
}

/**
 * What a compliance row stores in `outcomes_packed`: the bytes already packed (a run's, or the row
 * being recomputed), else the packed JSON — or null for no outcomes, which reads back as `[]`
 * through the old column: a node with no run yet costs no deflate call (a 100,000-node policy
 * generation spent a tenth of its time packing `[]`).
 */
export function packedOrNull(outcomes: readonly RunSummaryOutcome[], packed?: Buffer | null): Buffer | null {
  if (packed) return packed;
  return outcomes.length === 0 ? null : packOutcomes(JSON.stringify(outcomes));
}

/**
 * The outcomes of a row: from `packed` when set, else from the old column (`legacy` is the JSON
 * text from SQLite, or the value node-pg parsed from jsonb).
 */
export function unpackOutcomes(packed: unknown, legacy: unknown): RunSummaryOutcome[] {
  if (packed !== null && packed !== undefined) {
    const bytes = packed as Buffer;
    const text = (isZstdFrame(bytes) ? zstdDecompressFrame(bytes, MAX_UNPACKED) : inflateRawSync(bytes, { maxOutputLength: MAX_UNPACKED })).toString('utf8');
    return JSON.parse(text) as RunSummaryOutcome[];
  }
  return (typeof legacy === 'string' ? JSON.parse(legacy) : legacy ?? []) as RunSummaryOutcome[];
}

/**
 * What the store tells its opener of a stored value it could not read (OpenStoreOptions.onUnreadable):
 * a node's compliance row's outcomes (read as none), or a node-day's run base (that day's next
 * runs stored on their own, run-codec.ts).
 */
export interface UnreadableValue {
  value: 'outcomes' | 'run base';
  node_id: string;
  /** A run base's day and id. */
  day?: string;
  base_id?: number;
  /** Why: the decompressor's or the JSON parser's message, or that it is not a list of outcomes. */
  error: string;
}
export type OnUnreadable = (what: UnreadableValue) => void;

/**
 * A node's compliance row's outcomes (its last run's, kept to judge the run again against a new
 * policy, and shown on the node's page): unpackOutcomes, or none when the stored value cannot be
 * read (damaged bytes, or not the JSON array packing makes). One damaged row must not refuse a
 * whole generation's write, nor the node's page: the run is judged as reporting nothing (every
 * component it was to report is missing, so the node claims no compliance it cannot show), the
 * opener is told, and the node's next run replaces the value.
 */
export function complianceOutcomes(nodeId: string, packed: unknown, legacy: unknown, onUnreadable?: OnUnreadable): RunSummaryOutcome[] {
  const outcomes = outcomesOrReason(packed, legacy);
  if (typeof outcomes !== 'string') return outcomes;
  onUnreadable?.({ value: 'outcomes', node_id: nodeId, error: outcomes });
  return [];
}

/** unpackOutcomes, or why the stored value cannot be read as a list of outcomes. */
export function outcomesOrReason(packed: unknown, legacy: unknown): RunSummaryOutcome[] | string {
  return readOutcomes(() => unpackOutcomes(packed, legacy));
}

/** What `read` gives when it is a list of outcomes; else why not (what it threw, or that it is not one). */
export function readOutcomes(read: () => unknown): RunSummaryOutcome[] | string {
  try {
    const outcomes = read();
    return Array.isArray(outcomes) && outcomes.every((o) => typeof o === 'object' && o !== null) ? outcomes : 'not a list of outcomes';
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}

/** A run's outcomes as objects: as given, or parsed from the JSON the ingest gave instead. */
export function runOutcomes(run: { outcomes?: RunSummaryOutcome[]; outcomes_json?: Buffer }): RunSummaryOutcome[] {
  return run.outcomes ?? (JSON.parse(run.outcomes_json!.toString('utf8')) as RunSummaryOutcome[]);
}
