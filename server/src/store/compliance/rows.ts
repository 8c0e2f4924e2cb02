/**
 * What both backends write for one node's compliance: the node row (counts of its last complete
 * run against its current policy's expectations, with that run's outcomes kept so the node's
 * detail survives the run's retention) and one row per (rule, directive), computed by the shared
 * compliance module. The stored counts are the run's states; `applying` and `no_answer` are
 * decided when read, from the node's time marks (`timeAdjustedSums`), so they are exact at any
 * moment without a sweep rewriting rows.
 */
import { computeCompliance, COMPLIANCE_STATES, type ComplianceItem, COMPLIANT_STATES, RUN_STATES, zeroCounts, type ComplianceCounts, type NodeTimeMarks } from '@capstan/shared/compliance/compute';
import { HAS_AGENT_SQL } from '../nodes/filters/query.js';
import type { NodeStatus } from '../nodes/types.js';
import type { RunSummaryOutcome } from '../runs/types.js';
import { isoOf } from '../time.js';
import type { FindingInput } from '../findings/types.js';
import type { ComplianceAggregate, ComplianceClock, ExpectedComponent, GroupComplianceRow, NodeClass, NodeComplianceRow, RuleComplianceRow, TargetNodesQuery } from './types.js';

export interface ComplianceInput {
  nodeId: string;
  /** The node's last complete run; null when it has none (expected items are then all missing). */
  run: { id: number; started_at: string; started_utc: string; config_id: string | null } | null;
  outcomes: RunSummaryOutcome[];
  /** `outcomes` already packed (runs/outcomes.ts; the run insert has it): saves doing it again. */
  outcomesPacked?: Buffer;
  expected: ExpectedComponent[] | null;
  /** The node's time marks to store with it. */
  marks: NodeTimeMarks;
}

export interface ComplianceRows {
  /** Every item's state (what findings are decided from). */
  items: ComplianceItem[];
  counts: ComplianceCounts;
  directives: Array<{ rule_id: string; directive_id: string; counts: ComplianceCounts }>;
}

/** Epoch seconds of an ISO time. */
export const epochS = (iso: string) => Math.floor(Date.parse(iso) / 1000);

/**
 * A node's time marks after `event` (shared NodeTimeMarks has their meaning); `cur` is what is
 * stored (absent: no row yet). A complete run of the current policy ends `applying`; a new policy
 * that the last complete run did not run starts it; the first policy of a node that never ran
 * starts the wait for its answer.
 */
export function nextMarks(
  cur: NodeTimeMarks | undefined,
  event:
    | { kind: 'run'; received_s: number; run_config_id: string | null; policy_config_id: string | null; policy_set_s: number | null }
    | { kind: 'policy'; at_s: number; config_id: string; previous_config_id: string | null; run_config_id: string | null; keep_last_s?: number },
): NodeTimeMarks {
  const base: NodeTimeMarks = cur ?? { applying_since_s: null, answered_s: null, keep_last_s: 0 };
  if (event.kind === 'run') {
    const applying = event.policy_config_id === null || event.run_config_id === event.policy_config_id
      ? null
      : base.applying_since_s ?? event.policy_set_s;
    return { applying_since_s: applying, answered_s: Math.max(base.answered_s ?? 0, event.received_s), keep_last_s: base.keep_last_s };
  }
  const changed = event.previous_config_id !== event.config_id;
  const applying = event.run_config_id === event.config_id ? null : changed ? event.at_s : base.applying_since_s ?? event.at_s;
  return { applying_since_s: applying, answered_s: base.answered_s ?? event.at_s, keep_last_s: event.keep_last_s ?? base.keep_last_s };
}

/** The stored marks of a node_compliance row (SQLite integers, Postgres bigint strings). */
export function marksFromRow(row: Record<string, unknown> | undefined): NodeTimeMarks | undefined {
  if (!row) return undefined;
  const n = (v: unknown) => (v === null || v === undefined ? null : Number(v));
  return { applying_since_s: n(row.applying_since_s), answered_s: n(row.answered_s), keep_last_s: Number(row.keep_last_s ?? 0) };
}

export function complianceRows(input: ComplianceInput): ComplianceRows {
  const result = computeCompliance(input.expected, input.outcomes);
  return { items: result.items, counts: result.counts, directives: result.directives };
}

/** The count columns (the states a run decides), in one order for both backends. */
export const COUNT_COLUMNS = RUN_STATES;

/** Sum columns of an aggregate query back into counts (Postgres sums come back as strings). */
export function countsFromRow(row: Record<string, unknown>): ComplianceCounts {
  return Object.fromEntries(COMPLIANCE_STATES.map((c) => [c, Number(row[c] ?? 0)])) as ComplianceCounts;
}

/**
 * The parameters of a time-adjusted aggregate, in the order `timeAdjustedSums` reads them (as
 * the columns `p.silent_before` and `p.applying_after` of a one-row subquery `p`).
 */
export function clockParams(clock: ComplianceClock): [number, number] {
  return [clock.now_s - clock.silence_s, clock.now_s - clock.applying_s];
}

/**
 * `sum(...)` of every state for counts in `x` (node_compliance or node_compliance_directives)
 * whose node's time marks are in `t` (node_compliance), with `p` the clock's one-row subquery:
 * a silent node's expected items are all `no_answer`, an applying node's all `applying`, else
 * the stored counts (shared nodeTimeState and overrideItems, in SQL). Expected items are every
 * item but the unexpected ones, which an overriding state drops: they belong to the stale run.
 */
export function timeAdjustedSums(x = 'x', t = 't'): string {
  return timeAdjusted(x, t, (e) => `coalesce(sum(${e}), 0)`);
}

/** timeAdjustedSums for one row (a node's own counts, no aggregate): `x` and `t` are then one node_compliance row. */
export function timeAdjustedColumns(x = 'x', t = 't'): string {
  return timeAdjusted(x, t, (e) => `coalesce(${e}, 0)`);
}

/** The items counts `x` expect: every state but unexpected (those belong to the run alone), summed in SQL. */
export const expectedSum = (x: string) => `(${RUN_STATES.filter((c) => c !== 'unexpected').map((c) => `${x}.${c}`).join(' + ')})`;

function timeAdjusted(x: string, t: string, wrap: (e: string) => string): string {
  const noAnswer = `(${t}.answered_s IS NOT NULL AND ${t}.answered_s + ${t}.keep_last_s <= p.silent_before)`;
  const applying = `(${t}.applying_since_s IS NOT NULL AND ${t}.applying_since_s > p.applying_after)`;
  const expected = expectedSum(x);
  return [
    ...RUN_STATES.map((c) => `${wrap(`CASE WHEN ${noAnswer} OR ${applying} THEN 0 ELSE ${x}.${c} END`)} AS ${c}`),
    `${wrap(`CASE WHEN ${noAnswer} THEN 0 WHEN ${applying} THEN ${expected} ELSE 0 END`)} AS applying`,
    `${wrap(`CASE WHEN ${noAnswer} THEN ${expected} ELSE 0 END`)} AS no_answer`,
  ].join(', ');
}

/** The one-row subquery `p` of timeAdjustedSums, with two placeholders. */
export const clockSubquery = (ph1: string, ph2: string) => `(SELECT CAST(${ph1} AS BIGINT) AS silent_before, CAST(${ph2} AS BIGINT) AS applying_after) p`;

export type DirectiveRow = ComplianceRows['directives'][number];

/**
 * What to write to bring a node's stored directive rows to `next`: the rows that are new or whose
 * counts changed, and the (rule, directive) keys that are gone. A run that changes a few
 * components rewrites those directives only, not the node's ~80 rows (they were 14% of the
 * server's CPU under ingest when every row was deleted and inserted again). The stored rows are
 * read as arrays in the order of `DIRECTIVE_ROW_COLUMNS`: read as objects and compared by column
 * name, they were a fifth of a steady-state SQLite insert.
 */
export const DIRECTIVE_ROW_COLUMNS = ['rule_id', 'directive_id', ...COUNT_COLUMNS] as const;

export function directiveChangesRaw(
  stored: unknown[][],
  next: DirectiveRow[],
): { upsert: DirectiveRow[]; remove: Array<{ rule_id: string; directive_id: string }> } {
  if (stored.length === 0) return { upsert: next, remove: [] };
  const old = new Map<string, unknown[]>();
  for (const r of stored) old.set(`${r[0] as string}\u0000${r[1] as string}`, r);
  const upsert: DirectiveRow[] = [];
  const n = COUNT_COLUMNS.length;
  for (const d of next) {
    const k = `${d.rule_id}\u0000${d.directive_id}`;
    const o = old.get(k);
    if (o === undefined) {
      upsert.push(d);
      continue;
    }
    old.delete(k);
    for (let i = 0; i < n; i++) {
      if (Number(o[i + 2]) !== d.counts[COUNT_COLUMNS[i]!]) {
        upsert.push(d);
        break;
      }
    }
  }
  const remove = [...old.values()].map((r) => ({ rule_id: r[0] as string, directive_id: r[1] as string }));
  return { upsert, remove };
}

type List = readonly ExpectedComponent[];
const componentKey = (c: { rule_id: string; directive_id: string; component: string }) => `${c.rule_id}\u0000${c.directive_id}\u0000${c.component}`;
/** listDelta's answers, by pair of lists (a batch's nodes share a handful; parsed lists are kept by digest). */
const DELTAS = new WeakMap<List, WeakMap<List, ReadonlySet<string> | null>>();

/**
 * The components two expectation lists do not share, when a run that reports on none of them
 * is counted into the same directive rows against either: both lists expect something (an empty
 * list counts a run another way), and each directive loses as many components as it gains. null
 * otherwise. Worked out once per pair of lists.
 */
export function listDelta(a: List, b: List): ReadonlySet<string> | null {
  let byB = DELTAS.get(a);
  if (!byB) DELTAS.set(a, (byB = new WeakMap()));
  let delta = byB.get(b);
  if (delta !== undefined) return delta;
  delta = null;
  if (a.length > 0 && b.length > 0) {
    const inA = new Set(a.map(componentKey));
    const inB = new Set(b.map(componentKey));
    const out = new Set<string>();
    const balance = new Map<string, number>();
    const tally = (k: string, by: number) => {
      out.add(k);
      const d = k.slice(0, k.lastIndexOf('\u0000'));
      balance.set(d, (balance.get(d) ?? 0) + by);
    };
    for (const k of inA) if (!inB.has(k)) tally(k, -1);
    for (const k of inB) if (!inA.has(k)) tally(k, 1);
    if ([...balance.values()].every((n) => n === 0)) delta = out;
  }
  byB.set(b, delta);
  return delta;
}

/**
 * Does a run with `outcomes` count into the same directive rows against two lists whose
 * listDelta is `delta`? Yes when it reported on none of the components they do not share: each
 * is missing under either list, and each directive has as many of them under both.
 */
export function sameRowsUnder(outcomes: readonly RunSummaryOutcome[], delta: ReadonlySet<string> | null): boolean {
  return delta !== null && (delta.size === 0 || !outcomes.some((o) => delta.has(componentKey(o))));
}

/**
 * The accepted nodes with an agent whose compliance is lowest (time states applied), worst
 * first, ties by id; nodes without items are left out. `ph(i)` is the dialect's placeholder for
 * the i-th parameter (1: silent_before, 2: applying_after, 3: limit). One pass over the
 * compliance rows with a top-N sort: the reference the kept read (kept.ts worstKeptSql) equals.
 */
export function worstNodesSql(ph: (i: number) => string, classSql: string): string {
  return worstNodesOver(`${clockSubquery(ph(1), ph(2))} CROSS JOIN node_compliance t JOIN nodes n ON n.id = t.node_id`, ph(3), classSql);
}

/** worstNodesSql's query over `from`, which joins the clock `p`, node_compliance `t` and nodes `n` (on `join`'s conditions, if any). */
export function worstNodesOver(from: string, limit: string, classSql: string, join: string[] = []): string {
  const good = [...COMPLIANT_STATES].map((c) => `s.${c}`).join(' + ');
  const total = COMPLIANCE_STATES.map((c) => `s.${c}`).join(' + ');
  return `SELECT * FROM (SELECT n.id AS node_id, n.hostname, n.status, n.state, n.last_run_at, n.policy_config_id,
      ${classSql} AS class, ${timeAdjustedColumns('t', 't')}
    FROM ${from}
    WHERE ${[...join, "n.accepted = 'accepted'"].join(' AND ')}) s
  WHERE s.class = 'agent' AND (${total}) > 0
  ORDER BY CAST(${good} AS DOUBLE PRECISION) / (${total}), s.node_id LIMIT ${limit}`;
}

/** What a rule drill-down asks (TargetNodesQuery without its paging), `state` a checked state name. */
export interface TargetSpec {
  rule_id: string;
  directive_id?: string;
  state?: string;
  order: 'asc' | 'desc';
}

/** The TargetSpec of a query. */
export const targetSpec = (q: TargetNodesQuery): TargetSpec => ({
  rule_id: q.rule_id, order: q.order ?? 'asc',
  ...(q.directive_id !== undefined && { directive_id: q.directive_id }), ...(q.state !== undefined && { state: q.state }),
});

/** A rule drill-down's sort over rows with `target_key` (NULL: no item, last in both orders) and `node_id`. */
export const targetOrder = (dir: 'asc' | 'desc', r = '') => {
  const d = dir === 'desc' ? 'DESC' : 'ASC';
  return `ORDER BY CASE WHEN ${r}target_key IS NULL THEN 1 ELSE 0 END, ${r}target_key ${d}, ${r}node_id ${d}`;
};

/**
 * A rule's nodes (or one directive's) judged at a moment, each with its counts for it alone and
 * its sort key `target_key` (the compliant share of those counts, as worstNodesSql's; NULL when
 * they hold no item), unsorted; with `nodes` (a subquery answering node_id), those nodes only.
 * The rule's rows are summed per node first, from its index range alone; only then is each node
 * joined to its row and its compliance marks (a join per directive row cost three times as many
 * lookups). `param(v)` binds a value and answers its placeholder, called in the order of the text.
 */
export function targetJudgedSql(param: (v: unknown) => string, classSql: string, q: TargetSpec, clock: ComplianceClock, nodes?: string): string {
  if (q.state !== undefined && !(COMPLIANCE_STATES as readonly string[]).includes(q.state)) throw new Error(`not a state: ${q.state}`);
  const good = [...COMPLIANT_STATES].map((c) => `s.${c}`).join(' + ');
  const total = COMPLIANCE_STATES.map((c) => `s.${c}`).join(' + ');
  const sums = RUN_STATES.map((c) => `sum(d.${c}) AS ${c}`).join(', ');
  const [silent, applying] = clockParams(clock);
  const p = clockSubquery(param(silent), param(applying));
  // With `nodes`, those few first (CROSS JOIN: SQLite keeps them outermost) and each looked up.
  const from = nodes ? `(${nodes}) i CROSS JOIN node_compliance_directives d` : 'node_compliance_directives d';
  const rule = `${nodes ? 'd.node_id = i.node_id AND ' : ''}d.rule_id = ${param(q.rule_id)}${q.directive_id !== undefined ? ` AND d.directive_id = ${param(q.directive_id)}` : ''}`;
  return `SELECT s.*, CASE WHEN (${total}) = 0 THEN NULL ELSE CAST(${good} AS DOUBLE PRECISION) / (${total}) END AS target_key
  FROM (SELECT n.id AS node_id, n.hostname, n.status, n.state, n.last_run_at, n.policy_config_id,
      ${classSql} AS class, ${timeAdjustedColumns('x', 't')}
    FROM ${p} CROSS JOIN (SELECT d.node_id, ${sums} FROM ${from} WHERE ${rule} GROUP BY d.node_id) x
      JOIN nodes n ON n.id = x.node_id JOIN node_compliance t ON t.node_id = x.node_id
    WHERE n.accepted = 'accepted') s
  WHERE s.class = 'agent'${q.state ? ` AND s.${q.state} > 0` : ''}`;
}

/**
 * One page of a rule's nodes judged afresh over every node under the rule and sorted, with the
 * number of matching nodes on every row (`total_rows`, a window count): the reference the kept
 * read (kept-targets.ts) equals.
 */
export function targetNodesSql(param: (v: unknown) => string, classSql: string, q: TargetSpec, clock: ComplianceClock, limit: number, offset: number): string {
  const judged = targetJudgedSql(param, classSql, q, clock);
  return `SELECT j.*, count(*) OVER () AS total_rows FROM (${judged}) j ${targetOrder(q.order, 'j.')} LIMIT ${param(limit)} OFFSET ${param(offset)}`;
}

/** A node's class for compliance, in SQL over `nodes n`: relays and nodes without an agent are summed apart. */
export const complianceClassSql = `(CASE WHEN n.relay = 1 THEN 'relay' WHEN ${HAS_AGENT_SQL} THEN 'agent' ELSE 'agentless' END)`;

export function nodeComplianceFromRow(r: Record<string, unknown>): NodeComplianceRow {
  return {
    node_id: r.node_id as string,
    hostname: r.hostname as string,
    class: r.class as NodeClass,
    status: r.status as NodeStatus,
    state: r.state as string,
    last_run_at: r.last_run_at === null ? null : isoOf(r.last_run_at),
    policy_config_id: (r.policy_config_id as string | null) ?? null,
    counts: countsFromRow(r),
  };
}

/** A compliance summary from its rows grouped by node class. */
export function aggregateFromRows(rows: Array<Record<string, unknown>>): ComplianceAggregate {
  const out: ComplianceAggregate = {
    nodes: 0, nodes_with_data: 0, counts: zeroCounts(),
    relays: { nodes: 0, counts: zeroCounts() }, agentless: { nodes: 0, counts: zeroCounts() },
  };
  for (const r of rows) {
    const counts: ComplianceCounts = countsFromRow(r);
    if (r.class === 'agent') {
      out.nodes = Number(r.nodes);
      out.nodes_with_data = Number(r.with_data);
      out.counts = counts;
    } else if (r.class === 'relay') {
      out.relays = { nodes: Number(r.nodes), counts };
    } else {
      out.agentless = { nodes: Number(r.nodes), counts };
    }
  }
  return out;
}

/**
 * complianceByGroup summed afresh, over `p` (the clock) and policy_group_members `g`: one row
 * per (group, class) of accepted members (rows.ts groupsFromRows reads them).
 */
export const groupsFreshSql = (ph: (i: number) => string) => `SELECT g.group_id, ${complianceClassSql} AS class, count(*) AS nodes,
    count(t.node_id) AS with_data, ${timeAdjustedSums('t', 't')}
  FROM ${clockSubquery(ph(1), ph(2))} CROSS JOIN policy_group_members g JOIN nodes n ON n.id = g.node_id LEFT JOIN node_compliance t ON t.node_id = n.id
  WHERE n.accepted = 'accepted' GROUP BY g.group_id, 2`;

/** complianceByGroup from groupsFreshSql's rows, in group id byte order. */
export function groupsFromRows(rows: Array<Record<string, unknown>>): GroupComplianceRow[] {
  const by = new Map<string, Array<Record<string, unknown>>>();
  for (const r of rows) {
    const id = r.group_id as string;
    by.set(id, [...(by.get(id) ?? []), r]);
  }
  return [...by].sort(([a], [b]) => Buffer.compare(Buffer.from(a), Buffer.from(b))).map(([group_id, rs]) => {
    const agg = aggregateFromRows(rs);
    return { group_id, nodes: agg.nodes, counts: agg.counts, relays: agg.relays.nodes, agentless: agg.agentless.nodes };
  });
}

/** A row of complianceByRule: per rule, or per (rule, directive). */
export function ruleComplianceFromRow(r: Record<string, unknown>, by: 'rule' | 'directive'): RuleComplianceRow {
  return {
    rule_id: r.rule_id as string,
    ...(by === 'directive' ? { directive_id: r.directive_id as string } : {}),
    nodes: Number(r.nodes),
    counts: countsFromRow(r),
  };
}

/** What a compliance write needs to keep the node's findings (EventRules.reconcile), from the row it replaces. */
export interface FindingContext {
  /** The run deciding it; null for a policy change. */
  run: { id: number; started_utc: string } | null;
  at: string;
  reports: readonly FindingInput[];
  /** The node's runs_seen after the write: one more for a run. */
  runs_seen: number;
  /** The base run the open findings were last seen in, and runs_seen then. */
  last_seen: { run_id: number | null; at: string | null; runs_seen: number };
  /** Items failing in the row replaced: with none there and none now, findings are left alone. */
  failing_before: number;
}

/** A FindingContext from the node_compliance row about to be replaced (`cur`: its run_id, run_started_utc, runs_seen, error, non_compliant). */
export function findingContext(
  cur: Record<string, unknown> | undefined, run: FindingContext['run'], at: string, reports: readonly FindingInput[],
): FindingContext {
  const seen = Number(cur?.runs_seen ?? 0);
  const hasRun = cur !== undefined && cur.run_id !== null && cur.run_id !== undefined;
  return {
    run, at, reports,
    runs_seen: run ? seen + 1 : seen,
    last_seen: { run_id: hasRun ? Number(cur.run_id) : null, at: hasRun && cur.run_started_utc != null ? isoOf(cur.run_started_utc) : null, runs_seen: seen },
    failing_before: Number(cur?.error ?? 0) + Number(cur?.non_compliant ?? 0),
  };
}
