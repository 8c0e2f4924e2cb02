/**
 * The filter language's vulnerability terms in SQL, for both stores (shared/src/filter/evaluate.ts
 * is their meaning in memory): over a node's findings (vuln_findings, migration 21) that no mute
 * in force covers, as the views apply mutes (server/src/vulns/views.ts): a fleet-wide mute
 * everywhere, a mute limited to groups on the members of those groups only (`group = <id>`'s
 * meaning: registry groups and policy groups). The group-limited mutes are read before the
 * statement (Dialect.groupMutes); inside a policy group's own filter the terms see fleet-wide
 * mutes only. Parameters are bound in the order they appear in the text (SQLite's placeholders
 * are positional).
 */
import type { CompareOp, FilterValue } from '@capstan/shared/filter/parse';
import { groupCondition, type Dialect } from './query.js';

/**
 * `f` (a vuln_findings row) is not covered by a mute in force at `now`: a fleet-wide one, or one
 * limited to a group its node is in (those of d.groupMutes). Never unknown.
 */
export function findingUnmuted(d: Dialect, now: Date): string {
  // The advisories fleet-wide mutes cover, as one uncorrelated set (hashed once, not probed per
  // finding): the targets, and the advisories known by a targeted CVE. No NULL in it, so NOT IN is two-valued.
  const inForce = () => `m.mute_groups IS NULL AND (m.expires IS NULL OR m.expires > ${d.param(now.toISOString())})`;
  const fleet = `f.advisory NOT IN (SELECT m.target FROM vuln_mutes m WHERE ${inForce()}
    UNION ALL SELECT mc.advisory FROM vuln_advisory_cves mc JOIN vuln_mutes m ON m.target = mc.cve WHERE ${inForce()})`;
  const scoped = (d.groupMutes ?? []).filter((m) => m.expires === null || Date.parse(m.expires) > now.getTime());
  if (scoped.length === 0) return fleet;
  const { groupMutes: _, ...outer } = d;
  // Members as an uncorrelated set (`nodes n` here hides the outer row): one index range per group.
  const clauses = scoped.map((m) => {
    const target = `(f.advisory = ${d.param(m.target)} OR f.advisory IN (SELECT mc.advisory FROM vuln_advisory_cves mc WHERE mc.cve = ${d.param(m.target)}))`;
    return `NOT (${target} AND f.node_id IN (SELECT n.id FROM nodes n WHERE ${m.groups.map((g) => groupCondition(g, outer)).join(' OR ')}))`;
  });
  return `${fleet} AND ${clauses.join(' AND ')}`;
}

/** `vuln:<id>`: an unmuted finding of the advisory, or of an advisory known by the CVE. */
export function vulnAffected(id: string, d: Dialect, now: Date): string {
  const a = d.param(id);
  const c = d.param(id);
  return `n.id IN (SELECT f.node_id FROM vuln_findings f WHERE (f.advisory = ${a} OR f.advisory IN (SELECT vc.advisory FROM vuln_advisory_cves vc WHERE vc.cve = ${c}))
    AND ${findingUnmuted(d, now)})`;
}

const RANK = `(CASE f.rating WHEN 'low' THEN 1 WHEN 'medium' THEN 2 WHEN 'high' THEN 3 WHEN 'critical' THEN 4 END)`;

export function vulnCondition(field: string, op: CompareOp, value: FilterValue, d: Dialect, now: Date): string {
  const sqlOp = op === '!=' ? '<>' : op;
  const n = value.kind === 'number' ? value.number : 0;
  if (field === 'vuln.kev') {
    const kev = `n.id IN (SELECT f.node_id FROM vuln_findings f WHERE f.advisory IN (SELECT vc.advisory FROM vuln_advisory_cves vc JOIN vuln_kev k ON k.cve = vc.cve)
      AND ${findingUnmuted(d, now)})`;
    return (op === '=') === (value.text === 'true') ? kev : `NOT (${kev})`;
  }
  if (field === 'vuln.severity') {
    return `n.id IN (SELECT f.node_id FROM vuln_findings f WHERE ${RANK} IS NOT NULL AND ${RANK} ${sqlOp} ${d.param(n)} AND ${findingUnmuted(d, now)})`;
  }
  // vuln.count: distinct unmuted advisories (0 for a node without findings).
  return `(SELECT count(DISTINCT f.advisory) FROM vuln_findings f WHERE f.node_id = n.id AND ${findingUnmuted(d, now)}) ${sqlOp} ${d.param(n)}`;
}
