/**
 * Fleet compliance read from kept counters (migration 23) instead of summed over every node:
 * per (rule, directive), per rule and per node class, each under one of three time modes
 * (0: the run's counts, 1: applying, 2: no answer), decided against the thresholds the counters
 * were last swept to (kept_sweep). A reader at another moment adds a correction made of the few
 * nodes whose silence or applying threshold lies between the swept ones and its own; the sweep
 * (every `compliance.kept_sweep_interval`) moves the thresholds on so that this stays small.
 * Reading is O(rules + corrected nodes), whatever the number of nodes.
 */
import { RUN_STATES, zeroCounts, type ComplianceCounts } from '@capstan/shared/compliance/compute';
import type { ComplianceAggregate, ComplianceClock, GroupComplianceRow, NodeClass, RuleComplianceRow } from './types.js';
import { WORST_ROWS } from '../migrations/0027_kept_shares.js';
import { clockSubquery, worstNodesOver } from './rows.js';

/** The thresholds counters are kept at: a node is silent when answered_s + keep_last_s <= silent_before, applying when applying_since_s > applying_after. */
export interface KeptThresholds {
  silent_before: number;
  applying_after: number;
}

export const thresholdsOf = (clock: ComplianceClock): KeptThresholds => ({
  silent_before: clock.now_s - clock.silence_s,
  applying_after: clock.now_s - clock.applying_s,
});

/** What the sweep did: how many nodes it looked at, and how many log rows it folded (PostgreSQL). */
export interface KeptSweep {
  checked: number;
  folded: number;
  /** False when a writer held the thresholds (PostgreSQL, lock wait over): tried again next time. */
  done: boolean;
  /** Transactions the thresholds moved in (sweepStep). */
  steps: number;
  /** The longest of them, in ms: what writers waited behind the sweep at most. */
  longest_step_ms: number;
}

/** Most nodes one step of the sweep moves, by default (`[compliance] kept_sweep_step`). */
export const KEPT_SWEEP_STEP = 2000;

/** Steps one sweep takes at most; what is left waits for the next sweep (readers stay exact). */
export const KEPT_SWEEP_MAX_STEPS = 1000;

/** The point `f` (0..1) of the way from `from` to `to`, in whole seconds. */
const along = (from: KeptThresholds, to: KeptThresholds, f: number): KeptThresholds => ({
  silent_before: from.silent_before + Math.round(f * (to.silent_before - from.silent_before)),
  applying_after: from.applying_after + Math.round(f * (to.applying_after - from.applying_after)),
});

/**
 * Where one step of the sweep moves the thresholds from `kept` towards `at`: `at` when it
 * touches at most `step` nodes, else the furthest point of the way found by halving that does,
 * or the first second of the way when even that touches more (the nodes of one second are not
 * split). `count(to)` counts the nodes a move from `kept` to `to` touches (or more), up to `step + 1`.
 * Each step is a transaction under the lock every writer of compliance waits for, so a sweep
 * after a long silence (a fleet whose runs are held up, a server stopped for an hour) moves its
 * nodes a few thousand at a time instead of stopping the fleet's ingest for the whole move.
 */
export async function sweepStep(kept: KeptThresholds, at: KeptThresholds, step: number, count: (to: KeptThresholds) => Promise<number> | number): Promise<KeptThresholds> {
  const seconds = Math.max(Math.abs(at.silent_before - kept.silent_before), Math.abs(at.applying_after - kept.applying_after));
  if (seconds <= 1 || await count(at) <= step) return at;
  const first = along(kept, at, 1 / seconds);
  let lo = 0;
  let hi = 1;
  // Halving down to one second of the way: at most log2(seconds) counts.
  while ((hi - lo) * seconds > 1) {
    const mid = (lo + hi) / 2;
    if (await count(along(kept, at, mid)) <= step) lo = mid;
    else hi = mid;
  }
  const to = along(kept, at, lo);
  return sameThresholds(to, kept) ? first : to;
}

/**
 * Counts the nodes touchedSql answers, at most `limit`, a node in both ranges twice: UNION ALL
 * stops reading at the limit, where UNION would read both ranges whole to drop the doubles.
 * Parameters as touchedSql's.
 */
export const touchedCountSql = (ph: (i: number) => string, limit: number) =>
  `SELECT count(*) AS n FROM (${touchedSql(ph(1), ph(2), ph(3), ph(4), 'UNION ALL')} LIMIT ${Math.floor(limit)}) t`;


const SUMS = RUN_STATES.map((c) => `sum(${c}) AS ${c}`).join(', ');
const COLS = RUN_STATES.join(', ');

/** A counter table, with its log on PostgreSQL (the triggers append there; the sweep folds). */
export const keptSource = (table: string, pg: boolean, cols: string) => (pg ? `(SELECT ${cols} FROM ${table} UNION ALL SELECT ${cols} FROM ${table}_log)` : table);

export function keptSql(pg: boolean) {
  return {
    directives: `SELECT rule_id, directive_id, mode, sum(nodes) AS nodes, ${SUMS}
      FROM ${keptSource('kept_directives', pg, `rule_id, directive_id, class, mode, nodes, ${COLS}`)} s WHERE class = 'agent' GROUP BY rule_id, directive_id, mode`,
    rules: `SELECT rule_id, sum(nodes) AS nodes FROM ${keptSource('kept_rules', pg, 'rule_id, class, nodes')} s WHERE class = 'agent' GROUP BY rule_id`,
    fleet: `SELECT class, mode, sum(nodes) AS nodes, ${SUMS} FROM ${keptSource('kept_fleet', pg, `class, mode, nodes, ${COLS}`)} s GROUP BY class, mode`,
    groups: `SELECT group_id, class, mode, sum(nodes) AS nodes, ${SUMS} FROM ${keptSource('kept_groups', pg, `group_id, class, mode, nodes, ${COLS}`)} s
      GROUP BY group_id, class, mode`,
  };
}

/**
 * The nodes whose mode at `at` differs from the kept one, among those whose thresholds lie
 * between the swept ones and `at`'s, with their rows: per directive (`directives`, agent nodes
 * only) or per node (`fleet`). Parameters by `ph(i)`: 1, 2 the silence range; 3, 4 the applying
 * range; 5 silent_before and 6 applying_after at `at`.
 */
export function correctionSql(ph: (i: number) => string, what: 'directives' | 'fleet' | 'groups'): string {
  // Parameters in the order of the text (SQLite binds `?` so). The two ranges apart, each on its
  // own index, and the joins in that order (CROSS JOIN: SQLite keeps it): one OR over both, or
  // kept_nodes as the outer loop, scanned every node (400 ms at 100,000).
  const mode = `CASE WHEN t.answered_s IS NOT NULL AND t.answered_s + t.keep_last_s <= ${ph(5)} THEN 2
    WHEN t.applying_since_s IS NOT NULL AND t.applying_since_s > ${ph(6)} THEN 1 ELSE 0 END`;
  const head = `WITH c AS (${touchedSql(ph(1), ph(2), ph(3), ph(4))}),
    m AS (SELECT t.node_id, k.class, k.mode AS old_mode, ${mode} AS new_mode, ${RUN_STATES.map((c) => `t.${c}`).join(', ')}
      FROM c CROSS JOIN node_compliance t CROSS JOIN kept_nodes k WHERE t.node_id = c.node_id AND k.node_id = t.node_id)`;
  if (what === 'fleet') return `${head} SELECT * FROM m WHERE m.old_mode <> m.new_mode`;
  // Per group (migration 25): each corrected node once per group it is a member of.
  if (what === 'groups') {
    return `${head} SELECT g.group_id, m.* FROM m CROSS JOIN policy_group_members g WHERE g.node_id = m.node_id AND m.old_mode <> m.new_mode`;
  }
  return `${head} SELECT d.rule_id, d.directive_id, m.old_mode, m.new_mode, ${RUN_STATES.map((c) => `d.${c}`).join(', ')}
    FROM m CROSS JOIN node_compliance_directives d WHERE d.node_id = m.node_id AND m.class = 'agent' AND m.old_mode <> m.new_mode`;
}

/** The ids of the nodes whose silence threshold is in [s1, s2] or applying mark in [a1, a2], each range on its index (migration 23). */
function touchedSql(s1: string, s2: string, a1: string, a2: string, union = 'UNION'): string {
  return `SELECT node_id FROM node_compliance WHERE answered_s + keep_last_s BETWEEN ${s1} AND ${s2}
    ${union} SELECT node_id FROM node_compliance WHERE applying_since_s BETWEEN ${a1} AND ${a2}`;
}

/**
 * touchedSql between the thresholds swept to (`kept`, read in the reader's snapshot) and `at`'s,
 * the four ends written into the text (whole seconds, as nodes/filters complianceKeySql's): the
 * planner then sees how few nodes the ranges hold (PostgreSQL, from parameters it could not be
 * told, guessed a thousand and read every row to join them).
 */
export function touchedLiteralSql(kept: KeptThresholds, at: KeptThresholds): string {
  const ends = correctionParams(kept, at).slice(0, 4).map((v) => {
    if (!Number.isSafeInteger(v)) throw new Error('the compliance clock must be whole seconds');
    return String(v);
  });
  return touchedSql(ends[0]!, ends[1]!, ends[2]!, ends[3]!);
}

/**
 * The worst nodes (rows.ts worstNodesSql's answer) from kept_nodes_worst_idx (migration 27): the
 * first `limit` kept shares in order, leaving out the nodes a reader at `at` corrects, and those
 * nodes; all of them then judged at `at` as worstNodesSql judges every node. A node not corrected
 * has the same mode at `at` as at the kept thresholds, so its share at `at` is its kept one: the
 * answer's nodes are all among these, read in O(limit + corrected nodes) whatever the fleet.
 * `param(v)` binds a value and answers its placeholder; it is called in the order of the text.
 */
export function worstKeptSql(param: (v: unknown) => string, classSql: string, kept: KeptThresholds, at: KeptThresholds, limit: number): string {
  const corrected = !sameThresholds(kept, at);
  const [s1, s2, a1, a2] = correctionParams(kept, at);
  const head = corrected ? `WITH c AS (${touchedSql(param(s1), param(s2), param(a1), param(a2))}) ` : '';
  const clock = clockSubquery(param(at.silent_before), param(at.applying_after));
  const walk = `SELECT k.node_id FROM kept_nodes k WHERE ${WORST_ROWS}${corrected ? ' AND k.node_id NOT IN (SELECT node_id FROM c)' : ''}
      ORDER BY k.share, k.node_id LIMIT ${param(limit)}`;
  const candidates = corrected ? `SELECT w.node_id FROM (${walk}) w UNION SELECT node_id FROM c` : walk;
  // CROSS JOIN: SQLite keeps the candidates outermost (else it walked every accepted node).
  const from = `${clock} CROSS JOIN (${candidates}) x CROSS JOIN node_compliance t CROSS JOIN nodes n`;
  return head + worstNodesOver(from, param(limit), classSql, ['t.node_id = x.node_id', 'n.id = x.node_id']);
}

/** The parameters of correctionSql for a reader at `at` over counters swept to `kept`. */
export function correctionParams(kept: KeptThresholds, at: KeptThresholds): number[] {
  const lo = (a: number, b: number) => Math.min(a, b);
  const hi = (a: number, b: number) => Math.max(a, b);
  return [lo(kept.silent_before, at.silent_before), hi(kept.silent_before, at.silent_before),
    lo(kept.applying_after, at.applying_after), hi(kept.applying_after, at.applying_after), at.silent_before, at.applying_after];
}

export const sameThresholds = (a: KeptThresholds, b: KeptThresholds) => a.silent_before === b.silent_before && a.applying_after === b.applying_after;

/** Run-state sums under each mode, per key. */
type Modes = Map<number, { nodes: number; v: number[] }>;

function add(m: Modes, mode: number, nodes: number, r: Record<string, unknown>, sign = 1): void {
  let e = m.get(mode);
  if (!e) m.set(mode, (e = { nodes: 0, v: RUN_STATES.map(() => 0) }));
  e.nodes += nodes;
  RUN_STATES.forEach((c, i) => { e.v[i]! += sign * Number(r[c] ?? 0); });
}

/** Counts under the three modes folded into one ComplianceCounts, as the time states decide (rows.ts timeAdjusted). */
function fold(m: Modes): { nodes: number; counts: ComplianceCounts } {
  const counts = zeroCounts();
  let nodes = 0;
  const unexpected = RUN_STATES.indexOf('unexpected');
  for (const [mode, e] of m) {
    if (mode < 0) continue;
    nodes += e.nodes;
    const expected = e.v.reduce((s, x, i) => (i === unexpected ? s : s + x), 0);
    if (mode === 0) RUN_STATES.forEach((c, i) => { counts[c] += e.v[i]!; });
    else if (mode === 1) counts.applying += expected;
    else counts.no_answer += expected;
  }
  return { nodes, counts };
}

/** Byte order, as PostgreSQL's "C" collation and SQLite's BINARY compare. */
const byteOrder = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

/** complianceByRule's answer from the kept directive counters, the rule node counts and the correction rows. */
export function keptByRule(
  by: 'rule' | 'directive', directives: Record<string, unknown>[], rules: Record<string, unknown>[], corrections: Record<string, unknown>[],
): RuleComplianceRow[] {
  const keys = new Map<string, { rule_id: string; directive_id: string; modes: Modes }>();
  const entry = (r: Record<string, unknown>) => {
    const rule = r.rule_id as string;
    const directive = by === 'rule' ? '' : (r.directive_id as string);
    const k = `${rule}\u0000${directive}`;
    let e = keys.get(k);
    if (!e) keys.set(k, (e = { rule_id: rule, directive_id: directive, modes: new Map() }));
    return e.modes;
  };
  for (const r of directives) add(entry(r), Number(r.mode), by === 'rule' ? 0 : Number(r.nodes), r);
  for (const r of corrections) {
    add(entry(r), Number(r.old_mode), 0, r, -1);
    add(entry(r), Number(r.new_mode), 0, r, 1);
  }
  const ruleNodes = new Map(rules.map((r) => [r.rule_id as string, Number(r.nodes)]));
  const out: RuleComplianceRow[] = [];
  for (const e of keys.values()) {
    const f = fold(e.modes);
    const nodes = by === 'rule' ? ruleNodes.get(e.rule_id) ?? 0 : f.nodes;
    if (nodes <= 0) continue;
    out.push({ rule_id: e.rule_id, ...(by === 'directive' ? { directive_id: e.directive_id } : {}), nodes, counts: f.counts });
  }
  return out.sort((a, b) => byteOrder(a.rule_id, b.rule_id) || byteOrder(a.directive_id ?? '', b.directive_id ?? ''));
}

/** complianceSummary's fleet-wide answer from the kept class counters and the correction rows. */
export function keptSummary(fleet: Record<string, unknown>[], corrections: Record<string, unknown>[]): ComplianceAggregate {
  const classes = new Map<string, Modes>();
  const of = (c: string) => {
    let m = classes.get(c);
    if (!m) classes.set(c, (m = new Map()));
    return m;
  };
  for (const r of fleet) add(of(r.class as string), Number(r.mode), Number(r.nodes), r);
  for (const r of corrections) {
    add(of(r.class as string), Number(r.old_mode), 0, r, -1);
    add(of(r.class as string), Number(r.new_mode), 0, r, 1);
  }
  const part = (c: NodeClass) => {
    const m = of(c);
    const f = fold(m);
    return { nodes: m.get(-1)?.nodes ?? 0, with_data: f.nodes, counts: f.counts };
  };
  const agent = part('agent');
  const relay = part('relay');
  const agentless = part('agentless');
  return {
    nodes: agent.nodes, nodes_with_data: agent.with_data, counts: agent.counts,
    relays: { nodes: relay.nodes, counts: relay.counts },
    agentless: { nodes: agentless.nodes, counts: agentless.counts },
  };
}

/**
 * complianceByGroup's answer from the kept group counters (migration 25) and the correction
 * rows: per group, its members summed as complianceSummary sums the fleet.
 */
export function keptByGroup(groups: Record<string, unknown>[], corrections: Record<string, unknown>[]): GroupComplianceRow[] {
  const by = new Map<string, { fleet: Record<string, unknown>[]; corrections: Record<string, unknown>[] }>();
  const of = (id: string) => {
    let e = by.get(id);
    if (!e) by.set(id, (e = { fleet: [], corrections: [] }));
    return e;
  };
  for (const r of groups) of(r.group_id as string).fleet.push(r);
  for (const r of corrections) of(r.group_id as string).corrections.push(r);
  const out: GroupComplianceRow[] = [];
  for (const [group_id, e] of [...by].sort(([a], [b]) => byteOrder(a, b))) {
    const agg = keptSummary(e.fleet, e.corrections);
    // A group whose members are none accepted (only 'none' rows left) is not listed, as afresh.
    if (agg.nodes + agg.relays.nodes + agg.agentless.nodes === 0) continue;
    out.push({ group_id, nodes: agg.nodes, counts: agg.counts, relays: agg.relays.nodes, agentless: agg.agentless.nodes });
  }
  return out;
}

/** The nodes a sweep from `kept` to `at` touches (their triggers move those whose mode changes). Parameters as correctionSql's 1–4. */
export const sweepTouchSql = (ph: (i: number) => string) => `UPDATE node_compliance SET keep_last_s = keep_last_s
  WHERE node_id IN (${touchedSql(ph(1), ph(2), ph(3), ph(4))})`;

/**
 * PostgreSQL: the triggers' log rows summed into the counters (rows appended meanwhile stay for
 * the next fold); each statement answers how many log rows it moved.
 */
export const FOLD_SQL = [
  `WITH moved AS (DELETE FROM kept_directives_log RETURNING *), done AS (
    INSERT INTO kept_directives AS x (rule_id, directive_id, class, mode, nodes, ${COLS})
    SELECT rule_id, directive_id, class, mode, sum(nodes), ${RUN_STATES.map((c) => `sum(${c})`).join(', ')} FROM moved GROUP BY 1, 2, 3, 4
    ON CONFLICT (rule_id, directive_id, class, mode) DO UPDATE SET nodes = x.nodes + excluded.nodes, ${RUN_STATES.map((c) => `${c} = x.${c} + excluded.${c}`).join(', ')})
    SELECT count(*) AS n FROM moved`,
  `WITH moved AS (DELETE FROM kept_rules_log RETURNING *), done AS (
    INSERT INTO kept_rules AS x (rule_id, class, nodes) SELECT rule_id, class, sum(nodes) FROM moved GROUP BY 1, 2
    ON CONFLICT (rule_id, class) DO UPDATE SET nodes = x.nodes + excluded.nodes)
    SELECT count(*) AS n FROM moved`,
  `WITH moved AS (DELETE FROM kept_fleet_log RETURNING *), done AS (
    INSERT INTO kept_fleet AS x (class, mode, nodes, ${COLS})
    SELECT class, mode, sum(nodes), ${RUN_STATES.map((c) => `sum(${c})`).join(', ')} FROM moved GROUP BY 1, 2
    ON CONFLICT (class, mode) DO UPDATE SET nodes = x.nodes + excluded.nodes, ${RUN_STATES.map((c) => `${c} = x.${c} + excluded.${c}`).join(', ')})
    SELECT count(*) AS n FROM moved`,
  `WITH moved AS (DELETE FROM kept_node_counts_log RETURNING *), done AS (
    INSERT INTO kept_node_counts AS x (field, value, nodes) SELECT field, value, sum(nodes) FROM moved GROUP BY 1, 2
    ON CONFLICT (field, value) DO UPDATE SET nodes = x.nodes + excluded.nodes)
    SELECT count(*) AS n FROM moved`,
  `WITH moved AS (DELETE FROM kept_groups_log RETURNING *), done AS (
    INSERT INTO kept_groups AS x (group_id, class, mode, nodes, ${COLS})
    SELECT group_id, class, mode, sum(nodes), ${RUN_STATES.map((c) => `sum(${c})`).join(', ')} FROM moved GROUP BY 1, 2, 3
    ON CONFLICT (group_id, class, mode) DO UPDATE SET nodes = x.nodes + excluded.nodes, ${RUN_STATES.map((c) => `${c} = x.${c} + excluded.${c}`).join(', ')})
    SELECT count(*) AS n FROM moved`,
];

/**
 * Log rows folded at once past which the sweep vacuums the logs: readers scan them whole, dead
 * rows included, until autovacuum comes (a first fold of 100,000 nodes' rows left 500,000 dead
 * ones; the kept reads took 220–570 ms under load until then).
 */
export const FOLD_VACUUM_ROWS = 10_000;
