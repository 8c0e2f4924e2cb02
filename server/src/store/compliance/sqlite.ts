/**
 * Compliance on SQLite: per node, the counts of its last complete run against its current
 * policy's expectations (node_compliance) and one row per (rule, directive), kept up to date as
 * runs and policies arrive; aggregates apply the time states when read (rows.ts).
 */
import type { SqliteDb } from '../sqlite/db.js';
import { ExpectationListCache } from './lists.js';
import { checkExpectations, checkKeepLast, checkPaging, type CheckedExpectations } from '../input.js';
import { filterWhere } from '../nodes/filters/query.js';
import { sqliteDialect } from '../nodes/filters/sqlite.js';
import type { SqliteNodes } from '../nodes/sqlite.js';
import type { SqliteEvents } from '../events/sqlite.js';
import type { SqliteFindings } from '../findings/sqlite.js';
import type { NodeFilter, NodeRecord } from '../nodes/types.js';
import { UNPACKED_PLACEHOLDER, complianceOutcomes, runOutcomes, type OnUnreadable } from '../runs/outcomes.js';
import type { RunInsert } from '../runs/types.js';
import { toUtcIso } from '../time.js';
import {
  aggregateFromRows, clockParams, clockSubquery, complianceClassSql, complianceRows, COUNT_COLUMNS,
  directiveChangesRaw, type DirectiveRow, epochS, findingContext, groupsFreshSql, groupsFromRows, listDelta, marksFromRow, nextMarks, nodeComplianceFromRow, ruleComplianceFromRow, timeAdjustedColumns,
  sameRowsUnder, targetNodesSql, targetSpec, timeAdjustedSums, worstNodesSql, type ComplianceInput, type FindingContext,
} from './rows.js';
import type {
  ComplianceAggregate, ComplianceBase, ComplianceClock, ComplianceStore, ExpectedComponent, GroupComplianceRow, NodeComplianceRow, RuleComplianceRow,
  TargetNodesPage, TargetNodesQuery,
} from './types.js';
import { sqliteKeptByGroup, sqliteKeptByRule, sqliteKeptSummary, sqliteKeptSweep, sqliteKeptWorst, sqliteSwept } from './kept-sqlite.js';
import { targetKeptSql } from './kept-targets.js';
import { membershipChanges } from './members.js';
import { BatchCounters, withMembersCounted } from './sqlite-batch-counters.js';
import { countsWithAdditions, listAdditions, rowsWithAdditions, type DirectiveAddition } from './additions.js';
import { RunJudge } from './judged.js';
import type { NodeTimeMarks } from '@capstan/shared/compliance/compute';
import { SQLITE_DEFERRED_TARGETS } from '../migrations/0037_kept_targets_normal.js';
import type { KeptSweep } from './kept.js';
import {
  COMPLIANCE_ROWS, complianceValues, DEFER_TARGETS, DELETE_DIRECTIVE_ROWS_MANY, DIRECTIVE_CHUNK, DIRECTIVE_ROWS, policyInput, SELECT_CURRENT, SELECT_CURRENT_MANY,
  rowsByNode, SELECT_DIRECTIVE_ROWS, SELECT_DIRECTIVE_ROWS_MANY, SELECT_DIRECTIVE_ROWS_OF, SELECT_MARKS, UPDATE_APPLYING_MANY, UPDATE_MARKS_MANY, UPSERT_COMPLIANCE, upsertDirectivesSql,
} from './sqlite-statements.js';

export class SqliteCompliance implements ComplianceStore {
  /** Expectation lists parsed, by digest. */
  private readonly lists = new ExpectationListCache();

  constructor(
    private readonly db: SqliteDb,
    private readonly nodes: SqliteNodes,
    private readonly findings: SqliteFindings,
    private readonly events: SqliteEvents,
    readonly onUnreadable?: OnUnreadable, // told of stored outcomes read as none (runs/outcomes.ts)
  ) {}

  /** The expectations stored for one config id of a node, inside the caller's transaction. */
  expectations(nodeId: string, configId: string): ExpectedComponent[] | null {
    const digest = this.db.stmt('SELECT list FROM node_expectations WHERE node_id = ? AND config_id = ?').pluck().get(nodeId, configId) as string | undefined;
    return digest === undefined ? null : this.list(digest);
  }

  /** The expectation list named `digest`, null when none is stored. */
  private list(digest: string): ExpectedComponent[] | null {
    return this.lists.get(digest, () => this.db.stmt('SELECT components FROM expectation_lists WHERE digest = ?').pluck().get(digest) as string | undefined);
  }

  /** When a config's expectations were set for a node (epoch seconds), null when they are not stored. */
  private expectationsSetS(nodeId: string, configId: string): number | null {
    const at = this.db.stmt('SELECT set_at FROM node_expectations WHERE node_id = ? AND config_id = ?').pluck().get(nodeId, configId) as string | undefined;
    return at === undefined ? null : epochS(at);
  }

  /** What a stored run does to its node's compliance, inside the run's transaction. */
  runStored(node: NodeRecord, run: RunInsert, id: number, startedUtc: string, receivedAt: string, packed: Buffer): void {
    const receivedS = epochS(receivedAt);
    let written = false;
    if (run.complete) {
      // Steady state: the same config reporting the same outcomes as last time changes no
      // number, so only the base run and the answer time move (one statement instead of a
      // recomputation; the time marks stay right: same config as the base run's).
      // Its findings stay as they are: an open one's last sighting and run count are this row's
      // (runs_seen > 0: a row from before findings goes through the full write once).
      const same = this.db.stmt(`UPDATE node_compliance SET run_id = ?, run_started_at = ?, run_started_utc = ?, computed_at = ?,
          answered_s = max(coalesce(answered_s, 0), ?), runs_seen = runs_seen + 1
        WHERE node_id = ? AND run_id IS NOT NULL AND run_started_utc <= ? AND config_id IS ? AND outcomes_packed = ? AND runs_seen > 0`)
        .run(id, run.started_at, startedUtc, receivedAt, receivedS, run.node_id, startedUtc, run.config_id ?? null, packed);
      written = same.changes > 0;
      const cur = written ? undefined : this.db.stmt(SELECT_MARKS).get(run.node_id) as Record<string, unknown> | undefined;
      // Only the newest complete run decides compliance; a back-filled older one does not.
      if (!written && (!cur || cur.run_started_utc === null || (cur.run_started_utc as string) <= startedUtc)) {
        const policy = node.policy_config_id;
        this.writeCompliance({
          nodeId: run.node_id,
          run: { id, started_at: run.started_at, started_utc: startedUtc, config_id: run.config_id ?? null },
          outcomes: runOutcomes(run),
          outcomesPacked: packed,
          expected: policy === null ? null : this.expectations(run.node_id, policy),
          marks: nextMarks(marksFromRow(cur), {
            kind: 'run', received_s: receivedS, run_config_id: run.config_id ?? null, policy_config_id: policy,
            policy_set_s: policy === null ? null : this.expectationsSetS(run.node_id, policy),
          }),
        }, receivedAt, findingContext(cur, { id, started_utc: startedUtc }, startedUtc, run.findings ?? []));
        written = true;
      }
    }
    // Any run is an answer: an incomplete or back-filled one too.
    if (!written) this.db.stmt('UPDATE node_compliance SET answered_s = max(coalesce(answered_s, 0), ?) WHERE node_id = ?').run(receivedS, run.node_id);
  }

  private writeCompliance(input: ComplianceInput, at: string, f: FindingContext): void {
    const { counts, directives, items } = complianceRows(input);
    this.db.stmt(UPSERT_COMPLIANCE).run(complianceValues(input, at, f, counts));
    // A node failing nowhere, before or now, has no finding to open or close (most runs).
    if (f.failing_before > 0 || counts.error + counts.non_compliant > 0) {
      this.events.write(this.findings.reconcile({ node_id: input.nodeId, run: f.run, at: f.at, items, reports: f.reports, runs_seen: f.runs_seen, last_seen: f.last_seen }));
    }
    const stored = this.db.stmt(SELECT_DIRECTIVE_ROWS).raw(true).all(input.nodeId) as unknown[][];
    const { upsert, remove } = directiveChangesRaw(stored, directives);
    const del = this.db.stmt('DELETE FROM node_compliance_directives WHERE node_id = ? AND rule_id = ? AND directive_id = ?');
    for (const r of remove) del.run(input.nodeId, r.rule_id, r.directive_id);
    // Multi-row statements: one call into SQLite per chunk instead of one per directive.
    for (let i = 0; i < upsert.length; i += DIRECTIVE_CHUNK) {
      const part = upsert.slice(i, i + DIRECTIVE_CHUNK);
      const values: unknown[] = [];
      for (const d of part) {
        values.push(input.nodeId, d.rule_id, d.directive_id);
        for (const c of COUNT_COLUMNS) values.push(d.counts[c]);
      }
      this.db.stmt(upsertDirectivesSql(part.length)).run(values);
    }
  }

  async setExpectations(nodeId: string, configId: string, items: ExpectedComponent[], at: string, opts: { keep_last_s?: number } = {}): Promise<boolean> {
    const checked = checkExpectations(configId, items);
    const when = toUtcIso(at, 'at');
    return this.db.write('setExpectations', () => this.expectationsTx(nodeId, configId, checked, when, opts.keep_last_s));
  }

  /** setExpectations' work, inside the caller's write transaction. */
  private expectationsTx(nodeId: string, configId: string, checked: CheckedExpectations, when: string, keepLastS?: number): boolean {
    {
      // Only the previous policy's config id is needed: reading the whole node (and its
      // certificate) was a third of a 100,000-node generation.
      const node = this.db.stmt('SELECT policy_config_id FROM nodes WHERE id = ?').get(nodeId) as { policy_config_id: string | null } | undefined;
      if (!node) return false;
      this.db.stmt('INSERT INTO expectation_lists (digest, components, used_at) VALUES (?, ?, ?) ON CONFLICT (digest) DO NOTHING').run(checked.digest, checked.json, when);
      this.db.stmt(`INSERT INTO node_expectations (node_id, config_id, set_at, list) VALUES (?, ?, ?, ?)
        ON CONFLICT (node_id, config_id) DO UPDATE SET set_at = excluded.set_at, list = excluded.list`)
        .run(nodeId, configId, when, checked.digest);
      // Keep this config's and the previous policy's: a node may still run the previous one.
      const keep = node.policy_config_id ?? configId;
      this.db.stmt('DELETE FROM node_expectations WHERE node_id = ? AND config_id NOT IN (?, ?)').run(nodeId, configId, keep);
      this.db.stmt('UPDATE nodes SET policy_config_id = ? WHERE id = ?').run(configId, nodeId);
      this.recompute(nodeId, configId, node.policy_config_id, checked.items, when, keepLastS);
      return true;
    }
  }

  /**
   * A node's compliance after its policy became `configId` (from `previous`): judged against
   * that policy's expectations, with its time marks moved on (rows.ts nextMarks).
   */
  recompute(nodeId: string, configId: string, previous: string | null, items: ExpectedComponent[], when: string, keepLastS?: number): void {
    const cur = this.db.stmt(SELECT_CURRENT).get(nodeId) as Record<string, unknown> | undefined;
    const hasRun = cur !== undefined && cur.run_id !== null;
    const marks = nextMarks(marksFromRow(cur), {
      kind: 'policy', at_s: epochS(when), config_id: configId, previous_config_id: previous,
      run_config_id: hasRun ? (cur.config_id as string | null) : null, ...(keepLastS === undefined ? {} : { keep_last_s: keepLastS }),
    });
    this.writeCompliance(policyInput(nodeId, cur, items, marks, new RunJudge(this.onUnreadable)), when, findingContext(cur, null, when, []));
  }

  /**
   * recompute for many nodes at once (a generation's batch, each node once), inside the caller's
   * write transaction: the same rows as one recompute per node, with one statement per kind of
   * read and write instead of five per node (a quarter of a 20,000-node generation under the profiler).
   * A node's directive rows that go are deleted before its compliance row moves to its new time
   * state, and the new ones written after. The kept directive counters of the nodes whose rows
   * change are moved once for the batch, summed by key (sqlite-batch-counters.ts), not by the
   * triggers row by row.
   * `rowsKept`: the node's stored rows were counted from the same run against the same
   * expectations (the caller compared their digests): neither read nor written, and when the
   * node fails nowhere its compliance row has only its time marks updated. `rowsFrom`: the
   * digest of the list they were counted against, when another: neither read nor written either
   * when the new list counts the node's run into the same rows (rows.ts sameRowsUnder), and
   * when it only adds components, its rows are made from the stored ones without its run's
   * outcomes, unless the run may have reported on one of them (additions.ts). `runs` judges
   * each distinct run once (judged.ts; one for the caller's whole write).
   */
  recomputeMany(items: ReadonlyArray<{ nodeId: string; configId: string; previous: string | null; items: ExpectedComponent[]; when: string; rowsKept?: boolean; rowsFrom?: string }>, runs = new RunJudge(this.onUnreadable)): void {
    if (items.length === 0) return;
    const current = new Map<string, Record<string, unknown>>();
    for (const r of this.db.stmt(SELECT_CURRENT_MANY).all(JSON.stringify(items.map((it) => it.nodeId))) as Array<Record<string, unknown>>) current.set(r.node_id as string, r);
    const compliance: unknown[][] = [];
    const marksOnly: unknown[][] = [];
    const applyingOnly: unknown[][] = [];
    // Findings reconciled in the batch's order, as one recompute per node would (their ids and events follow it).
    const reconcile: Array<{ at: number; run: () => void }> = [];
    const moved: Array<{ nodeId: string; directives: DirectiveRow[] }> = [];
    type Item = (typeof items)[number];
    // Most often only the applying mark moves: the silence index (answer time + keep) is then left alone.
    const marksRow = (it: Item, cur: Record<string, unknown>, marks: NodeTimeMarks) => (cur.answered_s === marks.answered_s && cur.keep_last_s === marks.keep_last_s
      ? applyingOnly.push([it.nodeId, it.when, marks.applying_since_s])
      : marksOnly.push([it.nodeId, it.when, marks.applying_since_s, marks.answered_s, marks.keep_last_s]));
    /** The node judged from its run. */
    const judge = (at: number, it: Item, cur: Record<string, unknown> | undefined, marks: NodeTimeMarks, quiet: boolean, before: ExpectedComponent[] | null) => {
      const input = policyInput(it.nodeId, cur, it.items, marks, runs);
      // A list that differs only in components the run did not report on (a template's new
      // values renamed a component) counts the same directive rows, and so the same totals.
      const sameRows = it.rowsKept || (before !== null && sameRowsUnder(input.outcomes, listDelta(before, it.items)));
      if (sameRows && quiet) return void marksRow(it, cur!, marks);
      const f = findingContext(cur, null, it.when, []);
      const { counts, directives, items: states } = runs.rows(input);
      compliance.push(complianceValues(input, it.when, f, counts));
      if (f.failing_before > 0 || counts.error + counts.non_compliant > 0) {
        reconcile.push({ at, run: () => this.events.write(this.findings.reconcile({
          node_id: it.nodeId, run: f.run, at: f.at, items: states, reports: f.reports, runs_seen: f.runs_seen, last_seen: f.last_seen,
        })) });
      }
      if (!sameRows) moved.push({ nodeId: it.nodeId, directives });
    };
    // Quiet nodes whose new list only adds components: their rows follow from the stored ones (additions.ts).
    const adding: Array<{ at: number; it: Item; cur: Record<string, unknown>; marks: NodeTimeMarks; before: ExpectedComponent[]; added: ReadonlyMap<string, DirectiveAddition> }> = [];
    for (const [at, it] of items.entries()) {
      const cur = current.get(it.nodeId);
      const hasRun = cur !== undefined && cur.run_id !== null;
      const marks = nextMarks(marksFromRow(cur), {
        kind: 'policy', at_s: epochS(it.when), config_id: it.configId, previous_config_id: it.previous,
        run_config_id: hasRun ? (cur.config_id as string | null) : null,
      });
      // Failing nowhere, its outcomes packed: the same counts open no finding and pack nothing.
      const quiet = cur !== undefined && Number(cur.error) + Number(cur.non_compliant) === 0
        && (cur.outcomes_packed !== null || cur.outcomes === UNPACKED_PLACEHOLDER);
      // Rows kept: the same run against the same list counts what the row holds, so only its
      // time marks move (the outcomes neither unpacked nor judged again).
      if (it.rowsKept && quiet) {
        marksRow(it, cur!, marks);
        continue;
      }
      const before = it.rowsFrom === undefined || cur === undefined ? null : this.list(it.rowsFrom);
      const added = quiet && hasRun && before !== null ? listAdditions(before, it.items) : null;
      if (added?.size === 0) marksRow(it, cur!, marks);
      else if (added) adding.push({ at, it, cur: cur!, marks, before: before!, added });
      else judge(at, it, cur, marks, quiet, before);
    }
    // A list that only adds: only the rows of the directives that gain components are read and
    // written; the node's others stay as they are, and its counters move in SQL (BatchCounters).
    const touched = rowsByNode(this.db, SELECT_DIRECTIVE_ROWS_OF, adding.flatMap((a) => [...a.added.values()].map((d) => [a.it.nodeId, d.rule_id, d.directive_id])));
    const partial: Array<{ nodeId: string; directives: DirectiveRow[] }> = [];
    const refused: typeof adding = [];
    for (const a of adding) {
      const directives = rowsWithAdditions(touched.get(a.it.nodeId) ?? [], a.added);
      if (directives === null) {
        refused.push(a);
        continue;
      }
      const input = policyInput(a.it.nodeId, a.cur, a.it.items, a.marks, null);
      compliance.push(complianceValues(input, a.it.when, findingContext(a.cur, null, a.it.when, []), countsWithAdditions(a.cur, a.added)));
      partial.push({ nodeId: a.it.nodeId, directives });
    }
    for (const { at, it, cur, marks, before } of refused) judge(at, it, cur, marks, true, before);
    const stored = rowsByNode(this.db, SELECT_DIRECTIVE_ROWS_MANY, moved.map((m) => m.nodeId));
    const remove: Array<[string, string, string]> = [];
    const upsert: unknown[][] = [];
    // Each node's rows against the ones read for it: all of a judged node's, those that gain of a partial one.
    for (const [nodes, read] of [[moved, stored], [partial, touched]] as const) {
      for (const { nodeId, directives } of nodes) {
        const changes = directiveChangesRaw(read.get(nodeId) ?? [], directives);
        for (const r of changes.remove) remove.push([nodeId, r.rule_id, r.directive_id]);
        for (const d of changes.upsert) upsert.push([nodeId, d.rule_id, d.directive_id, ...COUNT_COLUMNS.map((c) => d.counts[c])]);
      }
    }
    // The drill-down keys of the nodes whose rows move are made once for all of them, after
    // every write (migration 29), not once per row written; their directive counters are moved
    // once, summed by key, after the writes (migration 38).
    const deferred = new Set([...remove.map((r) => r[0]), ...upsert.map((r) => r[0] as string)]);
    if (deferred.size) this.db.stmt(DEFER_TARGETS).run(JSON.stringify([...deferred]));
    const counters = deferred.size ? new BatchCounters(this.db, deferred, partial.map((p) => p.nodeId).filter((id) => deferred.has(id))) : null;
    if (remove.length) this.db.stmt(DELETE_DIRECTIVE_ROWS_MANY).run(JSON.stringify(remove));
    COMPLIANCE_ROWS.run(this.db, compliance);
    if (marksOnly.length) this.db.stmt(UPDATE_MARKS_MANY).run(JSON.stringify(marksOnly));
    if (applyingOnly.length) this.db.stmt(UPDATE_APPLYING_MANY).run(JSON.stringify(applyingOnly));
    for (const r of reconcile.sort((a, b) => a.at - b.at)) r.run();
    DIRECTIVE_ROWS.run(this.db, upsert);
    counters?.finish(moved.filter((m) => deferred.has(m.nodeId)).map((m) => ({ nodeId: m.nodeId, before: stored.get(m.nodeId) ?? [], after: m.directives })));
    if (deferred.size) for (const sql of SQLITE_DEFERRED_TARGETS) this.db.stmt(sql).run();
  }

  async getExpectations(nodeId: string, configId: string): Promise<ExpectedComponent[] | null> {
    return this.db.read('getExpectations', () => this.expectations(nodeId, configId));
  }

  async getComplianceBase(nodeId: string): Promise<ComplianceBase | null> {
    return this.db.read('getComplianceBase', () => {
      const node = this.nodes.node(nodeId);
      if (!node) return null;
      const cls = this.db.stmt(`SELECT ${complianceClassSql} AS class FROM nodes n WHERE n.id = ?`).pluck().get(nodeId) as string;
      const cur = this.db.stmt(`SELECT run_id, run_started_at, config_id, outcomes, outcomes_packed, applying_since_s, answered_s, keep_last_s
        FROM node_compliance WHERE node_id = ?`).get(nodeId) as Record<string, unknown> | undefined;
      const policy = node.policy_config_id;
      const hasRun = cur !== undefined && cur.run_id !== null;
      return {
        node_id: nodeId,
        run: hasRun ? { id: cur.run_id as number, started_at: cur.run_started_at as string, config_id: (cur.config_id as string | null) ?? null } : null,
        policy_config_id: policy,
        expected: policy === null ? null : this.expectations(nodeId, policy),
        outcomes: hasRun ? complianceOutcomes(nodeId, cur.outcomes_packed, cur.outcomes, this.onUnreadable) : [],
        marks: marksFromRow(cur) ?? { applying_since_s: null, answered_s: null, keep_last_s: 0 },
        relay: cls === 'relay',
        has_agent: cls !== 'agentless',
      };
    });
  }

  async complianceSummary(filters: NodeFilter[], clock: ComplianceClock, nodeIds?: string[]): Promise<ComplianceAggregate> {
    // The whole fleet is kept (kept.ts); any narrower set is summed over its nodes.
    if (filters.length === 0 && nodeIds === undefined) return sqliteKeptSummary(this.db, clock);
    return this.summaryOver(filters, clock, nodeIds);
  }

  async complianceSummaryFresh(clock: ComplianceClock): Promise<ComplianceAggregate> {
    return this.summaryOver([], clock);
  }

  private async summaryOver(filters: NodeFilter[], clock: ComplianceClock, nodeIds?: string[]): Promise<ComplianceAggregate> {
    const checked = this.nodes.storeRules.filters.check({ filters });
    const values: unknown[] = [...clockParams(clock)];
    const scope = ["n.accepted = 'accepted'"];
    if (nodeIds) {
      values.push(JSON.stringify(nodeIds));
      scope.push('n.id IN (SELECT value FROM json_each(?))');
    }
    const where = filterWhere(checked, sqliteDialect(this.db, values, checked, this.nodes.storeRules.filters.check), scope);
    const rows = this.db.read('complianceSummary', () => this.db.stmt(`SELECT ${complianceClassSql} AS class, count(*) AS nodes,
        count(t.node_id) AS with_data, ${timeAdjustedSums('t', 't')}
      FROM ${clockSubquery('?', '?')} CROSS JOIN nodes n LEFT JOIN node_compliance t ON t.node_id = n.id ${where}
      GROUP BY 1`).all(...values)) as Record<string, unknown>[];
    return aggregateFromRows(rows);
  }

  async complianceNodes(after: string | null, limit: number, clock: ComplianceClock, filters: NodeFilter[] = []): Promise<NodeComplianceRow[]> {
    const checked = this.nodes.storeRules.filters.check({ filters });
    const values: unknown[] = [...clockParams(clock)];
    const scope = ["n.accepted = 'accepted'"];
    if (after !== null) {
      values.push(after);
      scope.push('n.id > ?');
    }
    const where = filterWhere(checked, sqliteDialect(this.db, values, checked, this.nodes.storeRules.filters.check), scope);
    values.push(limit);
    // Walking the primary key in order reads one page per call (the acceptance index, which the
    // planner prefers, sorted every accepted node for each page: 40 s for 100,000 nodes).
    const rows = this.db.read('complianceNodes', () => this.db.stmt(`SELECT n.id AS node_id, n.hostname, n.status, n.state, n.last_run_at,
        n.policy_config_id, ${complianceClassSql} AS class, ${timeAdjustedColumns('t', 't')}
      FROM nodes n INDEXED BY sqlite_autoindex_nodes_1 CROSS JOIN ${clockSubquery('?', '?')} LEFT JOIN node_compliance t ON t.node_id = n.id ${where}
      ORDER BY n.id LIMIT ?`).all(...values)) as Record<string, unknown>[];
    return rows.map(nodeComplianceFromRow);
  }

  async worstNodes(limit: number, clock: ComplianceClock): Promise<NodeComplianceRow[]> {
    return sqliteKeptWorst(this.db, limit, clock);
  }

  async worstNodesFresh(limit: number, clock: ComplianceClock): Promise<NodeComplianceRow[]> {
    const rows = this.db.read('worstNodes', () => this.db.stmt(worstNodesSql(() => '?', complianceClassSql))
      .all(...clockParams(clock), limit)) as Record<string, unknown>[];
    return rows.map(nodeComplianceFromRow);
  }

  async targetNodes(q: TargetNodesQuery, clock: ComplianceClock): Promise<TargetNodesPage> {
    const { limit, offset } = checkPaging(q.page, q.per_page);
    return this.db.read('targetNodes', () => {
      const sql = targetKeptSql(() => '?', complianceClassSql, targetSpec(q), clock, sqliteSwept(this.db), limit, offset, false);
      const { total } = this.db.stmt(sql.total.text).get(...sql.total.values) as { total: number };
      const page = sql.page(Number(total));
      const rows = page ? this.db.stmt(page.text).all(...page.values) as Record<string, unknown>[] : [];
      return { data: rows.map(nodeComplianceFromRow), total: Number(total) };
    });
  }

  async targetNodesFresh(q: TargetNodesQuery, clock: ComplianceClock): Promise<TargetNodesPage> {
    const { limit, offset } = checkPaging(q.page, q.per_page);
    const values: unknown[] = [];
    const sql = targetNodesSql((v) => (values.push(v), '?'), complianceClassSql, targetSpec(q), clock, limit, offset);
    const rows = this.db.read('targetNodes', () => this.db.stmt(sql).all(...values)) as Record<string, unknown>[];
    // A page past the end has no row to carry the total.
    const total = rows.length ? Number(rows[0]!.total_rows) : offset === 0 ? 0 : (await this.targetNodesFresh({ ...q, page: 1, per_page: 1 }, clock)).total;
    return { data: rows.map(nodeComplianceFromRow), total };
  }

  async complianceByRule(by: 'rule' | 'directive', clock: ComplianceClock): Promise<RuleComplianceRow[]> {
    return sqliteKeptByRule(this.db, by, clock);
  }

  async sweepCompliance(clock: ComplianceClock, step?: number): Promise<KeptSweep> {
    return sqliteKeptSweep(this.db, clock, step);
  }

  async complianceByGroup(clock: ComplianceClock): Promise<GroupComplianceRow[]> {
    return sqliteKeptByGroup(this.db, clock);
  }

  async complianceByGroupFresh(clock: ComplianceClock): Promise<GroupComplianceRow[]> {
    return groupsFromRows(this.db.read('complianceByGroup', () => this.db.stmt(groupsFreshSql(() => '?')).all(...clockParams(clock))) as Record<string, unknown>[]);
  }

  async putGroupMembers(nodeIds: readonly string[], groups: ReadonlyMap<string, readonly string[]>): Promise<number> {
    if (nodeIds.length === 0) return 0;
    return this.db.write('putGroupMembers', () => {
      const stored = this.db.stmt('SELECT node_id, group_id FROM policy_group_members WHERE node_id IN (SELECT value FROM json_each(?))')
        .all(JSON.stringify(nodeIds)) as Array<{ node_id: string; group_id: string }>;
      const { added, removed } = membershipChanges(nodeIds, groups, stored);
      if (added.length + removed.length === 0) return 0;
      // One statement each way for the batch, the pairs as JSON ([group, node]); the group
      // counters moved once per key for the batch (migration 38).
      withMembersCounted(this.db, removed, added, () => {
        if (removed.length) {
          this.db.stmt(`DELETE FROM policy_group_members WHERE (group_id, node_id) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?))`)
            .run(JSON.stringify(removed));
        }
        // A node deleted meanwhile gets none (its deletion took its memberships).
        if (added.length) {
          this.db.stmt(`INSERT INTO policy_group_members (group_id, node_id)
            SELECT j.value ->> 0, n.id FROM json_each(?) j JOIN nodes n ON n.id = j.value ->> 1 WHERE true ON CONFLICT DO NOTHING`).run(JSON.stringify(added));
        }
      });
      return added.length + removed.length;
    });
  }

  async groupMembersOf(nodeId: string): Promise<string[]> {
    const rows = this.db.read('groupMembersOf', () => this.db.stmt('SELECT group_id FROM policy_group_members WHERE node_id = ? ORDER BY group_id')
      .all(nodeId)) as Array<{ group_id: string }>;
    return rows.map((r) => r.group_id);
  }

  async complianceByRuleFresh(by: 'rule' | 'directive', clock: ComplianceClock): Promise<RuleComplianceRow[]> {
    const keys = by === 'rule' ? 'x.rule_id' : 'x.rule_id, x.directive_id';
    const rows = this.db.read('complianceByRule', () => this.db.stmt(`SELECT ${keys}, count(DISTINCT x.node_id) AS nodes, ${timeAdjustedSums('x', 't')}
      FROM ${clockSubquery('?', '?')} CROSS JOIN node_compliance_directives x JOIN nodes n ON n.id = x.node_id
        JOIN node_compliance t ON t.node_id = x.node_id
      WHERE n.accepted = 'accepted' AND ${complianceClassSql} = 'agent'
      GROUP BY ${keys} ORDER BY ${keys}`).all(...clockParams(clock))) as Record<string, unknown>[];
    return rows.map((r) => ruleComplianceFromRow(r, by));
  }

  async setKeepLast(nodeIds: string[], seconds: number): Promise<number> {
    const keep = checkKeepLast(seconds)!;
    return this.db.write('setKeepLast', () => this.db.stmt(`UPDATE node_compliance SET keep_last_s = ?
      WHERE node_id IN (SELECT value FROM json_each(?)) AND keep_last_s <> ?`).run(keep, JSON.stringify(nodeIds), keep).changes);
  }
}
