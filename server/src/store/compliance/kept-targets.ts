/**
 * A rule's nodes (the drill-down from a rule or one of its directives) read from the kept keys
 * (migrations 28 and 37) a page at a time, instead of every node under the rule judged and sorted.
 *
 * The page is cut from parts each read in the page's order and no further than it reaches (as
 * the node list's compliance sort, nodes/compliance-page.ts), all leaving out the nodes whose
 * thresholds lie between the swept ones and the moment's (kept.ts): any other node has the same
 * time mode at both, so what its kept mode and rows tell is true at the moment.
 * - The keys in order (kept_targets_key_idx) of the agents in kept mode 0, whose run decides:
 *   their keys are kept (migration 37); a key of a node out of mode 0 is left out, as it was when
 *   the node left.
 * - The agents out of mode 0 (applying, or silent) with compliance rows under the rule, from
 *   kept_nodes and those rows: each has share 0 and the state of its mode when one of those rows
 *   expects an item, else no key.
 * - The nodes without a key (no item: last in both orders), by node id, from both.
 * - The nodes left out, judged at the moment (few: those the sweep has not reached yet).
 * Only the page's nodes are then judged and returned; the total counts the kept keys, the nodes
 * out of mode 0 and the judged ones. The answer equals rows.ts targetNodesSql's
 * (targetNodesFresh keeps that one).
 */
import { RUN_STATES } from '@capstan/shared/compliance/compute';
import { stateBit } from '../migrations/0028_kept_targets.js';
import { sameThresholds, touchedLiteralSql, type KeptThresholds } from './kept.js';
import { targetJudgedSql, targetOrder, type TargetSpec } from './rows.js';
import type { ComplianceClock } from './types.js';

/** The two statements of a page (`page`: its rows, judged and sorted; `total`: one row, `total`), with their parameters. */
export interface TargetStatements {
  page: { text: string; values: unknown[] };
  total: { text: string; values: unknown[] };
}

/** The items a compliance row `d` expects: every state but unexpected. */
const EXPECTED = `(${RUN_STATES.filter((c) => c !== 'unexpected').map((c) => `d.${c}`).join(' + ')})`;

/**
 * Which kept modes out of 0 a state filter keeps (a node applying shows `applying` on its
 * expected items, a silent one `no_answer`); null when it keeps none of them.
 */
function offModes(state: string | undefined): string | null {
  if (state === undefined) return 'n.mode <> 0';
  if (state === 'applying') return 'n.mode = 1';
  if (state === 'no_answer') return 'n.mode = 2';
  return null;
}

/**
 * The statements for a reader whose snapshot holds the thresholds swept to `kept`. `ph(i)` is
 * the dialect's placeholder for the i-th value; values are bound in the order of the text.
 */
export function targetKeptSql(
  ph: (i: number) => string, classSql: string, q: TargetSpec, clock: ComplianceClock, kept: KeptThresholds, limit: number, offset: number,
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
  // CROSS JOIN: SQLite walks the keys' index in order and looks each node up, as PostgreSQL does under a LIMIT.
  const keys = (param: (v: unknown) => string) => `kept_targets k CROSS JOIN kept_nodes n
    WHERE k.rule_id = ${param(q.rule_id)} AND k.directive_id = ${param(q.directive_id ?? '')}${state}
      AND n.node_id = k.node_id AND n.class = 'agent' AND n.mode = 0${left('k.node_id')}`;
  const modes = offModes(q.state);
  const off = (param: (v: unknown) => string) => `SELECT n.node_id,
      CASE WHEN sum(${EXPECTED}) > 0 THEN CAST(0 AS DOUBLE PRECISION) END AS target_key
    FROM kept_nodes n CROSS JOIN node_compliance_directives d
    WHERE n.class = 'agent' AND ${modes} AND d.node_id = n.node_id AND d.rule_id = ${param(q.rule_id)}
      ${q.directive_id !== undefined ? `AND d.directive_id = ${param(q.directive_id)}` : ''}${left('n.node_id')}
    GROUP BY n.node_id${q.state !== undefined ? ` HAVING sum(${EXPECTED}) > 0` : ''}`;

  const p = statement();
  const cut = limit + offset;
  const shares = `SELECT k.node_id, k.share AS target_key FROM ${keys(p.param)} AND k.share IS NOT NULL
    ORDER BY k.share ${d}, k.node_id ${d} LIMIT ${p.param(cut)}`;
  const offCtes = modes === null ? '' : `, o AS MATERIALIZED (${off(p.param)}),
    o0 AS (SELECT node_id, target_key FROM o WHERE target_key IS NOT NULL ORDER BY node_id ${d} LIMIT ${p.param(cut)})`;
  // Needed only when the shares did not fill the cut (a deep page otherwise walked every keyless row).
  const filled = modes === null ? '(SELECT count(*) FROM a)' : '(SELECT count(*) FROM a) - (SELECT count(*) FROM o0)';
  const keyless = `SELECT k.node_id, CAST(NULL AS DOUBLE PRECISION) AS target_key FROM ${keys(p.param)} AND k.share IS NULL
    ORDER BY k.node_id ${d} LIMIT (SELECT CASE WHEN r.n > 0 THEN r.n ELSE 0 END FROM (SELECT ${p.param(cut)} - ${filled} AS n) r)`;
  const offKeyless = modes === null ? '' : ` UNION ALL SELECT * FROM (SELECT node_id, target_key FROM o WHERE target_key IS NULL
    ORDER BY node_id ${d} LIMIT ${p.param(cut)}) b2`;
  const judgedLeft = corrected ? ` UNION ALL SELECT node_id, target_key FROM (${targetJudgedSql(p.param, classSql, q, clock, 'SELECT node_id FROM c')}) f` : '';
  const ids = `SELECT node_id, target_key FROM (SELECT * FROM a${modes === null ? '' : ' UNION ALL SELECT * FROM o0'}
      UNION ALL SELECT * FROM (${keyless}) b${offKeyless}${judgedLeft}) u
    ${targetOrder(q.order)} LIMIT ${p.param(limit)} OFFSET ${p.param(offset)}`;
  const pageText = `${head}a AS MATERIALIZED (${shares})${offCtes}, ids AS (${ids})
    SELECT j.* FROM (${targetJudgedSql(p.param, classSql, q, clock, 'SELECT node_id FROM ids')}) j ${targetOrder(q.order, 'j.')}`;

  const tt = statement();
  const keptCount = `SELECT count(*) FROM ${keys(tt.param)}`;
  const offCount = modes === null ? '' : ` + (SELECT count(*) FROM (${off(tt.param)}) o)`;
  const judgedCount = corrected ? ` + (SELECT count(*) FROM (${targetJudgedSql(tt.param, classSql, q, clock, 'SELECT node_id FROM c')}) f)` : '';
  const totalText = `${corrected ? `WITH c AS (${touchedLiteralSql(kept, at)}) ` : ''}SELECT (${keptCount})${offCount}${judgedCount} AS total`;
  return { page: { text: pageText, values: p.values }, total: { text: totalText, values: tt.values } };
}
