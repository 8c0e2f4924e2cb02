/** Vulnerability rows, the same in both backends (JSON as text). */
import type { AdvisoryRow, AdvisoryTally, FeedStateRow, MuteRow, VulnFindingRow } from './types.js';

type Row = Record<string, unknown>;
const str = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));
const json = (v: unknown): unknown => (v === null || v === undefined ? null : JSON.parse(String(v)));

export const ADVISORY_COLUMNS = 'id, modified, withdrawn, summary, rating, cves, doc';
export const advisoryParams = (a: AdvisoryRow): unknown[] => [a.id, a.modified, a.withdrawn, a.summary, a.rating, JSON.stringify(a.cves), JSON.stringify(a.doc)];
export const advisoryFromRow = (r: Row): AdvisoryRow => ({
  id: String(r.id), modified: String(r.modified), withdrawn: str(r.withdrawn), summary: str(r.summary), rating: str(r.rating),
  cves: json(r.cves) as string[], doc: json(r.doc),
});

export const FEED_COLUMNS = 'name, source, imported_at, feed_date, report, error';
export const feedParams = (f: FeedStateRow): unknown[] => [f.name, f.source, f.imported_at, f.feed_date, f.report === null ? null : JSON.stringify(f.report), f.error];
export const feedFromRow = (r: Row): FeedStateRow => ({
  name: String(r.name), source: String(r.source), imported_at: str(r.imported_at), feed_date: str(r.feed_date), report: json(r.report), error: str(r.error),
});

export const FINDING_COLUMNS = 'node_id, advisory, package, version, rating, fixed, match, found_at';
export const findingParams = (f: VulnFindingRow): unknown[] => [f.node_id, f.advisory, f.package, f.version, f.rating, f.fixed, JSON.stringify(f.match), f.found_at];
export const findingFromRow = (r: Row): VulnFindingRow => ({
  node_id: String(r.node_id), advisory: String(r.advisory), package: String(r.package), version: String(r.version),
  rating: str(r.rating), fixed: str(r.fixed), match: json(r.match), found_at: String(r.found_at),
});

export const MUTE_COLUMNS = 'id, target, mute_groups, reason, expires, created_at, created_by';
export const muteParams = (m: MuteRow): unknown[] => [m.id, m.target, m.groups ? JSON.stringify(m.groups) : null, m.reason, m.expires, m.created_at, m.created_by];
export const muteFromRow = (r: Row): MuteRow => ({
  id: String(r.id), target: String(r.target), groups: json(r.mute_groups) as string[] | null, reason: String(r.reason),
  expires: str(r.expires), created_at: String(r.created_at), created_by: String(r.created_by),
});

/** Rows per multi-row statement (well under both databases' parameter limits). */
export const BATCH = 200;

export function chunks<T>(list: readonly T[], n = BATCH): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < list.length; i += n) out.push(list.slice(i, i + n));
  return out;
}

const TALLY_RANK = `CASE f.rating WHEN 'none' THEN 0 WHEN 'low' THEN 1 WHEN 'medium' THEN 2 WHEN 'high' THEN 3 WHEN 'critical' THEN 4 ELSE -1 END`;
const TALLY_RATINGS = ['none', 'low', 'medium', 'high', 'critical'];

/**
 * advisoryTally's statement, both stores: each finding marked muted or not by the filter terms'
 * own condition (findingUnmuted), counted per advisory. `unmuted` comes first in the text, then
 * `scope` (SQLite binds by position).
 */
export function tallySql(unmuted: string, scope: string | null): string {
  return `SELECT x.advisory, max(x.rank) AS rank, count(DISTINCT CASE WHEN x.ok = 1 THEN x.node_id END) AS nodes,
    count(DISTINCT CASE WHEN x.ok = 0 THEN x.node_id END) AS muted
  FROM (SELECT f.advisory, f.node_id, ${TALLY_RANK} AS rank, CASE WHEN ${unmuted} THEN 1 ELSE 0 END AS ok
    FROM vuln_findings f JOIN vuln_advisories a ON a.id = f.advisory${scope === null ? '' : ` WHERE f.node_id IN (SELECT n.id FROM nodes n WHERE ${scope})`}) x
  GROUP BY x.advisory ORDER BY x.advisory`;
}

export const tallyFromRow = (r: Row): AdvisoryTally => ({
  advisory: String(r.advisory), rating: TALLY_RATINGS[Number(r.rank)] ?? null, nodes: Number(r.nodes), muted: Number(r.muted),
});
