/**
 * Runs on SQLite: one row per run, its log and outcomes kept against its node-day's base
 * (run-codec.ts). Storing a run also moves its node, its changes and its compliance (their
 * parts), all in the run's transaction; a batch shares one transaction, a savepoint per run.
 */
import { decompress } from '@capstan/shared/envelope/codec';
import { capstanError } from '@capstan/shared/errors';
import { type SqliteDb, sqliteRows } from '../sqlite/db.js';
import { storeError } from '../errors.js';
import { checkPaging, checkRun } from '../input.js';
import type { SqliteChanges } from '../changes/sqlite.js';
import type { SqliteCompliance } from '../compliance/sqlite.js';
import type { SqliteNodes } from '../nodes/sqlite.js';
import type { SqliteEvents } from '../events/sqlite.js';
import type { StoreRules } from '../rules.js';
import type { Page } from '../store.js';
import { runRange } from '../time.js';
import { UNPACKED_PLACEHOLDER, outcomesOrReason, type OnUnreadable } from './outcomes.js';
import { RUN_COLUMNS, runFromRow } from './rows.js';
import {
  BaseCache, decodeRunLog, encodeAgainst, encodeBase, logCompressed, logText, readLog, runDay, standalone, type BaseRow, type BaseTexts, type StoredLog,
} from './run-codec.js';
import type { CompactProgress, InsertRunResult, RunBase, RunBatchResult, RunInsert, RunRange, RunRecord, RunStore } from './types.js';

export class SqliteRuns implements RunStore {
  /** Decoded node-day bases (run-codec.ts). */
  private readonly bases: BaseCache;

  constructor(
    private readonly db: SqliteDb,
    private readonly nodes: SqliteNodes,
    private readonly compliance: SqliteCompliance,
    private readonly changes: SqliteChanges,
    private readonly events: SqliteEvents,
    private readonly rules: StoreRules,
    runBaseCacheBytes?: number,
    onUnreadable?: OnUnreadable,
  ) {
    this.bases = new BaseCache(runBaseCacheBytes, onUnreadable);
  }

  async insertRun(run: RunInsert): Promise<InsertRunResult> {
    const checked = checkRun(run);
    return this.db.write('insertRun', () => this.runTx(run, checked));
  }

  async insertRuns(runs: RunInsert[]): Promise<RunBatchResult[]> {
    // Bad input fails its own run before any SQL; the rest share one transaction (one commit and
    // one fsync of the WAL for the batch), each in a savepoint so one refusal undoes only itself.
    const checked = runs.map((run): RunBatchResult | ReturnType<typeof checkRun> => {
      try {
        return checkRun(run);
      } catch (error) {
        return { ok: false, error };
      }
    });
    const each = this.db.savepoint((run: RunInsert, c: ReturnType<typeof checkRun>) => this.runTx(run, c));
    return this.db.write('insertRuns', () => runs.map((run, i): RunBatchResult => {
      const c = checked[i]!;
      if ('ok' in c) return c;
      try {
        return { ok: true, result: each(run, c) };
      } catch (error) {
        return { ok: false, error: storeError('insertRun', error) };
      }
    }));
  }

  /** insertRun's work, inside the caller's write transaction. */
  private runTx(run: RunInsert, checked: ReturnType<typeof checkRun>): InsertRunResult {
    const { startedUtc, receivedAt, counts, packed, changes } = checked;
    const node = this.nodes.node(run.node_id);
    if (!node) throw capstanError('ERR_NODE_UNKNOWN', `node ${run.node_id} is not registered`);
    const stored = run.log_text
      ? this.againstBase(run.node_id, startedUtc, run.log_text, run.outcomes, run.outcomes_json, run.against) ?? standalone(run.log_text, packed)
      : { base_id: null, log: run.log_compressed!, outcomes: packed };
    const ins = this.db.stmt(`INSERT INTO runs (node_id, started_at, started_at_utc, config_id, complete,
        report_count, counts, outcomes, file_name, sha256, received_at, log_compressed, outcomes_packed, base_id)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (node_id, started_at_utc) DO NOTHING`)
      .run(run.node_id, run.started_at, startedUtc, run.config_id ?? null, run.complete ? 1 : 0, run.report_count,
        counts, UNPACKED_PLACEHOLDER, run.file_name, run.sha256, receivedAt, stored.log, stored.outcomes, stored.base_id);
    if (ins.changes === 0) {
      const dup = this.db.stmt('SELECT id FROM runs WHERE node_id = ? AND started_at_utc = ?')
        .get(run.node_id, startedUtc) as { id: number };
      return { inserted: false, reason: 'duplicate', id: dup.id };
    }
    const id = Number(ins.lastInsertRowid);
    this.changes.runStored(run, id, startedUtc, changes);
    const after = this.nodes.runStored(node, startedUtc, run.config_id ?? null, receivedAt);
    const answered = this.rules.events.answering(node, after, receivedAt);
    if (answered) this.events.write([answered]);
    this.compliance.runStored(node, run, id, startedUtc, receivedAt, packed);
    return { inserted: true, id };
  }

  /**
   * A run's log and outcomes against its node-day's base, which is made from this run when the
   * day has none yet (run-codec.ts); null when that base cannot be read (BaseCache.readable).
   */
  private againstBase(
    nodeId: string, startedUtc: string, log: Buffer, outcomes: RunInsert['outcomes'], outcomesJson?: Buffer, against?: RunInsert['against'],
  ): { base_id: number; log: Buffer; outcomes: Buffer } | null {
    const day = runDay(startedUtc);
    const nodeDay = { nodeId, day };
    const json = outcomesJson ?? Buffer.from(JSON.stringify(outcomes), 'utf8');
    const found = this.db.stmt('SELECT id FROM run_bases WHERE node_id = ? AND day = ?').pluck().get(nodeId, day) as number | undefined;
    let id: number;
    let texts: BaseTexts | undefined;
    if (found === undefined) {
      texts = { log, outcomes: json };
      const row = encodeBase(texts);
      id = Number(this.db.stmt('INSERT INTO run_bases (node_id, day, log_compressed, outcomes_packed) VALUES (?, ?, ?, ?)')
        .run(nodeId, day, row.log_compressed, row.outcomes_packed).lastInsertRowid);
      this.bases.set(id, texts, nodeDay);
    } else {
      id = found;
      texts = this.bases.get(id) ?? this.bases.readable(id, this.baseRow(id)!, nodeDay);
      if (!texts) return null;
    }
    return encodeAgainst(id, texts, log, json, against);
  }

  private baseRow(id: number): BaseRow | undefined {
    return this.db.stmt('SELECT log_compressed, outcomes_packed FROM run_bases WHERE id = ?').get(id) as BaseRow | undefined;
  }

  async getRunBase(nodeId: string, day: string): Promise<RunBase | null> {
    const known = this.bases.idOf(nodeId, day);
    const cached = known === undefined ? undefined : this.bases.get(known);
    if (cached) return { id: known!, day, log: cached.log, outcomes: cached.outcomes };
    return this.db.read('getRunBase', () => {
      const id = this.db.stmt('SELECT id FROM run_bases WHERE node_id = ? AND day = ?').pluck().get(nodeId, day) as number | undefined;
      const texts = id === undefined ? undefined : this.bases.get(id) ?? this.bases.readable(id, this.baseRow(id)!, { nodeId, day });
      return texts ? { id: id!, day, log: texts.log, outcomes: texts.outcomes } : null;
    });
  }

  async listRuns(nodeId: string, page: number, perPage: number, range: RunRange = {}): Promise<Page<RunRecord>> {
    const { limit, offset } = checkPaging(page, perPage);
    const { from, to } = runRange(range);
    const where = `node_id = ?${from ? ' AND started_at_utc >= ?' : ''}${to ? ' AND started_at_utc < ?' : ''}`;
    const values = [nodeId, ...(from ? [from] : []), ...(to ? [to] : [])];
    return this.db.read('listRuns', () => {
      const { n } = this.db.stmt(`SELECT count(*) AS n FROM runs WHERE ${where}`).get(...values) as { n: number };
      // (node_id, started_at_utc) is unique, so this order is total and paging is stable.
      const rows = this.db.stmt(`SELECT ${RUN_COLUMNS.map((c) => `r.${c}`).join(', ')}, r.outcomes_packed, r.base_id, b.outcomes_packed AS base_outcomes
        FROM runs r LEFT JOIN run_bases b ON b.id = r.base_id WHERE ${where.replace(/started_at_utc/g, 'r.started_at_utc').replace('node_id', 'r.node_id')}
        ORDER BY r.started_at_utc DESC LIMIT ? OFFSET ?`).all(...values, limit, offset) as Record<string, unknown>[];
      return { data: rows.map((r) => runFromRow(r, this.bases, sqliteRows)), total: n };
    });
  }

  /** The stored log of a run: the bytes as stored (no base), or its text (with one). */
  private runLog(runId: number): StoredLog | null {
    if (!Number.isSafeInteger(runId)) return null;
    return this.db.read('getRunLog', () => {
      const row = this.db.stmt('SELECT log_compressed, base_id FROM runs WHERE id = ?').get(runId) as { log_compressed: Buffer; base_id: number | null } | undefined;
      if (!row) return null;
      if (row.base_id === null) return { raw: row.log_compressed };
      const base = readLog(runId, () => this.bases.texts(row.base_id!, () => this.baseRow(row.base_id!)));
      if (!base) throw capstanError('ERR_INTERNAL', `run ${runId} refers to base ${row.base_id}, which is gone`);
      return { text: readLog(runId, () => decodeRunLog(base, row.log_compressed)) };
    });
  }

  async getRunLog(runId: number): Promise<Buffer | null> {
    const log = this.runLog(runId);
    return log && logCompressed(log);
  }

  async getRunLogText(runId: number, maxBytes: number): Promise<Buffer | null> {
    const log = this.runLog(runId);
    return log && logText(runId, log, maxBytes);
  }

  async compactRuns(limit: number): Promise<CompactProgress> {
    // Read and decompressed outside the write transaction (zstd of a page of runs is async);
    // each row is converted only if it is still whole when written.
    const cursor = this.db.read('compactRuns', () => Number(this.db.stmt("SELECT value FROM registry_counters WHERE name = 'runs_compacted_through'").pluck().get() ?? 0));
    const rows = this.db.read('compactRuns', () => this.db.stmt(`SELECT id, node_id, started_at_utc, log_compressed, outcomes, outcomes_packed
      FROM runs WHERE id > ? AND base_id IS NULL ORDER BY id LIMIT ?`).all(cursor, limit)) as Array<Record<string, unknown>>;
    const texts = await Promise.all(rows.map((r) => decompress(r.log_compressed as Buffer, 'zstd', { maxBytes: 256 * 1024 * 1024 }).catch(() => null)));
    let converted = 0;
    const last = rows.length ? (rows[rows.length - 1]!.id as number) : cursor;
    this.db.write('compactRuns', () => {
      const upd = this.db.stmt('UPDATE runs SET log_compressed = ?, outcomes_packed = ?, outcomes = ?, base_id = ? WHERE id = ? AND base_id IS NULL');
      rows.forEach((r, i) => {
        // A run whose log or outcomes (or its day's base) cannot be read is left whole (skipped), not failed: the cursor moves past it.
        const text = texts[i];
        const outcomes = text ? outcomesOrReason(r.outcomes_packed, r.outcomes) : '';
        if (!text || typeof outcomes === 'string') return;
        const s = this.againstBase(r.node_id as string, r.started_at_utc as string, text, outcomes);
        if (!s) return; // its node-day's base cannot be read: left as it is
        converted += upd.run(s.log, s.outcomes, UNPACKED_PLACEHOLDER, s.base_id, r.id).changes;
      });
      this.db.stmt("UPDATE registry_counters SET value = ? WHERE name = 'runs_compacted_through'").run(last);
    });
    // The highest id, not a count of what is left: counting would scan the table at every batch.
    const maxId = this.db.read('compactRuns', () => Number(this.db.stmt('SELECT coalesce(max(id), 0) FROM runs').pluck().get()));
    return { converted, skipped: rows.length - converted, through_id: last, max_id: maxId, done: rows.length < limit };
  }
}
