/**
 * A node list page sorted by compliance at a moment (`sort=compliance`), read from the kept
 * shares (migration 27) in index order instead of every node's key computed and sorted.
 *
 * The page is cut from three parts, each read in the page's order and no further than it reaches:
 * - the kept shares in order (kept_nodes_share_idx), leaving out the nodes whose thresholds lie
 *   between the swept ones and the moment's (compliance/kept.ts): any other node has the same
 *   mode at both, so its key at the moment is its kept share;
 * - those nodes, their key computed at the moment (complianceKeySql);
 * - the nodes without a key (no compliance row, or a run that counted no item: whatever the
 *   moment), by id, as the sort puts them last in both directions.
 * The answer equals nodePage's with complianceKeySql over every node (listNodesFresh keeps that one).
 */
import { RUN_STATES } from '@capstan/shared/compliance/compute';
import { touchedLiteralSql, type KeptThresholds } from '../compliance/kept.js';
import { complianceKeySql } from './filters/query.js';
import { NODE_COLUMNS, withCertificates } from './records.js';

/**
 * The statement, for a reader whose snapshot holds the thresholds swept to `kept` (kept_sweep):
 * `where` (the filters over `nodes n`, or '') appears three times; the
 * placeholders come in this order in the text: `where`'s, `cut`, `where`'s, `where`'s, `cut`,
 * `limit`, `offset`. `cut` is limit + offset (how far each part is read), `order` orderBy()'s.
 */
export function nodePageByCompliance(
  where: string, order: string, dir: 'asc' | 'desc' | undefined, at: KeptThresholds, kept: KeptThresholds,
  p: { cut: string; limit: string; offset: string }, collate: string,
): string {
  const d = dir === 'desc' ? 'DESC' : 'ASC';
  const cols = NODE_COLUMNS.map((c) => `n.${c}`).join(', ');
  const and = (...conds: string[]) => (where ? `${where} AND ${conds.join(' AND ')}` : `WHERE ${conds.join(' AND ')}`);
  // Each part answers ids and keys; the page's nodes are read once it is cut (a deep page
  // carried thousands of whole rows through the parts otherwise).
  // Without filters the walk starts from the share index (CROSS JOIN: SQLite keeps the order);
  // with them, each planner may rather start from the nodes a filter's index finds.
  const join = where ? ',' : ' CROSS JOIN';
  const shares = `SELECT n.id, k.share AS compliance_key FROM kept_nodes k${join} nodes n
      ${and('n.id = k.node_id', 'k.share IS NOT NULL', 'k.node_id NOT IN (SELECT node_id FROM c)')}
      ORDER BY k.share ${d}, k.node_id ${d} LIMIT ${p.cut}`;
  // The corrected nodes first (CROSS JOIN: SQLite otherwise walked every share to find them),
  // those with a key (items counted, as a kept share is not NULL), each looked up by id.
  const corrected = `SELECT n.id, ${complianceKeySql(at)} AS compliance_key
      FROM c CROSS JOIN nodes n CROSS JOIN node_compliance t
      ${and('n.id = c.node_id', 't.node_id = c.node_id', `(${RUN_STATES.map((s) => `t.${s}`).join(' + ')}) > 0`)}`;
  // The nodes without a key sort after every other: needed only when the shares did not fill
  // the cut (a deep page otherwise walked every node looking for more). A scalar subquery, not
  // NOT EXISTS: PostgreSQL made that an anti-join over every node and every share when its
  // statistics said few nodes lack one; this walks the nodes by id.
  const keyless = `SELECT * FROM (SELECT n.id, CAST(NULL AS DOUBLE PRECISION) AS compliance_key FROM nodes n
      ${and('(SELECT k.share FROM kept_nodes k WHERE k.node_id = n.id) IS NULL')}
      ORDER BY n.id${collate} ${d} LIMIT (${p.cut} - (SELECT count(*) FROM a))) z`;
  const ids = `SELECT id, compliance_key FROM (SELECT * FROM a UNION ALL ${corrected} UNION ALL ${keyless}) n
    ${order} LIMIT ${p.limit} OFFSET ${p.offset}`;
  return withCertificates(`WITH c AS (${touchedLiteralSql(kept, at)}), a AS MATERIALIZED (${shares})
    SELECT ${cols}, x.compliance_key FROM (${ids}) x CROSS JOIN nodes n WHERE n.id = x.id`, order);
}
