/**
 * Runs stored against their node-day's base (migration 14). A base holds one run's log text and
 * outcomes JSON, each zstd-compressed alone; a run holds its own log and outcomes JSON compressed
 * with the base's as dictionary, so what it repeats of the base costs almost nothing. Both stores
 * share this module: what is SQL stays in each store, the bytes are made and read here.
 *
 * Decoded bases are cached by id (ids are never reused, bases never change), bounded in bytes:
 * the ingest encodes every run of a node-day against the same base, and a page of runs reads
 * mostly one or two.
 */
import { zstdCompressWithBase, zstdDecompressWithBase } from '@capstan/shared';
import type { RunSummaryOutcome } from '../store.js';
import { unpackOutcomes } from './outcomes.js';

/** The plain texts of a base: the run log, and the outcomes' JSON. */
export interface BaseTexts {
  log: Buffer;
  outcomes: Buffer;
}

/** A base row as stored. */
export interface BaseRow {
  log_compressed: Buffer;
  outcomes_packed: Buffer;
}

/** Refuse to expand more than this from the database (a corrupt row must not exhaust memory). */
const MAX_TEXT = 256 * 1024 * 1024;
const NONE = Buffer.alloc(0);
/**
 * Levels: a run against its base at 1 (measured on 100-report runs: 648 B in ~40 µs; level 3
 * made 735 B in about the same time, level 5 698 B in ~100 µs); a base, made once a node-day, at 3.
 */
const RUN_LEVEL = 1;
const BASE_LEVEL = 3;

/** The UTC day of a run's start (ISO 8601 UTC text): the node-day its base is for. */
export const runDay = (startedUtc: string): string => startedUtc.slice(0, 10);

export function encodeBase(t: BaseTexts): BaseRow {
  return { log_compressed: zstdCompressWithBase(t.log, NONE, BASE_LEVEL), outcomes_packed: zstdCompressWithBase(t.outcomes, NONE, BASE_LEVEL) };
}

export function decodeBase(row: BaseRow): BaseTexts {
  return {
    log: zstdDecompressWithBase(row.log_compressed, NONE, MAX_TEXT),
    outcomes: zstdDecompressWithBase(row.outcomes_packed, NONE, MAX_TEXT),
  };
}

/** A run's two columns against its base. */
export function encodeRun(base: BaseTexts, log: Buffer, outcomesJson: Buffer): { log: Buffer; outcomes: Buffer } {
  return { log: zstdCompressWithBase(log, base.log, RUN_LEVEL), outcomes: zstdCompressWithBase(outcomesJson, base.outcomes, RUN_LEVEL) };
}

export function decodeRunLog(base: BaseTexts, frame: Buffer, maxBytes = MAX_TEXT): Buffer {
  return zstdDecompressWithBase(frame, base.log, maxBytes);
}

export function decodeRunOutcomes(base: BaseTexts, frame: Buffer): RunSummaryOutcome[] {
  return JSON.parse(zstdDecompressWithBase(frame, base.outcomes, MAX_TEXT).toString('utf8')) as RunSummaryOutcome[];
}

/** Decoded bases, least recently used out first once `maxBytes` is exceeded. */
export class BaseCache {
  private readonly map = new Map<number, BaseTexts>();
  private bytes = 0;
  constructor(private readonly maxBytes = 64 * 1024 * 1024) {}

  get(id: number): BaseTexts | undefined {
    const t = this.map.get(id);
    if (t) {
      this.map.delete(id);
      this.map.set(id, t);
    }
    return t;
  }

  set(id: number, t: BaseTexts): void {
    if (this.map.has(id)) return;
    this.map.set(id, t);
    this.bytes += t.log.length + t.outcomes.length;
    for (const [k, v] of this.map) {
      if (this.bytes <= this.maxBytes) break;
      this.map.delete(k);
      this.bytes -= v.log.length + v.outcomes.length;
    }
  }

  /** The base `id`, decoding `row` (when the cache does not have it). */
  texts(id: number, row: () => BaseRow | undefined): BaseTexts | undefined {
    let t = this.get(id);
    if (!t) {
      const r = row();
      if (!r) return undefined;
      t = decodeBase(r);
      this.set(id, t);
    }
    return t;
  }
}

/**
 * A run row's outcomes: against its base when it has one (`base_id`, with the base's outcomes
 * column selected as `base_outcomes` and its log as `base_log` or NULL), else the old columns.
 */
export function rowOutcomes(row: Record<string, unknown>, cache: BaseCache): RunSummaryOutcome[] {
  if (row.base_id === null || row.base_id === undefined) return unpackOutcomes(row.outcomes_packed, row.outcomes);
  const id = Number(row.base_id);
  const base = cache.get(id) ?? (row.base_outcomes
    ? { log: NONE, outcomes: zstdDecompressWithBase(row.base_outcomes as Buffer, NONE, MAX_TEXT) }
    : undefined);
  if (!base) throw new Error(`run ${String(row.id)} refers to base ${id}, which is gone`);
  // A base decoded for its outcomes only is not cached: the cache's entries are whole.
  return decodeRunOutcomes(base, row.outcomes_packed as Buffer);
}
