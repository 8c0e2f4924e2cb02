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
  InsertRunResult, Page, RegistryCounts, RunBatchResult, RunInsert, RunRange, RunRecord, RegistryStore, CompactProgress, PolicyBundleRecord, PolicyKind, PolicyObjectRecord, PolicyWrite,
} from '../store.js';
import { checkBundleRecord, checkPolicyKey, policyBodyJson } from '../policy-rows.js';
import { UNPACKED_PLACEHOLDER, unpackOutcomes } from '../runs/outcomes.js';
import { BaseCache, decodeBase, decodeRunLog, encodeBase, encodeRun, runDay, type BaseRow, type BaseTexts } from '../runs/run-codec.js';
import { checkExpectations, checkPaging, checkRun } from '../input.js';
import { LIVE_STATES, MISSING, PURGEABLE_STATES } from '../nodes/rules.js';
import { runRange, toUtcIso } from '../time.js';
import { iso, postgresRows } from './rows.js';
import type { PostgresDb } from './db.js';
import type { PostgresNodes } from '../nodes/postgres.js';
import type { PostgresCompliance } from '../compliance/postgres.js';
import type { PostgresChanges } from '../changes/postgres.js';
import { RUN_COLUMNS, runFromRow } from '../nodes/records.js';
import { dayPartitions, dropExpiredPartitions } from './partitions.js';

const inList = (values: readonly string[]) => values.map((s) => `'${s}'`).join(', ');

export class PostgresRegistry implements RegistryStore {
  /** Decoded node-day bases (store/run-codec.ts). */
  private readonly bases: BaseCache;
  private readonly skippedPartitions = new Set<string>();
  private readonly onMaintenance: (message: string, err?: unknown) => void;

  constructor(
    private readonly db: PostgresDb,
    private readonly nodes: PostgresNodes,
    private readonly compliance: PostgresCompliance,
    private readonly changes: PostgresChanges,
    opts: { runBaseCacheBytes?: number; onMaintenance?: (message: string, err?: unknown) => void } = {}) {
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
      await this.changes.runStored(c, run, id, startedUtc, changes);
      await this.nodes.runStored(what, c, node, startedUtc, run.config_id ?? null, receivedAt);
      await this.compliance.runStored(what, c, node, run, id, startedUtc, receivedAt, packed);
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
        if (!(await this.compliance.expectationsTx(c, it.bundle.node_id, it.bundle.config_id, it.expected, it.when))) continue;
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
