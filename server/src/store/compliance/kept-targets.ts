/**
 * A rule's nodes (the drill-down from a rule or one of its directives) read from the kept keys
 * (migration 28) a page at a time, instead of every node under the rule judged and sorted.
 *
 * The page is cut from three parts, each read in the page's order and no further than it reaches
 * (as the node list's compliance sort, nodes/compliance-page.ts):
 * - the kept keys in order (kept_targets_key_idx), leaving out the nodes whose thresholds lie
 *   between the swept ones and the moment's (kept.ts): any other node has the same time mode at
 *   both, so its key and states at the moment are its kept ones;
 * - the same for the nodes without a key (no item: last in both orders), by node id;
 * - the nodes left out, judged at the moment (few: those the sweep has not reached yet).
 * Only the page's nodes are then judged and returned; the total counts the kept rows and the
 * judged ones. The answer equals rows.ts targetNodesSql's (targetNodesFresh keeps that one).
 */
import { stateBit } from '../migrations/0028_kept_targets.js';
import { sameThresholds, touchedLiteralSql, type KeptThresholds } from './kept.js';
import { targetJudgedSql, targetOrder, type TargetSpec } from './rows.js';
import type { ComplianceClock } from './types.js';

/** The two statements of a page (`page`: its rows, judged and sorted; `total`: one row, `total`), with their parameters. */
export interface TargetStatements {
  page: { text: string; values: unknown[] };
  total: { text: string; values: unknown[] };
}

/**
 * The statements for a reader whose snapshot holds the thresholds swept to `kept`. `ph(i)` is
 * the dialect's placeholder for the i-th value.
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
  const left = corrected ? ' AND k.node_id NOT IN (SELECT node_id FROM c)' : '';
  const state = q.state !== undefined ? ` AND (k.states & ${stateBit(q.state)}) <> 0` : '';
  const scope = (param: (v: unknown) => string) => `k.rule_id = ${param(q.rule_id)} AND k.directive_id = ${param(q.directive_id ?? '')}${state}${left}`;

  const p = statement();
  const cut = limit + offset;
  const shares = `SELECT k.node_id, k.share AS target_key FROM kept_targets k WHERE ${scope(p.param)} AND k.share IS NOT NULL
    ORDER BY k.share ${d}, k.node_id ${d} LIMIT ${p.param(cut)}`;
  // Needed only when the keys did not fill the cut (a deep page otherwise walked every keyless row).
  const keyless = `SELECT k.node_id, CAST(NULL AS DOUBLE PRECISION) AS target_key FROM kept_targets k WHERE ${scope(p.param)} AND k.share IS NULL
    ORDER BY k.node_id ${d} LIMIT (${p.param(cut)} - (SELECT count(*) FROM a))`;
  const judgedLeft = corrected ? ` UNION ALL SELECT node_id, target_key FROM (${targetJudgedSql(p.param, classSql, q, clock, 'SELECT node_id FROM c')}) f` : '';
  const ids = `SELECT node_id, target_key FROM (SELECT * FROM a UNION ALL SELECT * FROM (${keyless}) b${judgedLeft}) u
    ${targetOrder(q.order)} LIMIT ${p.param(limit)} OFFSET ${p.param(offset)}`;
  const pageText = `${head}a AS MATERIALIZED (${shares}), ids AS (${ids})
    SELECT j.* FROM (${targetJudgedSql(p.param, classSql, q, clock, 'SELECT node_id FROM ids')}) j ${targetOrder(q.order, 'j.')}`;

  const tt = statement();
  const keptCount = `SELECT count(*) FROM kept_targets k WHERE ${scope(tt.param)}`;
  const judgedCount = corrected ? ` + (SELECT count(*) FROM (${targetJudgedSql(tt.param, classSql, q, clock, 'SELECT node_id FROM c')}) f)` : '';
  const totalText = `${corrected ? `WITH c AS (${touchedLiteralSql(kept, at)}) ` : ''}SELECT (${keptCount})${judgedCount} AS total`;
  return { page: { text: pageText, values: p.values }, total: { text: totalText, values: tt.values } };
}
