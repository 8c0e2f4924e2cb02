/**
 * A rule's nodes (the drill-down from a rule or one of its directives) read from the kept keys
 * (migrations 28 and 37) a page at a time, instead of every node under the rule judged and sorted.
 *
 * The page is cut from parts each read in the page's order and no further than it reaches (as
 * the node list's compliance sort, nodes/compliance-page.ts), all leaving out the nodes whose
 * thresholds lie between the swept ones and the moment's (kept.ts): any other node has the same
 * time mode at both, so what its kept mode and rows tell is true at the moment.
 * - The keys in order (kept_targets_key_idx): those of the agents in kept mode 0, whose run
 *   decides (migration 37 keeps no other).
 * - The agents out of mode 0 (applying, or silent) by id (kept_nodes_off_idx), each with a
 *   compliance row under the rule: share 0 and the state of its mode when one of those rows
 *   expects an item, else no key.
 * - The nodes without a key (no item: last in both orders), by node id, from both.
 * - The nodes left out, judged at the moment (few: those the sweep has not reached yet).
 * Only the page's nodes are then judged and returned. The total is every agent with a row under
 * the rule, whatever its time mode, read from the kept counters (migration 23); filtered by a
 * state, it counts the kept keys, the nodes out of mode 0 and the judged ones. The answer equals rows.ts targetNodesSql's
 * (targetNodesFresh keeps that one).
 */
import { RUN_STATES } from '@capstan/shared/compliance/compute';
import { stateBit } from '../migrations/0028_kept_targets.js';
import { keptSource, sameThresholds, touchedLiteralSql, type KeptThresholds } from './kept.js';
import { targetJudgedSql, targetOrder, type TargetSpec } from './rows.js';
import type { ComplianceClock } from './types.js';

/** The two statements of a page (`page`: its rows, judged and sorted; `total`: one row, `total`), with their parameters. */
export interface TargetStatements {
  page: { text: string; values: unknown[] };
  total: { text: string; values: unknown[] };
}

/** A compliance row `d` expects an item (any state but unexpected). */
const EXPECTS = `(${RUN_STATES.filter((c) => c !== 'unexpected').map((c) => `d.${c}`).join(' + ')}) > 0`;

/**
 * The extra condition on an agent out of mode 0 for a state filter (applying shows on a node
 * applying, no_answer on a silent one: on its expected items); null when the filter keeps none.
 */
function offMode(state: string | undefined): string | null {
  if (state === undefined) return '';
  if (state === 'applying') return ' AND n.mode = 1';
  if (state === 'no_answer') return ' AND n.mode = 2';
  return null;
}

/**
 * The statements for a reader whose snapshot holds the thresholds swept to `kept`. `ph(i)` is
 * the dialect's placeholder for the i-th value; values are bound in the order of the text. `pg`:
 * the counters have their logs beside them (PostgreSQL).
 */
export function targetKeptSql(
  ph: (i: number) => string, classSql: string, q: TargetSpec, clock: ComplianceClock, kept: KeptThresholds, limit: number, offset: number, pg: boolean,
): TargetStatements {
  const at: KeptThresholds = { silent_before: clock.now_s - clock.silence_s, applying_after: clock.now_s - clock.applying_s };
  const corrected = !sameThresholds(kept, at);
  const d = q.order === 'desc' ? 'DESC' : 'ASC';
  const statement = () => {
    const values: unknown[] = [];
    return { values, param: (v: unknown) => ph(values.push(v)) };
  };
  // The thresholds' ends are whole seconds written into the text (kept.ts touchedLiteralSql).
  const head = corrected ? `WITH c AS (${touchedLiteralSql(kept, at)}), ` : 'WITH ';
  const left = (id: string) => (corrected ? ` AND ${id} NOT IN (SELECT node_id FROM c)` : '');
  const state = q.state !== undefined ? ` AND (k.states & ${stateBit(q.state)}) <> 0` : '';
  const scope = (param: (v: unknown) => string) => `k.rule_id = ${param(q.rule_id)} AND k.directive_id = ${param(q.directive_id ?? '')}${state}${left('k.node_id')}`;
  const mode = offMode(q.state);
  // The agents out of mode 0 (the terms of kept_nodes_off_idx's condition written out, for SQLite
  // to take it) with a row under the rule, one expecting an item (`expects` true), or none.
  const under = (param: (v: unknown) => string, expects: boolean) => `SELECT 1 FROM node_compliance_directives d
      WHERE d.node_id = n.node_id AND d.rule_id = ${param(q.rule_id)}${q.directive_id !== undefined ? ` AND d.directive_id = ${param(q.directive_id)}` : ''}${expects ? ` AND ${EXPECTS}` : ''}`;
  const off = `kept_nodes n WHERE n.mode <> 0 AND n.class = 'agent'${mode ?? ''}${left('n.node_id')}`;

  const p = statement();
  const cut = limit + offset;
  const shares = `SELECT k.node_id, k.share AS target_key FROM kept_targets k WHERE ${scope(p.param)} AND k.share IS NOT NULL
    ORDER BY k.share ${d}, k.node_id ${d} LIMIT ${p.param(cut)}`;
  const zeros = mode === null ? '' : `, o AS MATERIALIZED (SELECT n.node_id, CAST(0 AS DOUBLE PRECISION) AS target_key FROM ${off}
      AND EXISTS (${under(p.param, true)}) ORDER BY n.node_id ${d} LIMIT ${p.param(cut)})`;
  // Each of the parts after these is needed only when those before did not fill the cut (a deep
  // page otherwise walked every keyless row): its LIMIT is what is left of the cut, 0 when
  // nothing (a LIMIT 0 reads nothing), from the counts of the parts before it, materialized.
  const rest = (before: string[]) => `(SELECT CASE WHEN r.n > 0 THEN r.n ELSE 0 END FROM (SELECT ${p.param(cut)}${before.map((x) => ` - (SELECT count(*) FROM ${x})`).join('')} AS n) r)`;
  const filled = mode === null ? ['a'] : ['a', 'o'];
  const keyless = `, b AS MATERIALIZED (SELECT k.node_id, CAST(NULL AS DOUBLE PRECISION) AS target_key FROM kept_targets k WHERE ${scope(p.param)} AND k.share IS NULL
    ORDER BY k.node_id ${d} LIMIT ${rest(filled)})`;
  // An agent out of mode 0 whose rows under the rule expect nothing (only a filter on its mode's state leaves it out).
  const offKeyless = mode !== '' ? '' : ` UNION ALL SELECT * FROM (SELECT n.node_id, CAST(NULL AS DOUBLE PRECISION) AS target_key FROM ${off}
      AND EXISTS (${under(p.param, false)}) AND NOT EXISTS (${under(p.param, true)}) ORDER BY n.node_id ${d} LIMIT ${rest([...filled, 'b'])}) b2`;
  const judgedLeft = corrected ? ` UNION ALL SELECT node_id, target_key FROM (${targetJudgedSql(p.param, classSql, q, clock, 'SELECT node_id FROM c')}) f` : '';
  const ids = `SELECT node_id, target_key FROM (SELECT * FROM a${mode === null ? '' : ' UNION ALL SELECT * FROM o'}
      UNION ALL SELECT * FROM b${offKeyless}${judgedLeft}) u
    ${targetOrder(q.order)} LIMIT ${p.param(limit)} OFFSET ${p.param(offset)}`;
  const pageText = `${head}a AS MATERIALIZED (${shares})${zeros}${keyless}, ids AS (${ids})
    SELECT j.* FROM (${targetJudgedSql(p.param, classSql, q, clock, 'SELECT node_id FROM ids')}) j ${targetOrder(q.order, 'j.')}`;

  const tt = statement();
  if (q.state === undefined) {
    // Every agent with a row under the rule, whatever its time mode: the kept counters have it.
    const counted = `SELECT coalesce(sum(s.nodes), 0) AS total FROM ${q.directive_id === undefined ? keptSource('kept_rules', pg, 'rule_id, class, nodes')
      : keptSource('kept_directives', pg, 'rule_id, directive_id, class, nodes')} s
      WHERE s.class = 'agent' AND s.rule_id = ${tt.param(q.rule_id)}${q.directive_id !== undefined ? ` AND s.directive_id = ${tt.param(q.directive_id)}` : ''}`;
    return { page: { text: pageText, values: p.values }, total: { text: counted, values: tt.values } };
  }
  const keptCount = `SELECT count(*) FROM kept_targets k WHERE ${scope(tt.param)}`;
  const offCount = mode === null ? '' : ` + (SELECT count(*) FROM ${off} AND EXISTS (${under(tt.param, true)}))`;
  const judgedCount = corrected ? ` + (SELECT count(*) FROM (${targetJudgedSql(tt.param, classSql, q, clock, 'SELECT node_id FROM c')}) f)` : '';
  const totalText = `${corrected ? `WITH c AS (${touchedLiteralSql(kept, at)}) ` : ''}SELECT (${keptCount})${offCount}${judgedCount} AS total`;
  return { page: { text: pageText, values: p.values }, total: { text: totalText, values: tt.values } };
}
