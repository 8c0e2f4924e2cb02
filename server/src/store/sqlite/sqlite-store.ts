/**
 * The registry on one SQLite file: nodes, runs, compliance, changes, policies and the lifecycle
 * sweep (db.ts has the durability and locking choices).
 */
import { capstanError, compressSync, decompress } from '@capstan/shared';
import type {
  ExpectedComponent, InsertRunResult, Page, RegistryCounts, RunBatchResult, RunInsert, RunRange, RunRecord, RegistryStore, CompactProgress, PolicyBundleRecord, PolicyKind, PolicyObjectRecord, PolicyWrite,
} from '../store.js';
import { checkBundleRecord, checkPolicyKey, policyBodyJson } from '../policy-rows.js';
import { storeError } from '../errors.js';
import { UNPACKED_PLACEHOLDER, unpackOutcomes } from '../runs/outcomes.js';
import { BaseCache, decodeRunLog, encodeBase, encodeRun, runDay, type BaseRow, type BaseTexts } from '../runs/run-codec.js';
import { checkExpectations, checkPaging, checkRun } from '../input.js';
import { LIVE_STATES, MISSING, PURGEABLE_STATES, type HistoryInsert } from '../nodes/rules.js';
import { runRange, toUtcIso } from '../time.js';
import { sqliteRows } from './rows.js';
import type { SqliteDb } from './db.js';
import type { SqliteNodes } from '../nodes/sqlite.js';
import type { SqliteCompliance } from '../compliance/sqlite.js';
import type { SqliteChanges } from '../changes/sqlite.js';
import { RUN_COLUMNS, runFromRow } from '../nodes/records.js';

const inList = (values: readonly string[]) => values.map((s) => `'${s}'`).join(', ');
/** Nodes whose generated policies are written with one set of statements (putPolicies). */
const POLICY_CHUNK = 500;

export class SqliteRegistry implements RegistryStore {
  /** Decoded node-day bases (store/run-codec.ts). */
  private readonly bases: BaseCache;

  constructor(
    private readonly db: SqliteDb,
    private readonly nodes: SqliteNodes,
    private readonly compliance: SqliteCompliance,
    private readonly changes: SqliteChanges,
    runBaseCacheBytes?: number,
  ) {
    this.bases = new BaseCache(runBaseCacheBytes);
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
    {
      const node = this.nodes.node(run.node_id);
      if (!node) throw capstanError('ERR_NODE_UNKNOWN', `node ${run.node_id} is not registered`);
      const stored = run.log_text ? this.againstBase(run.node_id, startedUtc, run.log_text, run.outcomes, run.outcomes_json)
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
      this.nodes.runStored(node, startedUtc, run.config_id ?? null, receivedAt);
      this.compliance.runStored(node, run, id, startedUtc, receivedAt, packed);
      return { inserted: true, id };
    }
  }

  /**
   * A run's log and outcomes against its node-day's base, which is made from this run when the
   * day has none yet (store/run-codec.ts).
   */
  private againstBase(nodeId: string, startedUtc: string, log: Buffer, outcomes: RunInsert['outcomes'], outcomesJson?: Buffer): { base_id: number; log: Buffer; outcomes: Buffer } {
    const day = runDay(startedUtc);
    const json = outcomesJson ?? Buffer.from(JSON.stringify(outcomes), 'utf8');
    const found = this.db.stmt('SELECT id FROM run_bases WHERE node_id = ? AND day = ?').pluck().get(nodeId, day) as number | undefined;
    let id: number;
    let texts: BaseTexts | undefined;
    if (found === undefined) {
      texts = { log, outcomes: json };
      const row = encodeBase(texts);
      id = Number(this.db.stmt('INSERT INTO run_bases (node_id, day, log_compressed, outcomes_packed) VALUES (?, ?, ?, ?)')
        .run(nodeId, day, row.log_compressed, row.outcomes_packed).lastInsertRowid);
      this.bases.set(id, texts);
    } else {
      id = found;
      texts = this.bases.texts(id, () => this.db.stmt('SELECT log_compressed, outcomes_packed FROM run_bases WHERE id = ?').get(id) as BaseRow | undefined);
    }
    const enc = encodeRun(texts!, log, json);
    return { base_id: id, log: enc.log, outcomes: enc.outcomes };
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
  private runLog(runId: number): { raw: Buffer } | { text: Buffer } | null {
    if (!Number.isSafeInteger(runId)) return null;
    return this.db.read('getRunLog', () => {
      const row = this.db.stmt('SELECT log_compressed, base_id FROM runs WHERE id = ?').get(runId) as { log_compressed: Buffer; base_id: number | null } | undefined;
      if (!row) return null;
      if (row.base_id === null) return { raw: row.log_compressed };
      const base = this.bases.texts(row.base_id, () => this.db.stmt('SELECT log_compressed, outcomes_packed FROM run_bases WHERE id = ?').get(row.base_id) as BaseRow | undefined);
      if (!base) throw capstanError('ERR_INTERNAL', `run ${runId} refers to base ${row.base_id}, which is gone`);
      return { text: decodeRunLog(base, row.log_compressed) };
    });
  }

  async getRunLog(runId: number): Promise<Buffer | null> {
    const log = this.runLog(runId);
    return log === null ? null : 'raw' in log ? log.raw : compressSync(log.text, 'zstd');
  }

  async getRunLogText(runId: number, maxBytes: number): Promise<Buffer | null> {
    const log = this.runLog(runId);
    if (log === null) return null;
    if ('raw' in log) return decompress(log.raw, 'zstd', { maxBytes });
    if (log.text.length > maxBytes) throw capstanError('ERR_DECOMPRESSED_TOO_LARGE', `run log larger than ${maxBytes} bytes`);
    return log.text;
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
        const text = texts[i];
        if (!text) return;
        const s = this.againstBase(r.node_id as string, r.started_at_utc as string, text, unpackOutcomes(r.outcomes_packed, r.outcomes));
        converted += upd.run(s.log, s.outcomes, UNPACKED_PLACEHOLDER, s.base_id, r.id).changes;
      });
      this.db.stmt("UPDATE registry_counters SET value = ? WHERE name = 'runs_compacted_through'").run(last);
    });
    // The highest id, not a count of what is left: counting would scan the table at every batch.
    const maxId = this.db.read('compactRuns', () => Number(this.db.stmt('SELECT coalesce(max(id), 0) FROM runs').pluck().get()));
    return { converted, skipped: rows.length - converted, through_id: last, max_id: maxId, done: rows.length < limit };
  }

  // --- compliance ---------------------------------------------------------------------------

  async markUnreachable(before: string, at: string, limit: number): Promise<number> {
    const [b, when] = [toUtcIso(before, 'before'), toUtcIso(at, 'at')];
    return this.db.write('markUnreachable', () => {
      const ids = this.db.stmt(`SELECT id FROM nodes WHERE status = 'reachable' AND last_contact_at < ? ORDER BY id LIMIT ?`)
        .pluck().all(b, limit) as string[];
      const upd = this.db.stmt(`UPDATE nodes SET status = 'unreachable', updated_at = max(updated_at, ?) WHERE id = ?`);
      for (const id of ids) {
        upd.run(when, id);
        this.nodes.history([{ node_id: id, at: when, field: 'status', from: 'reachable', to: 'unreachable', cause: 'missed runs' }]);
      }
      return ids.length;
    });
  }

  async markMissing(before: string, at: string, limit: number): Promise<number> {
    const [b, when] = [toUtcIso(before, 'before'), toUtcIso(at, 'at')];
    return this.db.write('markMissing', () => {
      const rows = this.db.stmt(`SELECT id, state, status FROM nodes WHERE state IN (${inList(LIVE_STATES)})
        AND last_contact_at < ? ORDER BY id LIMIT ?`).all(b, limit) as Array<{ id: string; state: string; status: string }>;
      const upd = this.db.stmt(`UPDATE nodes SET state = '${MISSING}', status = 'unreachable', state_changed_at = ?,
        updated_at = max(updated_at, ?) WHERE id = ?`);
      for (const r of rows) {
        upd.run(when, when, r.id);
        const h: HistoryInsert[] = [{ node_id: r.id, at: when, field: 'state', from: r.state, to: MISSING, cause: 'silence' }];
        if (r.status !== 'unreachable') h.push({ node_id: r.id, at: when, field: 'status', from: r.status, to: 'unreachable', cause: 'silence' });
        this.nodes.history(h);
      }
      return rows.length;
    });
  }

  async purgeNodes(before: string, limit: number): Promise<number> {
    const b = toUtcIso(before, 'before');
    return this.db.write('purgeNodes', () => {
      const ids = this.db.stmt(`SELECT id FROM nodes WHERE state IN (${inList(PURGEABLE_STATES)}) AND state_changed_at < ?
        ORDER BY id LIMIT ?`).pluck().all(b, limit) as string[];
      const del = this.db.stmt('DELETE FROM nodes WHERE id = ?');
      for (const id of ids) del.run(id);
      this.bump('purged_nodes', ids.length);
      return ids.length;
    });
  }

  async deleteRunsBefore(before: string, limit: number): Promise<number> {
    const b = toUtcIso(before, 'before');
    return this.db.write('deleteRunsBefore', () => {
      const { changes } = this.db.stmt(`DELETE FROM runs WHERE id IN (
        SELECT id FROM runs WHERE started_at_utc < ? ORDER BY started_at_utc LIMIT ?)`).run(b, limit);
      this.bump('deleted_runs', changes);
      // Then the bases of days no run refers to any more (a base serves only runs of its day).
      if (changes < limit) {
        this.db.stmt(`DELETE FROM run_bases WHERE id IN (SELECT x.id FROM run_bases x WHERE x.day < ? AND NOT EXISTS (
            SELECT 1 FROM runs r WHERE r.node_id = x.node_id AND r.started_at_utc >= x.day AND r.started_at_utc < x.day || 'T99')
          LIMIT ?)`).run(runDay(b), limit - changes);
      }
      return changes;
    });
  }

  async pruneHistory(before: string, limit: number): Promise<number> {
    const b = toUtcIso(before, 'before');
    return this.db.write('pruneHistory', () =>
      this.db.stmt('DELETE FROM node_history WHERE id IN (SELECT id FROM node_history WHERE at < ? ORDER BY id LIMIT ?)').run(b, limit).changes);
  }

  async prepareRunStorage(_now: Date): Promise<void> {
    // One table, one time index: nothing to prepare ahead of time.
  }

  private bump(name: string, by: number): void {
    if (by > 0) this.db.stmt('UPDATE registry_counters SET value = value + ? WHERE name = ?').run(by, name);
  }

  async counts(): Promise<RegistryCounts> {
    return this.db.read('counts', () => {
      const group = (col: string) => Object.fromEntries(
        (this.db.stmt(`SELECT ${col} AS k, count(*) AS c FROM nodes GROUP BY ${col} ORDER BY ${col}`).all() as Array<{ k: string; c: number }>)
          .map((r) => [r.k, r.c]),
      );
      const counters = Object.fromEntries(
        (this.db.stmt('SELECT name, value FROM registry_counters').all() as Array<{ name: string; value: number }>).map((r) => [r.name, r.value]),
      );
      return {
        by_status: group('status'), by_state: group('state'), by_acceptance: group('accepted'),
        purged_nodes: Number(counters.purged_nodes ?? 0), deleted_runs: Number(counters.deleted_runs ?? 0),
      };
    });
  }
  async listPolicyObjects(kind: PolicyKind): Promise<PolicyObjectRecord[]> {
    const rows = this.db.read('listPolicyObjects', () =>
      this.db.stmt('SELECT kind, id, body, updated_at FROM policy_objects WHERE kind = ? ORDER BY id').all(kind)) as Array<Record<string, string>>;
    return rows.map(policyFromRow);
  }

  async getPolicyObject(kind: PolicyKind, id: string): Promise<PolicyObjectRecord | null> {
    const row = this.db.read('getPolicyObject', () =>
      this.db.stmt('SELECT kind, id, body, updated_at FROM policy_objects WHERE kind = ? AND id = ?').get(kind, id)) as Record<string, string> | undefined;
    return row ? policyFromRow(row) : null;
  }

  async putPolicyObject(kind: PolicyKind, id: string, body: Record<string, unknown>, at: string): Promise<boolean> {
    checkPolicyKey(kind, id);
    const json = policyBodyJson(body);
    const when = toUtcIso(at, 'at');
    return this.db.write('putPolicyObject', () => {
      const existed = this.db.stmt('SELECT 1 FROM policy_objects WHERE kind = ? AND id = ?').get(kind, id) !== undefined;
      this.db.stmt(`INSERT INTO policy_objects (kind, id, body, updated_at) VALUES (?, ?, ?, ?)
        ON CONFLICT (kind, id) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at`).run(kind, id, json, when);
      return !existed;
    });
  }

  async deletePolicyObject(kind: PolicyKind, id: string): Promise<boolean> {
    return this.db.write('deletePolicyObject', () => this.db.stmt('DELETE FROM policy_objects WHERE kind = ? AND id = ?').run(kind, id).changes > 0);
  }

  async getPolicyBundle(nodeId: string): Promise<PolicyBundleRecord | null> {
    const row = this.db.read('getPolicyBundle', () =>
      this.db.stmt('SELECT node_id, config_id, generated_at, bundle FROM policy_bundles WHERE node_id = ?').get(nodeId)) as PolicyBundleRecord | undefined;
    return row ?? null;
  }

  async putPolicyBundle(b: PolicyBundleRecord): Promise<boolean> {
    checkBundleRecord(b);
    const when = toUtcIso(b.generated_at, 'generated_at');
    return this.db.write('putPolicyBundle', () => {
      if (!this.db.stmt('SELECT 1 FROM nodes WHERE id = ?').get(b.node_id)) return false;
      this.db.stmt(`INSERT INTO policy_bundles (node_id, config_id, generated_at, bundle) VALUES (?, ?, ?, ?)
        ON CONFLICT (node_id) DO UPDATE SET config_id = excluded.config_id, generated_at = excluded.generated_at, bundle = excluded.bundle`)
        .run(b.node_id, b.config_id, when, b.bundle);
      return true;
    });
  }

  async policyConfigIds(nodeIds: string[]): Promise<Map<string, string>> {
    const out = new Map<string, string>();
    this.db.read('policyConfigIds', () => {
      for (let i = 0; i < nodeIds.length; i += 500) {
        const chunk = nodeIds.slice(i, i + 500);
        const rows = this.db.stmt(`SELECT node_id, config_id FROM policy_bundles WHERE node_id IN (${chunk.map(() => '?').join(', ')})`).all(...chunk) as Array<{ node_id: string; config_id: string }>;
        for (const r of rows) out.set(r.node_id, r.config_id);
      }
    });
    return out;
  }

  /**
   * A batch of generated policies (the generator writes up to a few hundred nodes at a time):
   * setExpectations' rules for each node, set-based. The nodes, their stored expectations and
   * their compliance bases are read with one statement each, the writes go out as multi-row
   * statements, and a node's compliance is recomputed only when this write changes the
   * expectations its last run is judged by (a new policy for a node still running the previous
   * one changes nothing there: that config's expectations are kept). Per node, one statement each
   * was 80% of a 100,000-node generation.
   */
  async putPolicies(items: PolicyWrite[]): Promise<number> {
    // The nodes of one generation share a handful of contents: check each list once.
    const memo = new Map<ExpectedComponent[], Map<string, { items: ExpectedComponent[]; json: string }>>();
    const checked = items.map((it) => {
      checkBundleRecord(it.bundle);
      let byConfig = memo.get(it.expected);
      if (!byConfig) memo.set(it.expected, (byConfig = new Map()));
      let expected = byConfig.get(it.bundle.config_id);
      if (!expected) byConfig.set(it.bundle.config_id, (expected = checkExpectations(it.bundle.config_id, it.expected)));
      return { bundle: it.bundle, when: toUtcIso(it.bundle.generated_at, 'generated_at'), expected, expectationsOnly: it.expectationsOnly === true };
    });
    return this.db.write('putPolicies', () => {
      let n = 0;
      for (let i = 0; i < checked.length; i += POLICY_CHUNK) n += this.putPolicyChunk(checked.slice(i, i + POLICY_CHUNK));
      return n;
    });
  }

  private putPolicyChunk(chunk: Array<{ bundle: PolicyBundleRecord; when: string; expected: { items: ExpectedComponent[]; json: string }; expectationsOnly: boolean }>): number {
    // Last write wins for a node named twice, as one statement per item would have it.
    const byNode = new Map(chunk.map((it) => [it.bundle.node_id, it]));
    const ids = JSON.stringify([...byNode.keys()]);
    const previous = new Map((this.db.stmt('SELECT id, policy_config_id FROM nodes WHERE id IN (SELECT value FROM json_each(?))').all(ids) as
      Array<{ id: string; policy_config_id: string | null }>).map((r) => [r.id, r.policy_config_id]));
    const stored = new Map<string, Map<string, string>>();
    for (const r of this.db.stmt('SELECT node_id, config_id, components FROM node_expectations WHERE node_id IN (SELECT value FROM json_each(?))').all(ids) as
      Array<{ node_id: string; config_id: string; components: string }>) {
      let m = stored.get(r.node_id);
      if (!m) stored.set(r.node_id, (m = new Map()));
      m.set(r.config_id, r.components);
    }
    const withRow = new Set(this.db.stmt('SELECT node_id FROM node_compliance WHERE node_id IN (SELECT value FROM json_each(?))').pluck().all(ids) as string[]);

    const live = [...byNode.values()].filter((it) => previous.has(it.bundle.node_id));
    const expectationRows: unknown[] = [];
    const gone: Array<[string, string]> = [];
    const byConfig = new Map<string, string[]>();
    const recompute: Array<{ nodeId: string; configId: string; previous: string | null; when: string; items: ExpectedComponent[] }> = [];
    for (const it of live) {
      const nodeId = it.bundle.node_id;
      const configId = it.bundle.config_id;
      const keep = previous.get(nodeId) ?? configId;
      const mine = stored.get(nodeId) ?? new Map<string, string>();
      expectationRows.push([nodeId, configId, it.when, it.expected.json]);
      for (const c of mine.keys()) if (c !== configId && c !== keep) gone.push([nodeId, c]);
      const list = byConfig.get(configId) ?? [];
      list.push(nodeId);
      byConfig.set(configId, list);
      // A node is judged by its current policy's expectations: recomputed when they change,
      // left alone when the same policy is written again.
      const prevConfig = previous.get(nodeId) ?? null;
      if (!withRow.has(nodeId) || prevConfig !== configId || mine.get(configId) !== it.expected.json) {
        recompute.push({ nodeId, configId, previous: prevConfig, when: it.when, items: it.expected.items });
      }
    }
    if (live.length === 0) return 0;
    this.db.stmt(`INSERT INTO node_expectations (node_id, config_id, set_at, components)
        SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3 FROM json_each(?) WHERE true
      ON CONFLICT (node_id, config_id) DO UPDATE SET set_at = excluded.set_at, components = excluded.components`).run(JSON.stringify(expectationRows));
    if (gone.length) {
      this.db.stmt('DELETE FROM node_expectations WHERE (node_id, config_id) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?))').run(JSON.stringify(gone));
    }
    for (const [configId, nodes] of byConfig) {
      this.db.stmt('UPDATE nodes SET policy_config_id = ? WHERE id IN (SELECT value FROM json_each(?))').run(configId, JSON.stringify(nodes));
    }
    this.db.stmt(`INSERT INTO policy_bundles (node_id, config_id, generated_at, bundle)
        SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3 FROM json_each(?) WHERE true
      ON CONFLICT (node_id) DO UPDATE SET config_id = excluded.config_id, generated_at = excluded.generated_at, bundle = excluded.bundle`)
      .run(JSON.stringify(live.filter((it) => !it.expectationsOnly).map((it) => [it.bundle.node_id, it.bundle.config_id, it.when, it.bundle.bundle])));
    for (const r of recompute) this.compliance.recompute(r.nodeId, r.configId, r.previous, r.items, r.when);
    return live.length;
  }

  // --- changes ------------------------------------------------------------------------------

  async deleteChangesBefore(before: string, limit: number): Promise<number> {
    const b = toUtcIso(before, 'before');
    return this.db.write('deleteChangesBefore', () =>
      this.db.stmt('DELETE FROM changes WHERE id IN (SELECT id FROM changes WHERE at < ? ORDER BY at LIMIT ?)').run(b, limit).changes
      // Inventory changes are kept as long (GET /api/1/nodes/<id>/inventory/history).
      + this.db.stmt('DELETE FROM inventory_changes WHERE id IN (SELECT id FROM inventory_changes WHERE at < ? ORDER BY at LIMIT ?)').run(b, limit).changes);
  }

  async deletePolicyBundle(nodeId: string): Promise<boolean> {
    return this.db.write('deletePolicyBundle', () => this.db.stmt('DELETE FROM policy_bundles WHERE node_id = ?').run(nodeId).changes > 0);
  }
}

function policyFromRow(r: Record<string, string>): PolicyObjectRecord {
  return { kind: r.kind as PolicyKind, id: r.id!, body: JSON.parse(r.body!) as Record<string, unknown>, updated_at: r.updated_at! };
}
