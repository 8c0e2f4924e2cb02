/**
 * What the API, the command line and the campaign code read of vulnerabilities: findings with
 * mutes applied (a muted finding is kept and marked), KEV and EPSS joined by CVE, counts of
 * affected nodes per advisory, and the packages whose upgrade fixes most exposure.
 */
import { capstanError } from '@capstan/shared/errors';
import type { NodeFilter, Store } from '../store/store.js';
import type { MuteRow, VulnFindingRow } from '../store/vulns/types.js';
import { parseEcosystem, versionOrder } from './ecosystems.js';
import type { Finding } from './match.js';
import { applyMutes, type Mute } from './mute.js';

export const RATINGS = ['none', 'low', 'medium', 'high', 'critical'] as const;
const rank = (r: string | null) => (r === null ? 0 : RATINGS.indexOf(r as (typeof RATINGS)[number]));

export interface Exposure {
  kev: { date_added: string; due_date: string | null; ransomware: string | null } | null;
  epss: { epss: number; percentile: number } | null;
}

export interface NodeVuln extends Exposure {
  advisory: string;
  cves: string[];
  package: string;
  version: string;
  rating: string | null;
  fixed: string | null;
  match: unknown;
  muted: Finding['muted'] | null;
  found_at: string;
}

export interface VulnListQuery {
  /** At least this rating. */
  severity?: (typeof RATINGS)[number];
  kev?: boolean;
  /** EPSS probability at least this. */
  epss?: number;
  /** Over nodes (the filter language). */
  filters?: NodeFilter[];
  /** Muted findings counted too (default: only unmuted ones count). */
  muted?: boolean;
}

export interface VulnListRow extends Exposure {
  id: string;
  cves: string[];
  summary: string | null;
  rating: string | null;
  /** Nodes with an unmuted finding of it. */
  nodes: number;
  muted_nodes: number;
}

export interface ViewDeps {
  store: Store;
  /** Members of a group, null when no such group (filterGroupMembers: as the filter `group = <id>` counts them). */
  groupMembers: (group: string) => Promise<string[] | null>;
  now?: () => Date;
}

/**
 * A group's members as the filter language counts them (`group = <id>`: the registry's groups
 * and the policy group of that id), so that a mute limited to a group covers the same nodes in
 * the views as in the `vuln:` filter terms (server/src/store/nodes/filters/vulns.ts).
 */
export function filterGroupMembers(store: Store): ViewDeps['groupMembers'] {
  return async (group) => (await store.listNodeIds([{ key: 'group', values: [group] }])).sort();
}

const asMute = (m: MuteRow): Mute => ({ id: m.id, target: m.target, reason: m.reason, expires: m.expires, ...(m.groups && m.groups.length > 0 && { groups: m.groups }) });

/** The mutes in force and, for those limited to groups, each group's members. */
class MuteContext {
  private constructor(readonly mutes: Mute[], private readonly members: Map<string, Set<string>>, readonly now: Date) {}

  static async open(deps: ViewDeps): Promise<MuteContext> {
    const now = (deps.now ?? (() => new Date()))();
    const mutes = (await deps.store.vulns.listMutes()).map(asMute).filter((m) => m.expires === null || Date.parse(m.expires) > now.getTime());
    const members = new Map<string, Set<string>>();
    for (const g of new Set(mutes.flatMap((m) => m.groups ?? []))) members.set(g, new Set((await deps.groupMembers(g)) ?? []));
    return new MuteContext(mutes, members, now);
  }

  groupsOf(nodeId: string): string[] {
    return [...this.members].filter(([, s]) => s.has(nodeId)).map(([g]) => g);
  }

  apply(nodeId: string, findings: Finding[]): Finding[] {
    return this.mutes.length ? applyMutes(findings, this.mutes, { now: this.now, groups: this.groupsOf(nodeId) }) : findings;
  }
}

const asFinding = (r: VulnFindingRow): Finding => ({ package: r.package, version: r.version, match: r.match as Finding['match'] });

async function exposureOf(store: Store, cves: string[]): Promise<(cves: string[]) => Exposure> {
  const { kev, epss } = cves.length ? await store.vulns.enrichment([...new Set(cves)]) : { kev: [], epss: [] };
  const k = new Map(kev.map((x) => [x.cve, x]));
  const e = new Map(epss.map((x) => [x.cve, x]));
  return (ids) => {
    const kv = ids.map((c) => k.get(c)).find((x) => x !== undefined);
    const best = ids.map((c) => e.get(c)).filter((x) => x !== undefined).sort((a, b) => b.epss - a.epss)[0];
    return {
      kev: kv ? { date_added: kv.date_added, due_date: kv.due_date, ransomware: kv.ransomware } : null,
      epss: best ? { epss: best.epss, percentile: best.percentile } : null,
    };
  };
}

function nodeVulns(rows: VulnFindingRow[], ctx: MuteContext, exposure: (cves: string[]) => Exposure): NodeVuln[] {
  const out: NodeVuln[] = [];
  const byNode = new Map<string, VulnFindingRow[]>();
  for (const r of rows) (byNode.get(r.node_id) ?? byNode.set(r.node_id, []).get(r.node_id)!).push(r);
  for (const [node, list] of byNode) {
    const marked = ctx.apply(node, list.map(asFinding));
    list.forEach((r, i) => {
      const cves = (r.match as { cves?: string[] }).cves ?? [];
      out.push({ advisory: r.advisory, cves, package: r.package, version: r.version, rating: r.rating, fixed: r.fixed, match: r.match, muted: marked[i]!.muted ?? null, found_at: r.found_at, ...exposure(cves) });
    });
  }
  return out;
}

/** One node's findings, worst first. */
export async function nodeView(deps: ViewDeps, nodeId: string): Promise<{ node: string; findings: NodeVuln[]; counts: Record<string, number> }> {
  const rows = await deps.store.vulns.nodeFindings(nodeId);
  const exposure = await exposureOf(deps.store, rows.flatMap((r) => (r.match as { cves?: string[] }).cves ?? []));
  const findings = nodeVulns(rows, await MuteContext.open(deps), exposure)
    .sort((a, b) => Number(b.kev !== null) - Number(a.kev !== null) || rank(b.rating) - rank(a.rating) || (a.advisory < b.advisory ? -1 : 1));
  const counts: Record<string, number> = { total: 0, muted: 0, kev: 0, critical: 0, high: 0, medium: 0, low: 0, unrated: 0 };
  for (const f of new Map(findings.map((f) => [f.advisory, f])).values()) {
    if (f.muted) {
      counts.muted!++;
      continue;
    }
    counts.total!++;
    if (f.kev) counts.kev!++;
    counts[f.rating && f.rating !== 'none' ? f.rating : 'unrated']!++;
  }
  return { node: nodeId, findings, counts };
}

/** Each (node, advisory) with findings, among `nodeIds` (all when absent), and whether a mute covers it now. */
export async function findingPairs(deps: ViewDeps, nodeIds?: string[]): Promise<Array<{ node_id: string; advisory: string; rating: string | null; cves: string[]; muted: boolean }>> {
  const summary = await deps.store.vulns.findingSummary(nodeIds);
  const ctx = await MuteContext.open(deps);
  const seen = new Set<string>();
  const out: Array<{ node_id: string; advisory: string; rating: string | null; cves: string[]; muted: boolean }> = [];
  for (const s of summary) {
    const key = `${s.node_id}\u0000${s.advisory}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const fake: Finding = { package: '', version: '', match: { advisory: s.advisory, cves: s.cves } as Finding['match'] };
    out.push({ ...s, muted: ctx.apply(s.node_id, [fake])[0]!.muted !== undefined });
  }
  return out;
}

/** What the filter language evaluates in memory of a node's vulnerabilities (FilterSubject.vulns). */
export interface SubjectVuln {
  advisory: string;
  cves: string[];
  rating: string | null;
  kev: boolean;
}

/**
 * The in-memory side of the `vuln:` filter terms: each node's findings no mute covers, mutes
 * applied as every view applies them (fleet-wide ones, and group-limited ones on their groups'
 * members), with KEV joined. The SQL the stores compile must agree with evaluateFilter() over these.
 */
export async function subjectVulns(deps: ViewDeps, nodeIds: string[]): Promise<Map<string, SubjectVuln[]>> {
  const summary = await deps.store.vulns.findingSummary(nodeIds);
  const ctx = await MuteContext.open(deps);
  const exposure = await exposureOf(deps.store, summary.flatMap((s) => s.cves));
  const out = new Map<string, SubjectVuln[]>(nodeIds.map((id) => [id, []]));
  for (const s of summary) {
    const fake: Finding = { package: '', version: '', match: { advisory: s.advisory, cves: s.cves } as Finding['match'] };
    if (ctx.apply(s.node_id, [fake])[0]!.muted !== undefined) continue;
    out.get(s.node_id)?.push({ advisory: s.advisory, cves: s.cves, rating: s.rating, kev: exposure(s.cves).kev !== null });
  }
  return out;
}

/** KEV and EPSS for these CVE ids, as a lookup (the first KEV entry, the highest EPSS). */
export const exposureFor = (store: Store, cves: string[]) => exposureOf(store, cves);

/**
 * Every advisory with findings, with its affected nodes (mutes applied), filtered. The counts
 * are the database's (VulnStore.advisoryTally: one aggregate, mutes as the filter terms apply
 * them), not every finding of the fleet read into memory.
 */
export async function listView(deps: ViewDeps, q: VulnListQuery): Promise<VulnListRow[]> {
  const now = (deps.now ?? (() => new Date()))();
  const tally = await deps.store.vulns.advisoryTally(q.filters ?? [], now.toISOString());
  const advisories = new Map((await deps.store.vulns.getAdvisories(tally.map((x) => x.advisory))).map((a) => [a.id, a]));
  const exposure = await exposureOf(deps.store, [...advisories.values()].flatMap((a) => a.cves));
  const rows: VulnListRow[] = [];
  for (const x of tally) {
    const a = advisories.get(x.advisory);
    const cves = a?.cves ?? [];
    const row: VulnListRow = {
      id: x.advisory, cves, summary: a?.summary ?? null, rating: x.rating,
      nodes: q.muted ? x.nodes + x.muted : x.nodes, muted_nodes: q.muted ? 0 : x.muted, ...exposure(cves),
    };
    if (q.severity && rank(row.rating) < rank(q.severity)) continue;
    if (q.kev !== undefined && (row.kev !== null) !== q.kev) continue;
    if (q.epss !== undefined && (row.epss?.epss ?? 0) < q.epss) continue;
    rows.push(row);
  }
  return rows.sort((a, b) => Number(b.kev !== null) - Number(a.kev !== null) || rank(b.rating) - rank(a.rating) || b.nodes - a.nodes || (a.id < b.id ? -1 : 1));
}

/** The advisories a CVE or advisory id names (ERR_NOT_FOUND when none). */
export async function resolveId(store: Store, id: string): Promise<string[]> {
  const ids = /^CVE-\d{4}-\d{4,}$/.test(id) ? await store.vulns.advisoriesOfCve(id) : (await store.vulns.getAdvisories([id])).map((a) => a.id);
  if (!ids.length) throw capstanError('ERR_NOT_FOUND', `no advisory is known by ${id}`);
  return ids;
}

/** One CVE or advisory: its advisories, and the nodes it affects with each reason. */
export async function showView(deps: ViewDeps, id: string) {
  const ids = await resolveId(deps.store, id);
  const advisories = (await deps.store.vulns.getAdvisories(ids)).map((a) => ({ id: a.id, modified: a.modified, withdrawn: a.withdrawn, summary: a.summary, rating: a.rating, cves: a.cves }));
  const rows = await deps.store.vulns.advisoryFindings(ids);
  const cves = [...new Set(advisories.flatMap((a) => a.cves))];
  const exposure = await exposureOf(deps.store, cves);
  const findings = nodeVulns(rows, await MuteContext.open(deps), exposure);
  const nodes = rows.map((r, i) => ({ node_id: r.node_id, ...findings[i]! }));
  return { id, advisories, cves, ...exposure(cves), nodes: nodes.length ? new Set(nodes.filter((n) => !n.muted).map((n) => n.node_id)).size : 0, findings: nodes };
}

export interface FixRow {
  /** The package name the feed names (source package on Debian and Ubuntu). */
  name: string;
  ecosystem: string;
  /** The version that fixes every advisory counted here (the highest first-fixed); null when one has no fix yet. */
  fixed: string | null;
  advisories: string[];
  nodes: string[];
  /** The installed (binary) packages to upgrade. */
  packages: string[];
}

/** Packages whose upgrade fixes most exposure: unmuted findings grouped by (ecosystem, feed name). */
export async function fixesView(deps: ViewDeps, opts: { advisories?: string[]; filters?: NodeFilter[] } = {}): Promise<FixRow[]> {
  const ids = opts.advisories ?? (await deps.store.vulns.countByAdvisory()).map((c) => c.advisory);
  const only = opts.filters?.length ? new Set(await deps.store.listNodeIds(opts.filters)) : null;
  const rows = (await deps.store.vulns.advisoryFindings(ids)).filter((r) => !only || only.has(r.node_id));
  const ctx = await MuteContext.open(deps);
  const groups = new Map<string, FixRow & { noFix: boolean }>();
  const byNode = new Map<string, VulnFindingRow[]>();
  for (const r of rows) (byNode.get(r.node_id) ?? byNode.set(r.node_id, []).get(r.node_id)!).push(r);
  for (const [node, list] of byNode) {
    const marked = ctx.apply(node, list.map(asFinding));
    list.forEach((r, i) => {
      if (marked[i]!.muted) return;
      const m = r.match as { name: string; ecosystem: string; fixed: string | null };
      const key = `${m.ecosystem}\u0000${m.name}`;
      let g = groups.get(key);
      if (!g) groups.set(key, (g = { name: m.name, ecosystem: m.ecosystem, fixed: null, advisories: [], nodes: [], packages: [], noFix: false }));
      if (m.fixed === null) g.noFix = true;
      else {
        const order = versionOrder(parseEcosystem(m.ecosystem)?.family ?? 'deb');
        if (g.fixed === null || (order ? order(m.fixed, g.fixed) > 0 : m.fixed > g.fixed)) g.fixed = m.fixed;
      }
      if (!g.advisories.includes(r.advisory)) g.advisories.push(r.advisory);
      if (!g.nodes.includes(node)) g.nodes.push(node);
      if (!g.packages.includes(r.package)) g.packages.push(r.package);
    });
  }
  return [...groups.values()].map(({ noFix, ...g }) => ({ ...g, fixed: noFix ? null : g.fixed, advisories: g.advisories.sort(), nodes: g.nodes.sort(), packages: g.packages.sort() }))
    .sort((a, b) => b.nodes.length - a.nodes.length || b.advisories.length - a.advisories.length || (a.name < b.name ? -1 : 1));
}
