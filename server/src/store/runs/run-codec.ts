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
import { compressSync, decompress } from '@capstan/shared/envelope/codec';
import { zstdCompress, zstdCompressWithBase, zstdDecompressWithBase } from '@capstan/shared/envelope/zstd';
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import type { RunSummaryOutcome } from '../store.js';
import { unpackOutcomes, type OnUnreadable } from './outcomes.js';
import { parseRfc3339 } from '../time.js';

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

/** The node-day of any RFC 3339 time (a run's start as reported, a file name's), null when it is none. */
export function dayOf(time: string): string | null {
  const ms = parseRfc3339(time);
  return ms === undefined ? null : runDay(new Date(ms).toISOString());
}

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

/** A stored run's log as a store reads it: the bytes as stored (a run with no base), or its text. */
export type StoredLog = { raw: Buffer } | { text: Buffer };

/**
 * `decode`'s result, or ERR_RUN_UNREADABLE when it throws: run `runId`'s stored bytes, or its
 * base's, are damaged (on disk, or by hand). Said apart from a bad request, and from a bug.
 */
export function readLog<T>(runId: number, decode: () => T): T {
  try {
    return decode();
  } catch (err) {
    throw unreadableLog(runId, err);
  }
}

function unreadableLog(runId: number, err: unknown): Error {
  const why = err instanceof Error ? err.message : String(err);
  return capstanError('ERR_RUN_UNREADABLE', `run ${runId}'s stored log cannot be read: ${why}`, { details: { run_id: runId } });
}

/** getRunLog: the log compressed alone (zstd), as it is stored when it has no base. */
export function logCompressed(log: StoredLog): Buffer {
  return 'raw' in log ? log.raw : compressSync(log.text, 'zstd');
}

/** getRunLogText: the log's text, refused past `maxBytes` (ERR_DECOMPRESSED_TOO_LARGE). */
export async function logText(runId: number, log: StoredLog, maxBytes: number): Promise<Buffer> {
  if ('raw' in log) {
    return decompress(log.raw, 'zstd', { maxBytes }).catch((err: unknown) => {
      throw isCapstanError(err) && err.code === 'ERR_DECOMPRESS' ? unreadableLog(runId, err) : err;
    });
  }
  if (log.text.length > maxBytes) throw capstanError('ERR_DECOMPRESSED_TOO_LARGE', `run log larger than ${maxBytes} bytes`);
  return log.text;
}

export function decodeRunOutcomes(base: BaseTexts, frame: Buffer): RunSummaryOutcome[] {
  return JSON.parse(zstdDecompressWithBase(frame, base.outcomes, MAX_TEXT).toString('utf8')) as RunSummaryOutcome[];
}

/** `b` in shared memory: a copy unless it is there already (a worker thread's reply). */
function inShared(b: Buffer): Buffer {
  if (b.buffer instanceof SharedArrayBuffer) return b;
  const s = Buffer.from(new SharedArrayBuffer(b.length));
  b.copy(s);
  return s;
}

interface CachedBase extends BaseTexts {
  /** `<node id>\n<day>`, when known: the key of `ids`. */
  nodeDay?: string;
}

/**
 * Decoded bases, least recently used out first once `maxBytes` is exceeded, with the base id of
 * each node-day they belong to. Their texts are kept in shared memory: the ingest hands them to
 * its worker threads, which encode a run against them off the event loop (RunInsert.against).
 */
export class BaseCache {
  private readonly map = new Map<number, CachedBase>();
  private readonly ids = new Map<string, number>();
  private bytes = 0;
  /** Bases found unreadable and told of: each is told once per process (bounded). */
  private readonly toldOf = new Set<number>();
  constructor(
    private readonly maxBytes = 64 * 1024 * 1024,
    /** Told of a base a write could not read (readable). */
    private readonly onUnreadable?: OnUnreadable,
  ) {}

  get(id: number): BaseTexts | undefined {
    const t = this.map.get(id);
    if (t) {
      this.map.delete(id);
      this.map.set(id, t);
    }
    return t;
  }

  /** The id of the base of `nodeId`'s runs on `day`, when it is cached. */
  idOf(nodeId: string, day: string): number | undefined {
    return this.ids.get(`${nodeId}\n${day}`);
  }

  set(id: number, t: BaseTexts, nodeDay?: { nodeId: string; day: string }): BaseTexts {
    const had = this.map.get(id);
    if (had) return had;
    const entry: CachedBase = { log: inShared(t.log), outcomes: inShared(t.outcomes) };
    if (nodeDay) {
      entry.nodeDay = `${nodeDay.nodeId}\n${nodeDay.day}`;
      this.ids.set(entry.nodeDay, id);
    }
    this.map.set(id, entry);
    this.bytes += entry.log.length + entry.outcomes.length;
    for (const [k, v] of this.map) {
      if (this.bytes <= this.maxBytes) break;
      this.map.delete(k);
      if (v.nodeDay !== undefined && this.ids.get(v.nodeDay) === k) this.ids.delete(v.nodeDay);
      this.bytes -= v.log.length + v.outcomes.length;
    }
    return entry;
  }

  /**
   * For a write: base `id` of `nodeDay` from the cache, else decoded from `row` (callers ask `get`
   * first, so that a cached base costs no read of its row); undefined when its bytes cannot be
   * read, the opener told (once per base). A damaged base must not refuse its node's runs for the
   * rest of the day (nor a batch of other nodes' runs with them): the caller stores them on their
   * own instead (standalone), and they read back whole.
   */
  readable(id: number, row: BaseRow, nodeDay: { nodeId: string; day: string }): BaseTexts | undefined {
    const known = this.get(id);
    if (known) return known;
    let texts: BaseTexts;
    try {
      texts = decodeBase(row);
    } catch (err) {
      if (!this.toldOf.has(id)) {
        if (this.toldOf.size >= 10_000) this.toldOf.clear();
        this.toldOf.add(id);
        this.onUnreadable?.({ value: 'run base', node_id: nodeDay.nodeId, day: nodeDay.day, base_id: id, error: (err as Error).message });
      }
      return undefined;
    }
    return this.set(id, texts, nodeDay);
  }

  /** The base `id`, decoding `row` (when the cache does not have it); throws when it cannot be read. */
  texts(id: number, row: () => BaseRow | undefined, nodeDay?: { nodeId: string; day: string }): BaseTexts | undefined {
    const t = this.get(id);
    if (t) return t;
    const r = row();
    return r ? this.set(id, decodeBase(r), nodeDay) : undefined;
  }
}

/**
 * A run stored on its own, as runs were before bases: its log compressed alone, its outcomes
 * packed. For a run whose node-day's base cannot be read (BaseCache.readable).
 */
export function standalone(log: Buffer, packed: Buffer): { base_id: null; log: Buffer; outcomes: Buffer } {
  return { base_id: null, log: zstdCompress(log), outcomes: packed };
}

/**
 * The run's two texts against its base `id` with `texts`: what the caller encoded already when
 * it was made against that very base (RunInsert.against), else encoded here.
 */
export function encodeAgainst(id: number, texts: BaseTexts, log: Buffer, outcomesJson: Buffer, against?: { base_id: number; log: Buffer; outcomes: Buffer }): { base_id: number; log: Buffer; outcomes: Buffer } {
  if (against && against.base_id === id) return { base_id: id, log: against.log, outcomes: against.outcomes };
  const enc = encodeRun(texts, log, outcomesJson);
  return { base_id: id, log: enc.log, outcomes: enc.outcomes };
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
