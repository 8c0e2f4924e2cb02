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
 * - The nodes without a key (no item: last in both orders), by node id, from both; on SQLite the
 *   agents out of mode 0 among them found from their rows that expect nothing (migration 40's
 *   index), not from every such agent (a deep page, read from the end, reads this part first,
 *   and it is most often empty).
 * - The nodes left out, judged at the moment (few: those the sweep has not reached yet).
 * Only the page's nodes are then judged and returned. The total is every agent with a row under
 * the rule, whatever its time mode, read from the kept counters (migration 23); filtered by a
 * state, it counts the kept keys, the nodes out of mode 0 and the judged ones. The answer equals
 * rows.ts targetNodesSql's (targetNodesFresh keeps that one).
 */
import { stateBit } from '../migrations/0028_kept_targets.js';
import { expectsNothing } from '../migrations/0040_rows_expecting_nothing.js';
import { keptSource, sameThresholds, touchedLiteralSql, type KeptThresholds } from './kept.js';
import { expectedSum, targetJudgedSql, targetOrder, type TargetSpec } from './rows.js';
import type { ComplianceClock } from './types.js';

/** A statement and its parameters. */
export interface Statement {
  text: string;
  values: unknown[];
}

/**
 * The statements of a drill-down: `total` (one row, `total`) is read first; `page(total)` is then
 * the page's rows, judged and sorted, or null for a page past the end.
 */
export interface TargetStatements {
  total: Statement;
  page: (total: number) => Statement | null;
}

/** A compliance row `d` expects an item. */
const EXPECTS = `${expectedSum('d')} > 0`;

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

const flip = (dir: 'ASC' | 'DESC') => (dir === 'ASC' ? 'DESC' : 'ASC');

/**
 * The statements for a reader whose snapshot holds the thresholds swept to `kept`. `ph(i)` is
 * the dialect's placeholder for the i-th value; values are bound in the order of the text. `pg`:
 * PostgreSQL (the counters have their logs beside them; no index of the rows expecting nothing).
 *
 * A page in the second half is cut walking from the end (every part in the other direction, the
 * nodes without a key first), so that a deep page reads what lies after it instead of everything
 * before it; its rows are then sorted in the order asked.
 */
export function targetKeptSql(
  ph: (i: number) => string, classSql: string, q: TargetSpec, clock: ComplianceClock, kept: KeptThresholds, limit: number, offset: number, pg: boolean,
): TargetStatements {
  const at: KeptThresholds = { silent_before: clock.now_s - clock.silence_s, applying_after: clock.now_s - clock.applying_s };
  const corrected = !sameThresholds(kept, at);
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
  const judged = (param: (v: unknown) => string, nodes: string) => targetJudgedSql(param, classSql, q, clock, nodes);

  const tt = statement();
  let total: string;
  if (q.state === undefined) {
    // Every agent with a row under the rule, whatever its time mode: the kept counters have it.
    total = `SELECT coalesce(sum(s.nodes), 0) AS total FROM ${q.directive_id === undefined ? keptSource('kept_rules', pg, 'rule_id, class, nodes')
      : keptSource('kept_directives', pg, 'rule_id, directive_id, class, nodes')} s
      WHERE s.class = 'agent' AND s.rule_id = ${tt.param(q.rule_id)}${q.directive_id !== undefined ? ` AND s.directive_id = ${tt.param(q.directive_id)}` : ''}`;
  } else {
    const keptCount = `SELECT count(*) FROM kept_targets k WHERE ${scope(tt.param)}`;
    const offCount = mode === null ? '' : ` + (SELECT count(*) FROM ${off} AND EXISTS (${under(tt.param, true)}))`;
    const judgedCount = corrected ? ` + (SELECT count(*) FROM (${judged(tt.param, 'SELECT node_id FROM c')}) f)` : '';
    total = `${corrected ? `WITH c AS (${touchedLiteralSql(kept, at)}) ` : ''}SELECT (${keptCount})${offCount}${judgedCount} AS total`;
  }

  const page = (count: number): Statement | null => {
    if (offset >= count) return null;
    // From the end when that is nearer: the rows at `skip` from it, `take` of them.
    const back = offset + limit / 2 > count / 2;
    const take = back ? Math.min(limit, count - offset) : limit;
    const skip = back ? Math.max(0, count - offset - limit) : offset;
    const asked = q.order === 'desc' ? 'DESC' : 'ASC';
    const d = back ? flip(asked) : asked;
    const cut = take + skip;
    const p = statement();
    // A part after others is needed only when those did not fill the cut (a deep page otherwise
    // walked every row before it): its LIMIT is what is left of the cut, 0 when nothing (a LIMIT
    // 0 reads nothing), from the counts of the parts before it (materialized, as every part).
    const rest = (before: string[]) => (before.length === 0 ? p.param(cut)
      : `(SELECT CASE WHEN r.n > 0 THEN r.n ELSE 0 END FROM (SELECT ${p.param(cut)}${before.map((x) => ` - (SELECT count(*) FROM ${x})`).join('')} AS n) r)`);
    const parts: Array<{ name: string; sql: (limit: () => string) => string; keyed: boolean }> = [
      // The keys with a share, then the agents out of mode 0 expecting an item (share 0).
      { name: 'a', keyed: true, sql: (l) => `SELECT k.node_id, k.share AS target_key FROM kept_targets k WHERE ${scope(p.param)} AND k.share IS NOT NULL
        ORDER BY k.share ${d}, k.node_id ${d} LIMIT ${l()}` },
      ...(mode === null ? [] : [{ name: 'o', keyed: true, sql: (l: () => string) => `SELECT n.node_id, CAST(0 AS DOUBLE PRECISION) AS target_key FROM ${off}
        AND EXISTS (${under(p.param, true)}) ORDER BY n.node_id ${d} LIMIT ${l()}` }]),
      // The nodes without a key: kept ones, and agents out of mode 0 whose rows expect nothing
      // (only a filter on their mode's state leaves those out).
      { name: 'b', keyed: false, sql: (l) => `SELECT k.node_id, CAST(NULL AS DOUBLE PRECISION) AS target_key FROM kept_targets k WHERE ${scope(p.param)} AND k.share IS NULL
        ORDER BY k.node_id ${d} LIMIT ${l()}` },
      ...(mode !== '' ? [] : [{ name: 'b2', keyed: false, sql: (l: () => string) => (pg
        ? `SELECT n.node_id, CAST(NULL AS DOUBLE PRECISION) AS target_key FROM ${off}
        AND EXISTS (${under(p.param, false)}) AND NOT EXISTS (${under(p.param, true)}) ORDER BY n.node_id ${d} LIMIT ${l()}`
        : `SELECT DISTINCT u.node_id, CAST(NULL AS DOUBLE PRECISION) AS target_key FROM node_compliance_directives u JOIN kept_nodes n ON n.node_id = u.node_id
        WHERE u.rule_id = ${p.param(q.rule_id)}${q.directive_id !== undefined ? ` AND u.directive_id = ${p.param(q.directive_id)}` : ''} AND ${expectsNothing('u')}
          AND n.mode <> 0 AND n.class = 'agent'${left('n.node_id')} AND NOT EXISTS (${under(p.param, true)}) ORDER BY u.node_id ${d} LIMIT ${l()}`) }]),
    ];
    // In the order of the walk: from the end, the nodes without a key come first. The parts of
    // one group interleave (by share, then node), so each may fill the cut; the second group's
    // parts take what the first's left of it. Each LIMIT is bound where it stands in the text,
    // after the part's own values.
    const first = parts.filter((x) => x.keyed !== back);
    const second = parts.filter((x) => x.keyed === back);
    const ctes = [...first.map((x) => `${x.name} AS MATERIALIZED (${x.sql(() => rest([]))})`),
      ...second.map((x) => `${x.name} AS MATERIALIZED (${x.sql(() => rest(first.map((y) => y.name)))})`)];
    const walk = [...first, ...second];
    const judgedLeft = corrected ? ` UNION ALL SELECT node_id, target_key FROM (${judged(p.param, 'SELECT node_id FROM c')}) f` : '';
    const nulls = back ? 'CASE WHEN target_key IS NULL THEN 0 ELSE 1 END' : 'CASE WHEN target_key IS NULL THEN 1 ELSE 0 END';
    const ids = `SELECT node_id, target_key FROM (${walk.map((x) => `SELECT * FROM ${x.name}`).join(' UNION ALL ')}${judgedLeft}) u
      ORDER BY ${nulls}, target_key ${d}, node_id ${d} LIMIT ${p.param(take)} OFFSET ${p.param(skip)}`;
    const text = `${head}${ctes.join(', ')}, ids AS (${ids})
      SELECT j.* FROM (${judged(p.param, 'SELECT node_id FROM ids')}) j ${targetOrder(q.order, 'j.')}`;
    return { text, values: p.values };
  };
  return { total: { text: total, values: tt.values }, page };
}
