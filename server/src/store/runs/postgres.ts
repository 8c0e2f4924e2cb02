/**
 * Runs on PostgreSQL: one row per run in day partitions (migration 2), its log and outcomes kept
 * against its node-day's base (run-codec.ts). Storing a run locks its node's row first, so two
 * servers ingesting the same run queue on it and the second one's `ON CONFLICT DO NOTHING` sees
 * the first one's run: a duplicate. Storing a run also moves its node, its changes and its
 * compliance (their parts), all in the run's transaction. Hot statements are named, so node-pg
 * prepares them once per connection.
 */
import type pg from 'pg';
import { decompress } from '@capstan/shared/envelope/codec';
import { capstanError, isTransient } from '@capstan/shared/errors';
import { iso, type PostgresDb, postgresRows } from '../postgres/db.js';
import { checkPaging, checkRun } from '../input.js';
import type { PostgresChanges } from '../changes/postgres.js';
import type { PostgresCompliance } from '../compliance/postgres.js';
import type { PostgresNodes } from '../nodes/postgres.js';
import type { PostgresEvents } from '../events/postgres.js';
import type { EventInsert } from '../events/types.js';
import type { StoreRules } from '../rules.js';
import type { Page } from '../store.js';
import { runRange } from '../time.js';
import { UNPACKED_PLACEHOLDER, outcomesOrReason, type OnUnreadable } from './outcomes.js';
import { RUN_COLUMNS, runFromRow } from './rows.js';
import {
  BaseCache, decodeRunLog, encodeAgainst, encodeBase, logCompressed, logText, readLog, runDay, standalone, type BaseRow, type BaseTexts, type StoredLog,
} from './run-codec.js';
import { storeRound, type RunBatchDeps } from './postgres-batch.js';
import type { CompactProgress, InsertRunResult, RunBase, RunBatchResult, RunInsert, RunRange, RunRecord, RunStore } from './types.js';

export class PostgresRuns implements RunStore {
  /** Decoded node-day bases (run-codec.ts). */
  private readonly bases: BaseCache;
  private readonly batch: RunBatchDeps;

  constructor(
    private readonly db: PostgresDb,
    private readonly nodes: PostgresNodes,
    private readonly compliance: PostgresCompliance,
    private readonly changes: PostgresChanges,
    private readonly events: PostgresEvents,
    private readonly rules: StoreRules,
    runBaseCacheBytes?: number,
    onUnreadable?: OnUnreadable,
  ) {
    this.bases = new BaseCache(runBaseCacheBytes, onUnreadable);
    this.batch = { db, nodes, compliance, changes, rules, bases: this.bases };
  }

  async insertRun(run: RunInsert): Promise<InsertRunResult> {
    const checked = checkRun(run);
    return this.db.tx('insertRun', async (c) => {
      const sink: EventInsert[] = [];
      const r = await this.runTx(c, run, checked, sink);
      await this.events.write(c, sink);
      return r;
    });
  }

  async insertRuns(runs: RunInsert[]): Promise<RunBatchResult[]> {
    // Bad input fails its own run before any SQL; the rest share one transaction (one WAL flush
    // at commit). No savepoint per run (two more round trips each): when one run is refused the
    // batch rolls back and its runs are stored again one transaction each, so only that one fails.
    const out: RunBatchResult[] = new Array(runs.length);
    const todo: number[] = [];
    const checked = new Map<number, ReturnType<typeof checkRun>>();
    runs.forEach((run, i) => {
      try {
        checked.set(i, checkRun(run));
        todo.push(i);
      } catch (error) {
        out[i] = { ok: false, error };
      }
    });
    if (todo.length === 0) return out;
    // Node rows are locked in id order, so two batches on other connections cannot deadlock.
    todo.sort((a, b) => (runs[a]!.node_id < runs[b]!.node_id ? -1 : runs[a]!.node_id > runs[b]!.node_id ? 1 : a - b));
    try {
      await this.db.tx('insertRuns', async (c) => {
        const nodes = await this.nodes.lockNodes('insertRuns', c, [...new Set(todo.map((i) => runs[i]!.node_id))]);
        // Round k holds each node's k-th run of the batch (postgres-batch.ts).
        const rounds: number[][] = [];
        const seen = new Map<string, number>();
        for (const i of todo) {
          const id = runs[i]!.node_id;
          if (!nodes.has(id)) {
            out[i] = { ok: false, error: capstanError('ERR_NODE_UNKNOWN', `node ${id} is not registered`) };
            continue;
          }
          const k = seen.get(id) ?? 0;
          seen.set(id, k + 1);
          (rounds[k] ??= []).push(i);
        }
        const sinks = new Map<number, EventInsert[]>();
        for (const round of rounds) {
          const items = round.map((i) => {
            const sink: EventInsert[] = [];
            sinks.set(i, sink);
            return { run: runs[i]!, checked: checked.get(i)!, node: nodes.get(runs[i]!.node_id)!, sink };
          });
          const results = await storeRound(this.batch, c, items, nodes);
          round.forEach((i, k) => (out[i] = { ok: true, result: results[k]! }));
        }
        // Last: the events' lock is held from here to the commit, not for the batch.
        await this.events.write(c, todo.flatMap((i) => sinks.get(i) ?? []));
      });
      return out;
    } catch (err) {
      // The database is down or the commit failed: the whole batch is retried later.
      if (isTransient(err)) throw err;
    }
    for (const i of todo) {
      try {
        out[i] = { ok: true, result: await this.insertRun(runs[i]!) };
      } catch (error) {
        if (isTransient(error)) throw error;
        out[i] = { ok: false, error };
      }
    }
    return out;
  }

  /** insertRun's work, inside the caller's transaction. */
  private async runTx(c: pg.PoolClient, run: RunInsert, checked: ReturnType<typeof checkRun>, sink: EventInsert[]): Promise<InsertRunResult> {
    const { startedUtc, receivedAt, counts, packed, changes } = checked;
    const what = 'insertRun';
    const node = await this.nodes.lockNode(what, c, run.node_id);
    if (!node) throw capstanError('ERR_NODE_UNKNOWN', `node ${run.node_id} is not registered`);
    const stored = run.log_text
      ? await this.againstBase(c, run.node_id, startedUtc, run.log_text, run.outcomes, run.outcomes_json, run.against) ?? standalone(run.log_text, packed)
      : { base_id: null, log: run.log_compressed!, outcomes: packed };
    const ins = await this.db.query<{ id: string }>(what, c, {
      name: 'run_insert',
      text: `INSERT INTO runs (node_id, started_at, started_at_utc, config_id, complete, report_count,
          counts, outcomes, file_name, sha256, received_at, log_compressed, outcomes_packed, base_id)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
        ON CONFLICT (node_id, started_at_utc) DO NOTHING RETURNING id`,
      values: [run.node_id, run.started_at, startedUtc, run.config_id ?? null, run.complete, run.report_count,
        counts, UNPACKED_PLACEHOLDER, run.file_name, run.sha256, receivedAt, stored.log, stored.outcomes, stored.base_id],
    });
    if (ins.rowCount === 0) {
      const dup = await this.db.query<{ id: string }>(what, c, {
        name: 'run_find', text: 'SELECT id FROM runs WHERE node_id = $1 AND started_at_utc = $2', values: [run.node_id, startedUtc],
      });
      return { inserted: false, reason: 'duplicate', id: Number(dup.rows[0]!.id) };
    }
    const id = Number(ins.rows[0]!.id);
    await this.changes.runStored(c, run, id, startedUtc, changes, sink);
    const after = await this.nodes.runStored(what, c, node, startedUtc, run.config_id ?? null, receivedAt);
    const answered = this.rules.events.answering(node, after, receivedAt);
    if (answered) sink.push(answered);
    await this.compliance.runStored(what, c, node, run, id, startedUtc, receivedAt, packed, sink);
    return { inserted: true, id };
  }

  /**
   * A run's log and outcomes against its node-day's base, made from this run when the day has
   * none yet (run-codec.ts). The node's row is locked by the caller, so two servers never
   * make the same node-day's base at once; ON CONFLICT is there all the same. Null when that
   * base cannot be read (BaseCache.readable).
   */
  private async againstBase(
    c: pg.PoolClient, nodeId: string, startedUtc: string, log: Buffer, outcomes: RunInsert['outcomes'], outcomesJson?: Buffer, against?: RunInsert['against'],
  ): Promise<{ base_id: number; log: Buffer; outcomes: Buffer } | null> {
    const what = 'insertRun';
    const day = runDay(startedUtc);
    const nodeDay = { nodeId, day };
    const json = outcomesJson ?? Buffer.from(JSON.stringify(outcomes), 'utf8');
    const find = () => this.db.query<{ id: string }>(what, c, {
      name: 'run_base_find', text: 'SELECT id FROM run_bases WHERE node_id = $1 AND day = $2', values: [nodeId, day],
    });
    let found = (await find()).rows[0];
    let texts: BaseTexts | undefined;
    if (!found) {
      const row = encodeBase({ log, outcomes: json });
      const ins = await this.db.query<{ id: string }>(what, c, {
        name: 'run_base_insert',
        text: `INSERT INTO run_bases (node_id, day, log_compressed, outcomes_packed) VALUES ($1, $2, $3, $4)
          ON CONFLICT (node_id, day) DO NOTHING RETURNING id`,
        values: [nodeId, day, row.log_compressed, row.outcomes_packed],
      });
      found = ins.rows[0] ?? (await find()).rows[0];
      if (ins.rows[0]) texts = this.bases.set(Number(found!.id), { log, outcomes: json }, nodeDay);
    }
    const id = Number(found!.id);
    texts ??= this.bases.get(id) ?? this.bases.readable(id, await this.baseRow(c, id), nodeDay);
    return texts ? encodeAgainst(id, texts, log, json, against) : null;
  }

  private async baseRow(c: pg.PoolClient | pg.Pool, id: number): Promise<BaseRow> {
    const { rows } = await this.db.query<BaseRow>('runBase', c, {
      name: 'run_base_get', text: 'SELECT log_compressed, outcomes_packed FROM run_bases WHERE id = $1', values: [id],
    });
    return rows[0]!;
  }

  async getRunBase(nodeId: string, day: string): Promise<RunBase | null> {
    const known = this.bases.idOf(nodeId, day);
    const cached = known === undefined ? undefined : this.bases.get(known);
    if (cached) return { id: known!, day, log: cached.log, outcomes: cached.outcomes };
    const { rows } = await this.db.query<{ id: string }>('getRunBase', this.db.pool, {
      name: 'run_base_find', text: 'SELECT id FROM run_bases WHERE node_id = $1 AND day = $2', values: [nodeId, day],
    });
    if (!rows[0]) return null;
    const id = Number(rows[0].id);
    // Cached by a read of one of its runs (not by node-day): no read of its row again.
    let texts = this.bases.get(id);
    if (!texts) {
      const row = await this.baseRow(this.db.pool, id);
      if (!row) return null;
      texts = this.bases.readable(id, row, { nodeId, day });
    }
    return texts ? { id, day, log: texts.log, outcomes: texts.outcomes } : null;
  }

  async listRuns(nodeId: string, page: number, perPage: number, range: RunRange = {}): Promise<Page<RunRecord>> {
    const { limit, offset } = checkPaging(page, perPage);
    const { from, to } = runRange(range);
    const { rows } = await this.db.query('listRuns', this.db.pool, {
      name: 'runs_list',
      // (node_id, started_at_utc) is unique, so this order is total and paging is stable.
      text: `SELECT t.total, r.* FROM
          (SELECT count(*) AS total FROM runs WHERE node_id = $1
             AND ($4::timestamptz IS NULL OR started_at_utc >= $4) AND ($5::timestamptz IS NULL OR started_at_utc < $5)) t
        LEFT JOIN LATERAL (SELECT ${RUN_COLUMNS.map((c) => `x.${c}`).join(', ')}, x.outcomes_packed, x.base_id, b.outcomes_packed AS base_outcomes
           FROM runs x LEFT JOIN run_bases b ON b.id = x.base_id WHERE x.node_id = $1
             AND ($4::timestamptz IS NULL OR x.started_at_utc >= $4) AND ($5::timestamptz IS NULL OR x.started_at_utc < $5)
           ORDER BY x.started_at_utc DESC LIMIT $2 OFFSET $3) r ON true`,
      values: [nodeId, limit, offset, from, to],
    });
    return { data: rows.filter((r) => r.id !== null).map((r) => runFromRow(r, this.bases, postgresRows)), total: Number(rows[0]?.total ?? 0) };
  }

  /** The stored log of a run: the bytes as stored (no base), or its text (with one). */
  private async runLog(runId: number): Promise<StoredLog | null> {
    if (!Number.isSafeInteger(runId)) return null;
    const { rows } = await this.db.query<{ log_compressed: Buffer; base_id: string | null; base_log: Buffer | null; base_outcomes: Buffer | null }>('getRunLog', this.db.pool, {
      name: 'run_log',
      text: `SELECT r.log_compressed, r.base_id, b.log_compressed AS base_log, b.outcomes_packed AS base_outcomes
        FROM runs r LEFT JOIN run_bases b ON b.id = r.base_id WHERE r.id = $1`,
      values: [runId],
    });
    const row = rows[0];
    if (!row) return null;
    if (row.base_id === null) return { raw: row.log_compressed };
    if (!row.base_log) throw capstanError('ERR_INTERNAL', `run ${runId} refers to base ${row.base_id}, which is gone`);
    const id = Number(row.base_id);
    const base = readLog(runId, () => this.bases.texts(id, () => ({ log_compressed: row.base_log!, outcomes_packed: row.base_outcomes! }))!);
    return { text: readLog(runId, () => decodeRunLog(base, row.log_compressed)) };
  }

  async getRunLog(runId: number): Promise<Buffer | null> {
    const log = await this.runLog(runId);
    return log && logCompressed(log);
  }

  async getRunLogText(runId: number, maxBytes: number): Promise<Buffer | null> {
    const log = await this.runLog(runId);
    return log && logText(runId, log, maxBytes);
  }

  async compactRuns(limit: number): Promise<CompactProgress> {
    const what = 'compactRuns';
    const cur = await this.db.query<{ v: string }>(what, this.db.pool, { text: "SELECT value AS v FROM registry_counters WHERE name = 'runs_compacted_through'" });
    const cursor = Number(cur.rows[0]?.v ?? 0);
    const { rows } = await this.db.query<Record<string, unknown>>(what, this.db.pool, {
      text: `SELECT id, node_id, started_at_utc, log_compressed, outcomes, outcomes_packed FROM runs
        WHERE id > $1 AND base_id IS NULL ORDER BY id LIMIT $2`,
      values: [cursor, limit],
    });
    const texts = await Promise.all(rows.map((r) => decompress(r.log_compressed as Buffer, 'zstd', { maxBytes: 256 * 1024 * 1024 }).catch(() => null)));
    const last = rows.length ? Number(rows[rows.length - 1]!.id) : cursor;
    let converted = 0;
    await this.db.tx(what, async (c) => {
      for (const [i, r] of rows.entries()) {
        // A run whose log or outcomes (or its day's base) cannot be read is left whole (skipped), not failed: the cursor moves past it.
        const text = texts[i];
        const outcomes = text ? outcomesOrReason(r.outcomes_packed, r.outcomes) : '';
        if (!text || typeof outcomes === 'string') continue;
        // The node's row lock orders this with the ingest's runs of the same node.
        if (!(await this.nodes.lockNode(what, c, r.node_id as string))) continue;
        const started = iso(r.started_at_utc)!;
        const s = await this.againstBase(c, r.node_id as string, started, text, outcomes);
        if (!s) continue; // its node-day's base cannot be read: left as it is
        const u = await this.db.query(what, c, {
          text: `UPDATE runs SET log_compressed = $1, outcomes_packed = $2, outcomes = $3, base_id = $4
            WHERE id = $5 AND started_at_utc = $6 AND base_id IS NULL`,
          values: [s.log, s.outcomes, UNPACKED_PLACEHOLDER, s.base_id, r.id, r.started_at_utc],
        });
        converted += u.rowCount ?? 0;
      }
      await this.db.query(what, c, { text: "UPDATE registry_counters SET value = GREATEST(value, $1) WHERE name = 'runs_compacted_through'", values: [last] });
    });
    // The highest id, not a count of what is left: counting would scan the table at every batch.
    const max = await this.db.query<{ n: string }>(what, this.db.pool, { text: 'SELECT coalesce(max(id), 0) AS n FROM runs' });
    return { converted, skipped: rows.length - converted, through_id: last, max_id: Number(max.rows[0]!.n), done: rows.length < limit };
  }
}
