/**
 * Compliance on PostgreSQL: per node, the counts of its last complete run against its current
 * policy's expectations (node_compliance) and one row per (rule, directive), kept up to date as
 * runs and policies arrive under the node's row lock; aggregates apply the time states when read.
 */
import type pg from 'pg';
import { iso, type PostgresDb, type Queryable as Q } from '../postgres/db.js';
import { checkExpectations, checkKeepLast, checkPaging, type CheckedExpectations } from '../input.js';
import { filterWhere } from '../nodes/filters/query.js';
import { postgresDialect } from '../nodes/filters/postgres.js';
import type { PostgresNodes } from '../nodes/postgres.js';
import type { PostgresFindings } from '../findings/postgres.js';
import type { PostgresEvents } from '../events/postgres.js';
import type { EventInsert } from '../events/types.js';
import type { NodeFilter, NodeRecord } from '../nodes/types.js';
import { UNPACKED_PLACEHOLDER, complianceOutcomes, packedOrNull, runOutcomes, type OnUnreadable } from '../runs/outcomes.js';
import type { RunInsert } from '../runs/types.js';
import { toUtcIso } from '../time.js';
import {
  aggregateFromRows, clockParams, clockSubquery, complianceClassSql, complianceRows, COUNT_COLUMNS, epochS, findingContext, groupsFreshSql, groupsFromRows, marksFromRow, nextMarks,
  nodeComplianceFromRow, ruleComplianceFromRow, targetNodesSql, targetSpec, timeAdjustedColumns, timeAdjustedSums, worstNodesSql, type ComplianceInput, type FindingContext,
} from './rows.js';
import type {
  ComplianceAggregate, ComplianceBase, ComplianceClock, ComplianceStore, ExpectedComponent, GroupComplianceRow, NodeComplianceRow, RuleComplianceRow,
  TargetNodesPage, TargetNodesQuery,
} from './types.js';
import { postgresKeptByGroup, postgresKeptByRule, postgresKeptSummary, postgresKeptSweep, postgresKeptWorst, postgresPutGroupMembers, postgresSwept, snapshot } from './kept-postgres.js';
import { targetKeptSql } from './kept-targets.js';
import type { KeptSweep } from './kept.js';
import { DirectiveCache } from './directive-cache.js';
import { complianceRunsStored, type StoredRun } from './postgres-batch.js';
import { policyExpectationsMany, storeLists, touchLists, type PolicyExpectation } from './postgres-policy.js';
import { RunJudge } from './judged.js';

export class PostgresCompliance implements ComplianceStore {
  /** Nodes' expectations and directive rows as stored, for the ingest's batches (`[database] directive_cache`). */
  readonly directiveCache: DirectiveCache;

  constructor(
    private readonly db: PostgresDb,
    private readonly nodes: PostgresNodes,
    private readonly findings: PostgresFindings,
    private readonly events: PostgresEvents,
    directiveCacheBytes?: number,
    /** Told of a node's stored outcomes that cannot be read, and are read as none (runs/outcomes.ts). */
    readonly onUnreadable?: OnUnreadable,
  ) {
    this.directiveCache = new DirectiveCache(directiveCacheBytes);
  }

  /** runStored for a batch of runs of distinct nodes, one statement per table (postgres-batch.ts). */
  runsStored(what: string, c: pg.PoolClient, runs: readonly StoredRun[]): Promise<void> {
    return complianceRunsStored({ db: this.db, findings: this.findings, cache: this.directiveCache }, what, c, runs);
  }

  /** A generation's expectation lists (digest → JSON), stored before the transactions that name them (postgres-policy.ts). */
  storeLists(lists: ReadonlyMap<string, string>): Promise<void> {
    return storeLists({ db: this.db }, lists);
  }

  /**
   * expectationsTx for a chunk of a generation's batch (nodes locked by the caller, each once,
   * their lists stored by storeLists), set-based (postgres-policy.ts); returns how many nodes were
   * recomputed.
   */
  expectationsMany(c: pg.PoolClient, items: readonly PolicyExpectation[], sink: EventInsert[], runs?: RunJudge): Promise<number> {
    return policyExpectationsMany({ db: this.db, findings: this.findings, cache: this.directiveCache }, c, items, sink, runs ?? new RunJudge(this.onUnreadable));
  }

  /** The expectations stored for one config id of a node. */
  private async expectations(c: Q, nodeId: string, configId: string): Promise<ExpectedComponent[] | null> {
    const { rows } = await this.db.query<{ components: ExpectedComponent[] }>('expectations', c, {
      name: 'expectations_get',
      text: 'SELECT l.components FROM node_expectations e JOIN expectation_lists l ON l.digest = e.list WHERE e.node_id = $1 AND e.config_id = $2',
      values: [nodeId, configId],
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

  /** What a stored run does to its node's compliance, inside the run's transaction; the events it makes go to `sink`. */
  async runStored(
    what: string, c: pg.PoolClient, node: NodeRecord, run: RunInsert, id: number, startedUtc: string, receivedAt: string, packed: Buffer, sink: EventInsert[],
  ): Promise<void> {
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
              answered_s = GREATEST(coalesce(answered_s, 0), $8), runs_seen = runs_seen + 1
            WHERE node_id = $1 AND run_id IS NOT NULL AND run_started_utc <= $4 AND config_id IS NOT DISTINCT FROM $6 AND outcomes_packed = $7
              AND runs_seen > 0
            RETURNING 1)
          SELECT (SELECT count(*) FROM u) AS updated, x.node_id IS NOT NULL AS present, x.run_started_utc AS started,
            x.applying_since_s, x.answered_s, x.keep_last_s, x.run_id, x.run_started_utc, x.runs_seen, x.error, x.non_compliant
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
          outcomes: runOutcomes(run),
          outcomesPacked: packed,
          expected: policy === null ? null : await this.expectations(c, run.node_id, policy),
          marks: nextMarks(row.present ? marksFromRow(row as unknown as Record<string, unknown>) : undefined, {
            kind: 'run', received_s: receivedS, run_config_id: run.config_id ?? null, policy_config_id: policy,
            policy_set_s: policy === null ? null : await this.expectationsSetS(c, run.node_id, policy),
          }),
        }, receivedAt, findingContext(row.present ? row as unknown as Record<string, unknown> : undefined, { id, started_utc: startedUtc }, startedUtc, run.findings ?? []), sink);
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
  }

  private async writeCompliance(c: pg.PoolClient, input: ComplianceInput, at: string, f: FindingContext, sink: EventInsert[]): Promise<void> {
    const { counts, directives, items } = complianceRows(input);
    const what = 'writeCompliance';
    await this.db.query(what, c, {
      name: 'compliance_upsert',
      text: `INSERT INTO node_compliance (node_id, run_id, run_started_at, run_started_utc, config_id, expected,
          computed_at, outcomes, outcomes_packed, applying_since_s, answered_s, keep_last_s, runs_seen, ${COUNT_COLUMNS.join(', ')})
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, ${COUNT_COLUMNS.map((_, i) => `$${i + 14}`).join(', ')})
        ON CONFLICT (node_id) DO UPDATE SET run_id = excluded.run_id, run_started_at = excluded.run_started_at,
          run_started_utc = excluded.run_started_utc, config_id = excluded.config_id, expected = excluded.expected,
          computed_at = excluded.computed_at, outcomes = excluded.outcomes, outcomes_packed = excluded.outcomes_packed,
          applying_since_s = excluded.applying_since_s, answered_s = excluded.answered_s, keep_last_s = excluded.keep_last_s,
          runs_seen = excluded.runs_seen, ${COUNT_COLUMNS.map((col) => `${col} = excluded.${col}`).join(', ')}`,
      values: [input.nodeId, input.run?.id ?? null, input.run?.started_at ?? null, input.run?.started_utc ?? null,
        input.run?.config_id ?? null, input.expected !== null && input.expected.length > 0, at,
        UNPACKED_PLACEHOLDER, packedOrNull(input.outcomes, input.outcomesPacked), input.marks.applying_since_s, input.marks.answered_s,
        input.marks.keep_last_s, f.runs_seen, ...COUNT_COLUMNS.map((col) => counts[col])],
    });
    // A node failing nowhere, before or now, has no finding to open or close (most runs).
    if (f.failing_before > 0 || counts.error + counts.non_compliant > 0) {
      sink.push(...await this.findings.reconcile(c, { node_id: input.nodeId, run: f.run, at: f.at, items, reports: f.reports, runs_seen: f.runs_seen, last_seen: f.last_seen }));
    }
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
    return this.db.tx('setExpectations', async (c) => {
      const sink: EventInsert[] = [];
      const done = await this.expectationsTx(c, nodeId, configId, checked, when, sink, keep);
      await this.events.write(c, sink);
      return done;
    });
  }

  /** setExpectations' work, inside the caller's transaction on `c`. */
  async expectationsTx(
    c: pg.PoolClient, nodeId: string, configId: string, checked: CheckedExpectations, when: string, sink: EventInsert[], keepLastS?: number,
  ): Promise<boolean> {
    const what = 'setExpectations';
    {
      const node = await this.nodes.lockNode(what, c, nodeId);
      if (!node) return false;
      // Rows about to change: whatever the cache holds for the node goes (its version check
      // would refuse it anyway once this commits).
      this.directiveCache.forgetNode(nodeId);
      // Judged by its current policy: nothing to recompute when the same policy is written again
      // (the same list: lists are named by the digest of their JSON).
      const same = node.policy_config_id === configId && (await this.db.query<{ same: boolean }>(what, c, {
        name: 'expectations_same',
        text: 'SELECT list = $3 AS same FROM node_expectations WHERE node_id = $1 AND config_id = $2',
        values: [nodeId, configId, checked.digest],
      })).rows[0]?.same === true;
      await touchLists({ db: this.db }, c, [checked.digest]);
      await this.db.query(what, c, {
        name: 'expectations_put',
        text: `WITH listed AS (INSERT INTO expectation_lists (digest, components, used_at) VALUES ($4, $5::jsonb, now()) ON CONFLICT (digest) DO NOTHING)
          INSERT INTO node_expectations (node_id, config_id, set_at, list) VALUES ($1, $2, $3, $4)
          ON CONFLICT (node_id, config_id) DO UPDATE SET set_at = excluded.set_at, list = excluded.list`,
        values: [nodeId, configId, when, checked.digest, checked.json],
      });
      // Keep this config's and the previous policy's: a node may still run the previous one.
      await this.db.query(what, c, {
        text: 'DELETE FROM node_expectations WHERE node_id = $1 AND config_id NOT IN ($2, $3)',
        values: [nodeId, configId, node.policy_config_id ?? configId],
      });
      await this.db.query(what, c, { text: 'UPDATE nodes SET policy_config_id = $2 WHERE id = $1', values: [nodeId, configId] });
      const { rows } = await this.db.query(what, c, {
        text: `SELECT x.node_id AS present, run_id, run_started_at, run_started_utc, config_id, outcomes, outcomes_packed,
            applying_since_s, answered_s, keep_last_s, runs_seen, error, non_compliant
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
          outcomes: complianceOutcomes(nodeId, cur.outcomes_packed, cur.outcomes, this.onUnreadable),
          ...(cur.outcomes_packed ? { outcomesPacked: cur.outcomes_packed } : {}),
          expected: checked.items,
          marks,
        }, when, findingContext(cur, null, when, []), sink);
      } else {
        await this.writeCompliance(c, { nodeId, run: null, outcomes: [], expected: checked.items, marks }, when, findingContext(present ? cur : undefined, null, when, []), sink);
      }
      return true;
    }
  }

  async getExpectations(nodeId: string, configId: string): Promise<ExpectedComponent[] | null> {
    return this.expectations(this.db.pool, nodeId, configId);
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
        outcomes: hasRun ? complianceOutcomes(nodeId, cur.outcomes_packed, cur.outcomes, this.onUnreadable) : [],
        marks: marksFromRow(cur) ?? { applying_since_s: null, answered_s: null, keep_last_s: 0 },
        relay: node.class === 'relay',
        has_agent: node.class !== 'agentless',
      };
    });
  }

  async complianceSummary(filters: NodeFilter[], clock: ComplianceClock, nodeIds?: string[]): Promise<ComplianceAggregate> {
    // The whole fleet is kept (kept.ts); any narrower set is summed over its nodes.
    if (filters.length === 0 && nodeIds === undefined) return postgresKeptSummary(this.db, clock);
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
      values.push(nodeIds);
      scope.push(`n.id = ANY($${values.length}::text[])`);
    }
    const where = filterWhere(checked, await postgresDialect(this.db, values, checked, this.nodes.storeRules.filters.check), scope);
    const { rows } = await this.db.query('complianceSummary', this.db.pool, {
      text: `SELECT ${complianceClassSql} AS class, count(*) AS nodes, count(t.node_id) AS with_data, ${timeAdjustedSums('t', 't')}
        FROM ${clockSubquery('$1', '$2')} CROSS JOIN nodes n LEFT JOIN node_compliance t ON t.node_id = n.id ${where}
        GROUP BY 1`,
      values,
    });
    return aggregateFromRows(rows);
  }

  async complianceNodes(after: string | null, limit: number, clock: ComplianceClock, filters: NodeFilter[] = []): Promise<NodeComplianceRow[]> {
    const checked = this.nodes.storeRules.filters.check({ filters });
    const values: unknown[] = [...clockParams(clock)];
    const scope = ["n.accepted = 'accepted'"];
    if (after !== null) {
      values.push(after);
      scope.push(`n.id > $${values.length}`);
    }
    const where = filterWhere(checked, await postgresDialect(this.db, values, checked, this.nodes.storeRules.filters.check), scope);
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
    return postgresKeptWorst(this.db, limit, clock);
  }

  async worstNodesFresh(limit: number, clock: ComplianceClock): Promise<NodeComplianceRow[]> {
    const { rows } = await this.db.query('worstNodes', this.db.pool, {
      text: worstNodesSql((i) => `$${i}`, complianceClassSql),
      values: [...clockParams(clock), limit],
    });
    return rows.map(nodeComplianceFromRow);
  }

  async targetNodes(q: TargetNodesQuery, clock: ComplianceClock): Promise<TargetNodesPage> {
    const { limit, offset } = checkPaging(q.page, q.per_page);
    return snapshot(this.db, 'targetNodes', async (c) => {
      const sql = targetKeptSql((i) => `$${i}`, complianceClassSql, targetSpec(q), clock, await postgresSwept(c), limit, offset, true);
      const total = Number((await c.query(sql.total.text, sql.total.values)).rows[0]!.total);
      const page = sql.page(total);
      const rows = page ? (await c.query(page.text, page.values)).rows as Record<string, unknown>[] : [];
      return { data: rows.map(nodeComplianceFromRow), total };
    });
  }

  async targetNodesFresh(q: TargetNodesQuery, clock: ComplianceClock): Promise<TargetNodesPage> {
    const { limit, offset } = checkPaging(q.page, q.per_page);
    const values: unknown[] = [];
    const text = targetNodesSql((v) => `$${values.push(v)}`, complianceClassSql, targetSpec(q), clock, limit, offset);
    const { rows } = await this.db.query('targetNodes', this.db.pool, { text, values });
    // A page past the end has no row to carry the total.
    const total = rows.length ? Number(rows[0]!.total_rows) : offset === 0 ? 0 : (await this.targetNodesFresh({ ...q, page: 1, per_page: 1 }, clock)).total;
    return { data: rows.map(nodeComplianceFromRow), total };
  }

  async complianceByRule(by: 'rule' | 'directive', clock: ComplianceClock): Promise<RuleComplianceRow[]> {
    return postgresKeptByRule(this.db, by, clock);
  }

  async sweepCompliance(clock: ComplianceClock, step?: number): Promise<KeptSweep> {
    return postgresKeptSweep(this.db, clock, step);
  }

  async complianceByGroup(clock: ComplianceClock): Promise<GroupComplianceRow[]> {
    return postgresKeptByGroup(this.db, clock);
  }

  async complianceByGroupFresh(clock: ComplianceClock): Promise<GroupComplianceRow[]> {
    const { rows } = await this.db.query('complianceByGroup', this.db.pool, { text: groupsFreshSql((i) => `$${i}`), values: clockParams(clock) });
    return groupsFromRows(rows);
  }

  async putGroupMembers(nodeIds: readonly string[], groups: ReadonlyMap<string, readonly string[]>): Promise<number> {
    return postgresPutGroupMembers(this.db, nodeIds, groups);
  }

  async groupMembersOf(nodeId: string): Promise<string[]> {
    const { rows } = await this.db.query('groupMembersOf', this.db.pool, {
      text: 'SELECT group_id FROM policy_group_members WHERE node_id = $1 ORDER BY group_id', values: [nodeId],
    });
    return rows.map((r) => r.group_id as string);
  }

  async complianceByRuleFresh(by: 'rule' | 'directive', clock: ComplianceClock): Promise<RuleComplianceRow[]> {
    const keys = by === 'rule' ? 'x.rule_id' : 'x.rule_id, x.directive_id';
    const { rows } = await this.db.query('complianceByRule', this.db.pool, {
      text: `SELECT ${keys}, count(DISTINCT x.node_id) AS nodes, ${timeAdjustedSums('x', 't')}
        FROM ${clockSubquery('$1', '$2')} CROSS JOIN node_compliance_directives x JOIN nodes n ON n.id = x.node_id
          JOIN node_compliance t ON t.node_id = x.node_id
        WHERE n.accepted = 'accepted' AND ${complianceClassSql} = 'agent'
        GROUP BY ${keys} ORDER BY ${keys}`,
      values: clockParams(clock),
    });
    return rows.map((r) => ruleComplianceFromRow(r, by));
  }

  async setKeepLast(nodeIds: string[], seconds: number): Promise<number> {
    const keep = checkKeepLast(seconds)!;
    // Only rows that change are written, under their nodes' row locks taken in id order as
    // every writer of a compliance row takes them: a policy group membership written meanwhile
    // reads the row before or after, never between. A pass that changes nothing locks nothing.
    const { rows } = await this.db.query('setKeepLast', this.db.pool, {
      text: 'SELECT node_id FROM node_compliance WHERE node_id = ANY($2::text[]) AND keep_last_s <> $1', values: [keep, nodeIds],
    });
    if (rows.length === 0) return 0;
    const ids = rows.map((r) => r.node_id as string);
    return this.db.tx('setKeepLast', async (c) => {
      await this.db.query('setKeepLast', c, { text: 'SELECT id FROM nodes WHERE id = ANY($1::text[]) ORDER BY id FOR NO KEY UPDATE', values: [ids] });
      const res = await this.db.query('setKeepLast', c, {
        text: 'UPDATE node_compliance SET keep_last_s = $1 WHERE node_id = ANY($2::text[]) AND keep_last_s <> $1',
        values: [keep, ids],
      });
      return res.rowCount ?? 0;
    });
  }
}
