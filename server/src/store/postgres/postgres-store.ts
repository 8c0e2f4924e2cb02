/**
 * The registry on PostgreSQL: nodes, runs, compliance, changes, policies and the lifecycle sweep,
 * for several server processes sharing one database.
 *
 * Concurrency: every read-modify-write of a node locks its row first (`FOR NO KEY UPDATE`,
 * which does not block the foreign-key checks of other runs' inserts). Two processes ingesting
 * the same run therefore queue on the node row; the second one's `ON CONFLICT DO NOTHING` then
 * sees the first one's committed run and reports a duplicate. The lock also keeps a node from
 * being deleted between the existence check and the insert. The lifecycle sweep takes its
 * batches with `FOR UPDATE SKIP LOCKED`: it never waits for a node the ingest holds, and two
 * servers sweeping at once share the work instead of doing it twice.
 *
 * Runs are partitioned by day (migration 2): retention drops whole days, and `prepareRunStorage`
 * creates the next days' partitions ahead of the runs that will fill them.
 *
 * Hot statements are named, so node-pg prepares them once per connection.
 */
import type pg from 'pg';
import { capstanError, compressSync, decompress, isTransient } from '@capstan/shared';
import type {
  ChangeBucket, ChangeInput, ChangeQuery, ComplianceAggregate, ComplianceBase, ComplianceClock, ExpectedComponent, InsertRunResult, NodeComplianceRow, NodeFilter, Page, RegistryCounts, RuleComplianceRow, RunBatchResult, RunInsert, RunRange, RunRecord, RegistryStore, CompactProgress, PolicyBundleRecord, PolicyKind, PolicyObjectRecord, PolicyWrite, ChangePage,
} from '../store.js';
import { CHANGES_COUNT_LIMIT } from '../store.js';
import { checkBundleRecord, checkPolicyKey, policyBodyJson } from '../policy-rows.js';
import {
  clockParams, clockSubquery, COUNT_COLUMNS, timeAdjustedColumns, complianceRows, countsFromRow, epochS, marksFromRow, nextMarks, timeAdjustedSums, worstNodesSql, type ComplianceInput,
} from '../compliance-rows.js';
import { aggregateFromRows, changeFromRow, changeWhere, complianceClassSql, labelFor, nodeComplianceFromRow } from '../changes-rows.js';
import { UNPACKED_PLACEHOLDER, unpackOutcomes, packedOrNull } from '../outcomes.js';
import { BaseCache, decodeBase, decodeRunLog, encodeBase, encodeRun, runDay, type BaseRow, type BaseTexts } from '../run-codec.js';
import { checkExpectations, checkKeepLast, checkPaging, checkRun } from '../input.js';
import { checkFilters, filterWhere } from '../nodes/filters/query.js';
import { postgresDialect } from '../nodes/filters/postgres.js';
import { LIVE_STATES, MISSING, PURGEABLE_STATES } from '../nodes/rules.js';
import { runRange, toUtcIso } from '../time.js';
import { iso, postgresRows } from './rows.js';
import type { PostgresDb, Queryable as Q } from './db.js';
import type { PostgresNodes } from '../nodes/postgres.js';
import { RUN_COLUMNS, runFromRow } from '../nodes/records.js';
import { dayPartitions, dropExpiredPartitions } from './partitions.js';

const inList = (values: readonly string[]) => values.map((s) => `'${s}'`).join(', ');

export class PostgresRegistry implements RegistryStore {
  /** Decoded node-day bases (store/run-codec.ts). */
  private readonly bases: BaseCache;
  private readonly skippedPartitions = new Set<string>();
  private readonly onMaintenance: (message: string, err?: unknown) => void;

  constructor(private readonly db: PostgresDb, private readonly nodes: PostgresNodes, opts: { runBaseCacheBytes?: number; onMaintenance?: (message: string, err?: unknown) => void } = {}) {
    this.bases = new BaseCache(opts.runBaseCacheBytes);
    this.onMaintenance = opts.onMaintenance ?? (() => undefined);
  }

  async insertRun(run: RunInsert): Promise<InsertRunResult> {
    const checked = checkRun(run);
    return this.db.tx('insertRun', (c) => this.runTx(c, run, checked));
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
      const results = await this.db.tx('insertRuns', async (c) => {
        const r: InsertRunResult[] = [];
        for (const i of todo) r.push(await this.runTx(c, runs[i]!, checked.get(i)!));
        return r;
      });
      todo.forEach((i, k) => (out[i] = { ok: true, result: results[k]! }));
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
  private async runTx(c: pg.PoolClient, run: RunInsert, checked: ReturnType<typeof checkRun>): Promise<InsertRunResult> {
    const { startedUtc, receivedAt, counts, packed, changes } = checked;
    const what = 'insertRun';
    {
      const node = await this.nodes.lockNode(what, c, run.node_id);
      if (!node) throw capstanError('ERR_NODE_UNKNOWN', `node ${run.node_id} is not registered`);
      const stored = run.log_text ? await this.againstBase(c, run.node_id, startedUtc, run.log_text, run.outcomes, run.outcomes_json)
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
      if (changes.length > 0) await this.insertChanges(c, run, id, startedUtc, changes);
      await this.relabelNext(c, run, startedUtc);
      await this.nodes.runStored(what, c, node, startedUtc, run.config_id ?? null, receivedAt);
      const receivedS = epochS(receivedAt);
      let written = false;
      if (run.complete) {
        // Steady state: the same config reporting the same outcomes as last time changes no
        // number, so only the base run moves (one statement instead of a recomputation).
        // One round trip: the steady-state update, and (read from the snapshot before it) the base
        // run's start, for when it did not apply. `present` tells a node without a row yet.
        const same = await this.db.query<{ updated: string; present: boolean; started: Date | null }>(what, c, {
          name: 'compliance_same',
          text: `WITH u AS (UPDATE node_compliance SET run_id = $2, run_started_at = $3, run_started_utc = $4, computed_at = $5,
                answered_s = GREATEST(coalesce(answered_s, 0), $8)
              WHERE node_id = $1 AND run_id IS NOT NULL AND run_started_utc <= $4 AND config_id IS NOT DISTINCT FROM $6 AND outcomes_packed = $7
              RETURNING 1)
            SELECT (SELECT count(*) FROM u) AS updated, x.node_id IS NOT NULL AS present, x.run_started_utc AS started,
              x.applying_since_s, x.answered_s, x.keep_last_s
            FROM (SELECT 1) one LEFT JOIN node_compliance x ON x.node_id = $1`,
          values: [run.node_id, id, run.started_at, startedUtc, receivedAt, run.config_id ?? null, packed, receivedS],
        });
        const row = same.rows[0]!;
        written = Number(row.updated) > 0;
        const prev: string | null | undefined = written ? null : row.present ? iso(row.started) : undefined;
        // Only the newest complete run decides compliance; a back-filled older one does not.
        if (!written && (prev === undefined || prev === null || prev <= startedUtc)) {
          const policy = node.policy_config_id;
          await this.writeCompliance(c, {
            nodeId: run.node_id,
            run: { id, started_at: run.started_at, started_utc: startedUtc, config_id: run.config_id ?? null },
            outcomes: run.outcomes,
            outcomesPacked: packed,
            expected: policy === null ? null : await this.expectations(c, run.node_id, policy),
            marks: nextMarks(row.present ? marksFromRow(row as unknown as Record<string, unknown>) : undefined, {
              kind: 'run', received_s: receivedS, run_config_id: run.config_id ?? null, policy_config_id: policy,
              policy_set_s: policy === null ? null : await this.expectationsSetS(c, run.node_id, policy),
            }),
          }, receivedAt);
          written = true;
        }
      }
      // Any run is an answer: an incomplete or back-filled one too.
      if (!written) {
        await this.db.query(what, c, {
          name: 'compliance_answered',
          text: 'UPDATE node_compliance SET answered_s = GREATEST(coalesce(answered_s, 0), $2) WHERE node_id = $1',
          values: [run.node_id, receivedS],
        });
      }
      return { inserted: true, id };
    }
  }

  /**
   * A run's log and outcomes against its node-day's base, made from this run when the day has
   * none yet (store/run-codec.ts). The node's row is locked by the caller, so two servers never
   * make the same node-day's base at once; ON CONFLICT is there all the same.
   */
  private async againstBase(c: pg.PoolClient, nodeId: string, startedUtc: string, log: Buffer, outcomes: RunInsert['outcomes'], outcomesJson?: Buffer): Promise<{ base_id: number; log: Buffer; outcomes: Buffer }> {
    const what = 'insertRun';
    const day = runDay(startedUtc);
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
      if (ins.rows[0]) this.bases.set(Number(found!.id), (texts = { log, outcomes: json }));
    }
    const id = Number(found!.id);
    texts ??= this.bases.get(id);
    if (!texts) {
      const { rows } = await this.db.query<BaseRow>(what, c, {
        name: 'run_base_get', text: 'SELECT log_compressed, outcomes_packed FROM run_bases WHERE id = $1', values: [id],
      });
      texts = decodeBase(rows[0]!);
      this.bases.set(id, texts);
    }
    const enc = encodeRun(texts, log, json);
    return { base_id: id, log: enc.log, outcomes: enc.outcomes };
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
  private async runLog(runId: number): Promise<{ raw: Buffer } | { text: Buffer } | null> {
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
    const base = this.bases.texts(id, () => ({ log_compressed: row.base_log!, outcomes_packed: row.base_outcomes! }))!;
    return { text: decodeRunLog(base, row.log_compressed) };
  }

  async getRunLog(runId: number): Promise<Buffer | null> {
    const log = await this.runLog(runId);
    return log === null ? null : 'raw' in log ? log.raw : compressSync(log.text, 'zstd');
  }

  async getRunLogText(runId: number, maxBytes: number): Promise<Buffer | null> {
    const log = await this.runLog(runId);
    if (log === null) return null;
    if ('raw' in log) return decompress(log.raw, 'zstd', { maxBytes });
    if (log.text.length > maxBytes) throw capstanError('ERR_DECOMPRESSED_TOO_LARGE', `run log larger than ${maxBytes} bytes`);
    return log.text;
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
        const text = texts[i];
        if (!text) continue;
        // The node's row lock orders this with the ingest's runs of the same node.
        if (!(await this.nodes.lockNode(what, c, r.node_id as string))) continue;
        const started = iso(r.started_at_utc)!;
        const s = await this.againstBase(c, r.node_id as string, started, text, unpackOutcomes(r.outcomes_packed, r.outcomes));
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

  // --- compliance ---------------------------------------------------------------------------

  private async expectations(c: Q, nodeId: string, configId: string): Promise<ExpectedComponent[] | null> {
    const { rows } = await this.db.query<{ components: ExpectedComponent[] }>('expectations', c, {
      name: 'expectations_get', text: 'SELECT components FROM node_expectations WHERE node_id = $1 AND config_id = $2', values: [nodeId, configId],
    });
    return rows[0] ? rows[0].components : null;
  }

  /** When a config's expectations were set for a node (epoch seconds), null when they are not stored. */
  private async expectationsSetS(c: Q, nodeId: string, configId: string): Promise<number | null> {
    const { rows } = await this.db.query<{ set_at: Date }>('expectations', c, {
      name: 'expectations_set_at', text: 'SELECT set_at FROM node_expectations WHERE node_id = $1 AND config_id = $2', values: [nodeId, configId],
    });
    return rows[0] ? Math.floor(rows[0].set_at.getTime() / 1000) : null;
  }

  /** The next run's changes labelled again against this one (SqliteStore.relabelNext). */
  private async relabelNext(c: pg.PoolClient, run: RunInsert, startedUtc: string): Promise<void> {
    const what = 'relabelNext';
    const next = await this.db.query<{ id: string; config_id: string | null }>(what, c, {
      name: 'run_next_config',
      text: 'SELECT id, config_id FROM runs WHERE node_id = $1 AND started_at_utc > $2 ORDER BY started_at_utc LIMIT 1',
      values: [run.node_id, startedUtc],
    });
    const n = next.rows[0];
    if (!n) return;
    await this.db.query(what, c, {
      name: 'changes_relabel', text: 'UPDATE changes SET label = $1 WHERE node_id = $2 AND run_id = $3', values: [labelFor(run.config_id ?? null, n.config_id), run.node_id, n.id],
    });
  }

  /** A run's changes, labelled as SqliteStore.insertChanges says. */
  private async insertChanges(c: pg.PoolClient, run: RunInsert, runId: number, startedUtc: string, changes: ChangeInput[]): Promise<void> {
    const what = 'insertChanges';
    const prev = await this.db.query<{ config_id: string | null }>(what, c, {
      name: 'run_previous_config',
      text: 'SELECT config_id FROM runs WHERE node_id = $1 AND started_at_utc < $2 ORDER BY started_at_utc DESC LIMIT 1',
      values: [run.node_id, startedUtc],
    });
    const label = labelFor(prev.rows[0] === undefined ? undefined : prev.rows[0].config_id, run.config_id ?? null);
    const col = <K extends keyof ChangeInput>(k: K) => changes.map((ch) => ch[k]);
    await this.db.query(what, c, {
      name: 'changes_insert',
      text: `INSERT INTO changes (node_id, run_id, run_started_at, label, config_id, at, rule_id, directive_id, component, key_value,
          event_type, message, diff, diff_truncated)
        SELECT $1, $2, $3, $4, $5, * FROM unnest($6::timestamptz[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
          $12::text[], $13::text[], $14::boolean[])`,
      values: [run.node_id, runId, run.started_at, label, run.config_id ?? null, col('at'), col('rule_id'), col('directive_id'),
        col('component'), col('key_value'), col('event_type'), col('message'), col('diff'), col('diff_truncated')],
    });
  }

  private async writeCompliance(c: pg.PoolClient, input: ComplianceInput, at: string): Promise<void> {
    const { counts, directives } = complianceRows(input);
    const what = 'writeCompliance';
    await this.db.query(what, c, {
      name: 'compliance_upsert',
      text: `INSERT INTO node_compliance (node_id, run_id, run_started_at, run_started_utc, config_id, expected,
          computed_at, outcomes, outcomes_packed, applying_since_s, answered_s, keep_last_s, ${COUNT_COLUMNS.join(', ')})
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, ${COUNT_COLUMNS.map((_, i) => `$${i + 13}`).join(', ')})
        ON CONFLICT (node_id) DO UPDATE SET run_id = excluded.run_id, run_started_at = excluded.run_started_at,
          run_started_utc = excluded.run_started_utc, config_id = excluded.config_id, expected = excluded.expected,
          computed_at = excluded.computed_at, outcomes = excluded.outcomes, outcomes_packed = excluded.outcomes_packed,
          applying_since_s = excluded.applying_since_s, answered_s = excluded.answered_s, keep_last_s = excluded.keep_last_s,
          ${COUNT_COLUMNS.map((col) => `${col} = excluded.${col}`).join(', ')}`,
      values: [input.nodeId, input.run?.id ?? null, input.run?.started_at ?? null, input.run?.started_utc ?? null,
        input.run?.config_id ?? null, input.expected !== null && input.expected.length > 0, at,
        UNPACKED_PLACEHOLDER, packedOrNull(input.outcomes, input.outcomesPacked), input.marks.applying_since_s, input.marks.answered_s,
        input.marks.keep_last_s, ...COUNT_COLUMNS.map((col) => counts[col])],
    });
    // Two statements whatever changed (no read first): the rows no longer reported go, and the
    // new or changed ones are written; an unchanged row is left alone (no dead tuple).
    await this.db.query(what, c, {
      name: 'compliance_directives_prune',
      text: `DELETE FROM node_compliance_directives x WHERE x.node_id = $1
        AND NOT EXISTS (SELECT 1 FROM unnest($2::text[], $3::text[]) AS g(rule_id, directive_id)
          WHERE g.rule_id = x.rule_id AND g.directive_id = x.directive_id)`,
      values: [input.nodeId, directives.map((d) => d.rule_id), directives.map((d) => d.directive_id)],
    });
    if (directives.length) {
      await this.db.query(what, c, {
        name: 'compliance_directives_upsert',
        text: `INSERT INTO node_compliance_directives AS x (node_id, rule_id, directive_id, ${COUNT_COLUMNS.join(', ')})
          SELECT $1, * FROM unnest($2::text[], $3::text[], ${COUNT_COLUMNS.map((_, i) => `$${i + 4}::int[]`).join(', ')})
          ON CONFLICT (node_id, rule_id, directive_id) DO UPDATE SET ${COUNT_COLUMNS.map((col) => `${col} = excluded.${col}`).join(', ')}
          WHERE (${COUNT_COLUMNS.map((col) => `x.${col}`).join(', ')}) IS DISTINCT FROM (${COUNT_COLUMNS.map((col) => `excluded.${col}`).join(', ')})`,
        values: [input.nodeId, directives.map((d) => d.rule_id), directives.map((d) => d.directive_id),
          ...COUNT_COLUMNS.map((col) => directives.map((d) => d.counts[col]))],
      });
    }
  }

  async setExpectations(nodeId: string, configId: string, items: ExpectedComponent[], at: string, opts: { keep_last_s?: number } = {}): Promise<boolean> {
    const checked = checkExpectations(configId, items);
    const when = toUtcIso(at, 'at');
    const keep = checkKeepLast(opts.keep_last_s);
    return this.db.tx('setExpectations', (c) => this.expectationsTx(c, nodeId, configId, checked, when, keep));
  }

  /** setExpectations' work, inside the caller's transaction on `c`. */
  private async expectationsTx(
    c: pg.PoolClient, nodeId: string, configId: string, checked: { items: ExpectedComponent[]; json: string }, when: string, keepLastS?: number,
  ): Promise<boolean> {
    const what = 'setExpectations';
    {
      const node = await this.nodes.lockNode(what, c, nodeId);
      if (!node) return false;
      // Judged by its current policy: nothing to recompute when the same policy is written again.
      const stored = node.policy_config_id === configId ? await this.expectations(c, nodeId, configId) : null;
      const same = stored !== null && JSON.stringify(stored) === checked.json;
      await this.db.query(what, c, {
        text: `INSERT INTO node_expectations (node_id, config_id, set_at, components) VALUES ($1, $2, $3, $4)
          ON CONFLICT (node_id, config_id) DO UPDATE SET set_at = excluded.set_at, components = excluded.components`,
        values: [nodeId, configId, when, checked.json],
      });
      // Keep this config's and the previous policy's: a node may still run the previous one.
      await this.db.query(what, c, {
        text: 'DELETE FROM node_expectations WHERE node_id = $1 AND config_id NOT IN ($2, $3)',
        values: [nodeId, configId, node.policy_config_id ?? configId],
      });
      await this.db.query(what, c, { text: 'UPDATE nodes SET policy_config_id = $2 WHERE id = $1', values: [nodeId, configId] });
      const { rows } = await this.db.query(what, c, {
        text: `SELECT x.node_id AS present, run_id, run_started_at, run_started_utc, config_id, outcomes, outcomes_packed,
            applying_since_s, answered_s, keep_last_s
          FROM (SELECT 1) one LEFT JOIN node_compliance x ON x.node_id = $1`,
        values: [nodeId],
      });
      const cur = rows[0]!;
      const present = cur.present !== null;
      if (present && same && (keepLastS === undefined || keepLastS === Number(cur.keep_last_s))) return true;
      const hasRun = cur.run_id !== null;
      const marks = nextMarks(present ? marksFromRow(cur) : undefined, {
        kind: 'policy', at_s: epochS(when), config_id: configId, previous_config_id: node.policy_config_id,
        run_config_id: hasRun ? (cur.config_id as string | null) : null, ...(keepLastS === undefined ? {} : { keep_last_s: keepLastS }),
      });
      if (hasRun) {
        await this.writeCompliance(c, {
          nodeId,
          run: { id: Number(cur.run_id), started_at: cur.run_started_at, started_utc: iso(cur.run_started_utc)!, config_id: cur.config_id },
          outcomes: unpackOutcomes(cur.outcomes_packed, cur.outcomes),
          ...(cur.outcomes_packed ? { outcomesPacked: cur.outcomes_packed } : {}),
          expected: checked.items,
          marks,
        }, when);
      } else {
        await this.writeCompliance(c, { nodeId, run: null, outcomes: [], expected: checked.items, marks }, when);
      }
      return true;
    }
  }

  async getComplianceBase(nodeId: string): Promise<ComplianceBase | null> {
    // One snapshot: the run row and the expectations it is judged against must agree.
    return this.db.tx('getComplianceBase', async (c) => {
      await c.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY');
      const node = (await this.db.query('getComplianceBase', c, {
        text: `SELECT n.policy_config_id, ${complianceClassSql} AS class FROM nodes n WHERE n.id = $1`, values: [nodeId],
      })).rows[0];
      if (!node) return null;
      const policy = (node.policy_config_id as string | null) ?? null;
      const { rows } = await this.db.query('getComplianceBase', c, {
        text: `SELECT run_id, run_started_at, config_id, outcomes, outcomes_packed, applying_since_s, answered_s, keep_last_s
          FROM node_compliance WHERE node_id = $1`, values: [nodeId],
      });
      const cur = rows[0];
      const hasRun = cur !== undefined && cur.run_id !== null;
      return {
        node_id: nodeId,
        run: hasRun ? { id: Number(cur.run_id), started_at: cur.run_started_at as string, config_id: (cur.config_id as string | null) ?? null } : null,
        policy_config_id: policy,
        expected: policy === null ? null : await this.expectations(c, nodeId, policy),
        outcomes: hasRun ? unpackOutcomes(cur.outcomes_packed, cur.outcomes) : [],
        marks: marksFromRow(cur) ?? { applying_since_s: null, answered_s: null, keep_last_s: 0 },
        relay: node.class === 'relay',
        has_agent: node.class !== 'agentless',
      };
    });
  }

  async complianceSummary(filters: NodeFilter[], clock: ComplianceClock, nodeIds?: string[]): Promise<ComplianceAggregate> {
    const checked = checkFilters({ filters });
    const values: unknown[] = [...clockParams(clock)];
    const scope = ["n.accepted = 'accepted'"];
    if (nodeIds) {
      values.push(nodeIds);
      scope.push(`n.id = ANY($${values.length}::text[])`);
    }
    const where = filterWhere(checked, await postgresDialect(this.db, values, checked), scope);
    const { rows } = await this.db.query('complianceSummary', this.db.pool, {
      text: `SELECT ${complianceClassSql} AS class, count(*) AS nodes, count(t.node_id) AS with_data, ${timeAdjustedSums('t', 't')}
        FROM ${clockSubquery('$1', '$2')} CROSS JOIN nodes n LEFT JOIN node_compliance t ON t.node_id = n.id ${where}
        GROUP BY 1`,
      values,
    });
    return aggregateFromRows(rows);
  }

  async complianceNodes(after: string | null, limit: number, clock: ComplianceClock, filters: NodeFilter[] = []): Promise<NodeComplianceRow[]> {
    const checked = checkFilters({ filters });
    const values: unknown[] = [...clockParams(clock)];
    const scope = ["n.accepted = 'accepted'"];
    if (after !== null) {
      values.push(after);
      scope.push(`n.id > $${values.length}`);
    }
    const where = filterWhere(checked, await postgresDialect(this.db, values, checked), scope);
    values.push(limit);
    const { rows } = await this.db.query('complianceNodes', this.db.pool, {
      text: `SELECT n.id AS node_id, n.hostname, n.status, n.state, n.last_run_at, n.policy_config_id, ${complianceClassSql} AS class,
          ${timeAdjustedColumns('t', 't')}
        FROM ${clockSubquery('$1', '$2')} CROSS JOIN nodes n LEFT JOIN node_compliance t ON t.node_id = n.id ${where}
        ORDER BY n.id LIMIT $${values.length}`,
      values,
    });
    return rows.map(nodeComplianceFromRow);
  }

  async worstNodes(limit: number, clock: ComplianceClock): Promise<NodeComplianceRow[]> {
    const { rows } = await this.db.query('worstNodes', this.db.pool, {
      text: worstNodesSql((i) => `$${i}`, complianceClassSql),
      values: [...clockParams(clock), limit],
    });
    return rows.map(nodeComplianceFromRow);
  }

  async complianceByRule(by: 'rule' | 'directive', clock: ComplianceClock): Promise<RuleComplianceRow[]> {
    const keys = by === 'rule' ? 'x.rule_id' : 'x.rule_id, x.directive_id';
    const { rows } = await this.db.query('complianceByRule', this.db.pool, {
      text: `SELECT ${keys}, count(DISTINCT x.node_id) AS nodes, ${timeAdjustedSums('x', 't')}
        FROM ${clockSubquery('$1', '$2')} CROSS JOIN node_compliance_directives x JOIN nodes n ON n.id = x.node_id
          JOIN node_compliance t ON t.node_id = x.node_id
        WHERE n.accepted = 'accepted' AND ${complianceClassSql} = 'agent'
        GROUP BY ${keys} ORDER BY ${keys}`,
      values: clockParams(clock),
    });
    return rows.map((r) => ({
      rule_id: r.rule_id as string,
      ...(by === 'directive' ? { directive_id: r.directive_id as string } : {}),
      nodes: Number(r.nodes),
      counts: countsFromRow(r),
    }));
  }

  // --- changes ------------------------------------------------------------------------------

  private async changeWhere(q: ChangeQuery, values: unknown[]): Promise<string> {
    return changeWhere(q, await postgresDialect(this.db, values), (ids) => `(SELECT unnest($${values.push(ids)}::text[]))`);
  }

  async listChanges(q: ChangeQuery, page: number, perPage: number): Promise<ChangePage> {
    const { limit, offset } = checkPaging(page, perPage);
    const values: unknown[] = [];
    const where = await this.changeWhere(q, values);
    const { rows } = await this.db.query('listChanges', this.db.pool, {
      text: `SELECT t.total, r.* FROM (SELECT count(*) AS total FROM (SELECT 1 FROM changes c ${where} LIMIT ${CHANGES_COUNT_LIMIT + 1}) l) t
        LEFT JOIN LATERAL (SELECT c.* FROM changes c ${where} ORDER BY c.at DESC, c.id DESC
          LIMIT $${values.length + 1} OFFSET $${values.length + 2}) r ON true`,
      values: [...values, limit, offset],
    });
    const total = Number(rows[0]?.total ?? 0);
    return { data: rows.filter((r) => r.id !== null).map(changeFromRow), total: Math.min(total, CHANGES_COUNT_LIMIT), total_capped: total > CHANGES_COUNT_LIMIT };
  }

  async changesHistogram(q: ChangeQuery, by: 'hour' | 'day'): Promise<ChangeBucket[]> {
    const values: unknown[] = [];
    const where = await this.changeWhere(q, values);
    const { rows } = await this.db.query('changesHistogram', this.db.pool, {
      text: `SELECT date_trunc('${by}', c.at AT TIME ZONE 'UTC') AS at,
          count(*) FILTER (WHERE c.label = 'intentional') AS intentional, count(*) FILTER (WHERE c.label = 'corrective') AS corrective
        FROM changes c ${where} GROUP BY 1 ORDER BY 1`,
      values,
    });
    return rows.map((r) => ({ at: new Date(`${(r.at as Date).toISOString().slice(0, 19)}Z`).toISOString(), intentional: Number(r.intentional), corrective: Number(r.corrective) }));
  }

  async setKeepLast(nodeIds: string[], seconds: number): Promise<number> {
    const keep = checkKeepLast(seconds)!;
    const res = await this.db.query('setKeepLast', this.db.pool, {
      text: 'UPDATE node_compliance SET keep_last_s = $1 WHERE node_id = ANY($2::text[]) AND keep_last_s <> $1',
      values: [keep, nodeIds],
    });
    return res.rowCount ?? 0;
  }

  async deleteChangesBefore(before: string, limit: number): Promise<number> {
    const b = toUtcIso(before, 'before');
    const res = await this.db.query('deleteChangesBefore', this.db.pool, {
      text: 'DELETE FROM changes WHERE id IN (SELECT id FROM changes WHERE at < $1 ORDER BY at LIMIT $2 FOR UPDATE SKIP LOCKED)',
      values: [b, limit],
    });
    // Inventory changes are kept as long (GET /api/1/nodes/<id>/inventory/history).
    const inv = await this.db.query('deleteChangesBefore', this.db.pool, {
      text: 'DELETE FROM inventory_changes WHERE id IN (SELECT id FROM inventory_changes WHERE at < $1 ORDER BY at LIMIT $2 FOR UPDATE SKIP LOCKED)',
      values: [b, limit],
    });
    return (res.rowCount ?? 0) + (inv.rowCount ?? 0);
  }

  // --- lifecycle sweep ----------------------------------------------------------------------

  async markUnreachable(before: string, at: string, limit: number): Promise<number> {
    const [b, when] = [toUtcIso(before, 'before'), toUtcIso(at, 'at')];
    const { rows } = await this.db.query<{ n: string }>('markUnreachable', this.db.pool, {
      text: `WITH picked AS (
          SELECT id FROM nodes WHERE status = 'reachable' AND last_contact_at < $1 ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED),
        upd AS (
          UPDATE nodes n SET status = 'unreachable', updated_at = GREATEST(n.updated_at, $2)
          FROM picked WHERE n.id = picked.id AND n.status = 'reachable' RETURNING n.id),
        h AS (
          INSERT INTO node_history (node_id, at, field, from_value, to_value, cause)
          SELECT id, $2, 'status', 'reachable', 'unreachable', 'missed runs' FROM upd ORDER BY id)
        SELECT count(*) AS n FROM upd`,
      values: [b, when, limit],
    });
    return Number(rows[0]!.n);
  }

  async markMissing(before: string, at: string, limit: number): Promise<number> {
    const [b, when] = [toUtcIso(before, 'before'), toUtcIso(at, 'at')];
    const { rows } = await this.db.query<{ n: string }>('markMissing', this.db.pool, {
      text: `WITH picked AS (
          SELECT id, state, status FROM nodes WHERE state IN (${inList(LIVE_STATES)}) AND last_contact_at < $1
          ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED),
        upd AS (
          UPDATE nodes n SET state = '${MISSING}', status = 'unreachable', state_changed_at = $2,
            updated_at = GREATEST(n.updated_at, $2)
          FROM picked p WHERE n.id = p.id RETURNING n.id, p.state AS old_state, p.status AS old_status),
        h AS (
          INSERT INTO node_history (node_id, at, field, from_value, to_value, cause)
          SELECT id, $2, field, from_value, to_value, 'silence' FROM (
            SELECT id, 1 AS o, 'state' AS field, old_state AS from_value, '${MISSING}' AS to_value FROM upd
            UNION ALL
            SELECT id, 2, 'status', old_status, 'unreachable' FROM upd WHERE old_status <> 'unreachable') e
          ORDER BY id, o)
        SELECT count(*) AS n FROM upd`,
      values: [b, when, limit],
    });
    return Number(rows[0]!.n);
  }

  async purgeNodes(before: string, limit: number): Promise<number> {
    const b = toUtcIso(before, 'before');
    return this.db.tx('purgeNodes', async (c) => {
      const { rows } = await this.db.query<{ n: string }>('purgeNodes', c, {
        text: `WITH picked AS (
            SELECT id FROM nodes WHERE state IN (${inList(PURGEABLE_STATES)}) AND state_changed_at < $1
            ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED),
          del AS (DELETE FROM nodes n USING picked WHERE n.id = picked.id RETURNING n.id)
          SELECT count(*) AS n FROM del`,
        values: [b, limit],
      });
      const n = Number(rows[0]!.n);
      await this.bump(c, 'purged_nodes', n);
      return n;
    });
  }

  async deleteRunsBefore(before: string, limit: number): Promise<number> {
    const b = toUtcIso(before, 'before');
    // Whole days first (no row-by-row delete at all), then what lies outside the day partitions.
    let deleted = await dropExpiredPartitions(this.db.pool, new Date(b), this.onMaintenance, (c, n) => this.bump(c, 'deleted_runs', n));
    deleted += await this.db.tx('deleteRunsBefore', async (c) => {
      const res = await this.db.query('deleteRunsBefore', c, {
        text: `DELETE FROM runs WHERE (id, started_at_utc) IN (
          SELECT id, started_at_utc FROM runs WHERE started_at_utc < $1 ORDER BY started_at_utc LIMIT $2)`,
        values: [b, limit],
      });
      const n = res.rowCount ?? 0;
      await this.bump(c, 'deleted_runs', n);
      // Then the bases of days no run refers to any more (a base serves only runs of its day).
      if (n < limit) {
        await this.db.query('deleteRunsBefore', c, {
          text: `DELETE FROM run_bases WHERE id IN (SELECT x.id FROM run_bases x WHERE x.day < ($1::timestamptz AT TIME ZONE 'UTC')::date AND NOT EXISTS (
              SELECT 1 FROM runs r WHERE r.node_id = x.node_id AND r.started_at_utc >= x.day::timestamp AT TIME ZONE 'UTC'
                AND r.started_at_utc < (x.day + 1)::timestamp AT TIME ZONE 'UTC')
            LIMIT $2)`,
          values: [b, limit - n],
        });
      }
      return n;
    });
    return deleted;
  }

  async pruneHistory(before: string, limit: number): Promise<number> {
    const b = toUtcIso(before, 'before');
    const res = await this.db.query('pruneHistory', this.db.pool, {
      text: 'DELETE FROM node_history WHERE id IN (SELECT id FROM node_history WHERE at < $1 ORDER BY id LIMIT $2)',
      values: [b, limit],
    });
    return res.rowCount ?? 0;
  }

  async prepareRunStorage(now: Date): Promise<void> {
    await dayPartitions(this.db.pool, this.db.schema, now, this.onMaintenance, this.skippedPartitions);
  }

  private async bump(c: pg.PoolClient, name: string, by: number): Promise<void> {
    if (by > 0) await this.db.query('counters', c, { text: 'UPDATE registry_counters SET value = value + $2 WHERE name = $1', values: [name, by] });
  }

  async counts(): Promise<RegistryCounts> {
    const { rows } = await this.db.query<{ k: string; col: string; c: string }>('counts', this.db.pool, {
      text: `SELECT 'status' AS col, status AS k, count(*) AS c FROM nodes GROUP BY status
        UNION ALL SELECT 'state', state, count(*) FROM nodes GROUP BY state
        UNION ALL SELECT 'accepted', accepted, count(*) FROM nodes GROUP BY accepted
        UNION ALL SELECT 'counter', name, value FROM registry_counters`,
    });
    const pick = (col: string) => Object.fromEntries(rows.filter((r) => r.col === col).sort((x, y) => (x.k < y.k ? -1 : 1)).map((r) => [r.k, Number(r.c)]));
    const counters = pick('counter');
    return {
      by_status: pick('status'), by_state: pick('state'), by_acceptance: pick('accepted'),
      purged_nodes: counters.purged_nodes ?? 0, deleted_runs: counters.deleted_runs ?? 0,
    };
  }
  async listPolicyObjects(kind: PolicyKind): Promise<PolicyObjectRecord[]> {
    const { rows } = await this.db.query('listPolicyObjects', this.db.pool, {
      text: 'SELECT kind, id, body, updated_at FROM policy_objects WHERE kind = $1 ORDER BY id', values: [kind],
    });
    return rows.map(policyFromRow);
  }

  async getPolicyObject(kind: PolicyKind, id: string): Promise<PolicyObjectRecord | null> {
    const { rows } = await this.db.query('getPolicyObject', this.db.pool, {
      text: 'SELECT kind, id, body, updated_at FROM policy_objects WHERE kind = $1 AND id = $2', values: [kind, id],
    });
    return rows[0] ? policyFromRow(rows[0]) : null;
  }

  async putPolicyObject(kind: PolicyKind, id: string, body: Record<string, unknown>, at: string): Promise<boolean> {
    checkPolicyKey(kind, id);
    const json = policyBodyJson(body);
    const when = toUtcIso(at, 'at');
    // xmax = 0 only on a freshly inserted row: tells created from replaced in one statement.
    const { rows } = await this.db.query('putPolicyObject', this.db.pool, {
      text: `INSERT INTO policy_objects (kind, id, body, updated_at) VALUES ($1, $2, $3::jsonb, $4)
        ON CONFLICT (kind, id) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at
        RETURNING (xmax = 0) AS created`,
      values: [kind, id, json, when],
    });
    return rows[0]?.created === true;
  }

  async deletePolicyObject(kind: PolicyKind, id: string): Promise<boolean> {
    const res = await this.db.query('deletePolicyObject', this.db.pool, { text: 'DELETE FROM policy_objects WHERE kind = $1 AND id = $2', values: [kind, id] });
    return (res.rowCount ?? 0) > 0;
  }

  async getPolicyBundle(nodeId: string): Promise<PolicyBundleRecord | null> {
    const { rows } = await this.db.query('getPolicyBundle', this.db.pool, {
      name: 'bundle_get', text: 'SELECT node_id, config_id, generated_at, bundle FROM policy_bundles WHERE node_id = $1', values: [nodeId],
    });
    const r = rows[0];
    return r ? { node_id: r.node_id, config_id: r.config_id, generated_at: new Date(r.generated_at).toISOString(), bundle: r.bundle } : null;
  }

  async putPolicyBundle(b: PolicyBundleRecord): Promise<boolean> {
    checkBundleRecord(b);
    const when = toUtcIso(b.generated_at, 'generated_at');
    // INSERT … SELECT from nodes: an unknown node inserts nothing instead of failing on the key.
    const res = await this.db.query('putPolicyBundle', this.db.pool, {
      text: `INSERT INTO policy_bundles (node_id, config_id, generated_at, bundle)
        SELECT id, $2, $3, $4 FROM nodes WHERE id = $1
        ON CONFLICT (node_id) DO UPDATE SET config_id = excluded.config_id, generated_at = excluded.generated_at, bundle = excluded.bundle`,
      values: [b.node_id, b.config_id, when, b.bundle],
    });
    return (res.rowCount ?? 0) > 0;
  }

  async getExpectations(nodeId: string, configId: string): Promise<ExpectedComponent[] | null> {
    return this.expectations(this.db.pool, nodeId, configId);
  }

  async policyConfigIds(nodeIds: string[]): Promise<Map<string, string>> {
    const { rows } = await this.db.query('policyConfigIds', this.db.pool, {
      text: 'SELECT node_id, config_id FROM policy_bundles WHERE node_id = ANY($1::text[])', values: [nodeIds],
    });
    return new Map(rows.map((r) => [r.node_id as string, r.config_id as string]));
  }

  async putPolicies(items: PolicyWrite[]): Promise<number> {
    const checked = items.map((it) => {
      checkBundleRecord(it.bundle);
      return { ...it, when: toUtcIso(it.bundle.generated_at, 'generated_at'), expected: checkExpectations(it.bundle.config_id, it.expected) };
    });
    return this.db.tx('putPolicies', async (c) => {
      let n = 0;
      for (const it of checked) {
        if (!(await this.expectationsTx(c, it.bundle.node_id, it.bundle.config_id, it.expected, it.when))) continue;
        n++;
        if (it.expectationsOnly) continue;
        await this.db.query('putPolicies', c, {
          name: 'bundle_put',
          text: `INSERT INTO policy_bundles (node_id, config_id, generated_at, bundle) VALUES ($1, $2, $3, $4)
            ON CONFLICT (node_id) DO UPDATE SET config_id = excluded.config_id, generated_at = excluded.generated_at, bundle = excluded.bundle`,
          values: [it.bundle.node_id, it.bundle.config_id, it.when, it.bundle.bundle],
        });
      }
      return n;
    });
  }

  async deletePolicyBundle(nodeId: string): Promise<boolean> {
    const res = await this.db.query('deletePolicyBundle', this.db.pool, { text: 'DELETE FROM policy_bundles WHERE node_id = $1', values: [nodeId] });
    return (res.rowCount ?? 0) > 0;
  }
}

function policyFromRow(r: Record<string, unknown>): PolicyObjectRecord {
  return { kind: r.kind as PolicyKind, id: r.id as string, body: r.body as Record<string, unknown>, updated_at: new Date(r.updated_at as string).toISOString() };
}
