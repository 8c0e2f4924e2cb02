/**
 * The score: one grade per node, A (best) to E, and one for the fleet, from compliance and
 * vulnerability exposure (docs/vulnerabilities.md, *Score*).
 *
 * - exposure points of a node: per unmuted advisory, critical 10, high 5, medium 2, low and
 *   unrated 1, three times that when the CVE is in CISA's KEV; exposure grade A at 0 points, B up
 *   to 5, C up to 20, D up to 50, E above; a KEV finding makes it D at best;
 * - compliance grade: A from 95 %, B from 85 %, C from 70 %, D from 50 %, E below; none without data;
 * - the node's grade is the worse of the two it has (none when it has neither);
 * - the fleet's: the mean of its nodes' grades (A 4 … E 0), rounded down, with the counts per grade.
 */
import { percentages, zeroCounts, type ComplianceCounts } from '@capstan/shared/compliance/compute';
import type { ComplianceClock, NodeFilter, Store } from '../store/store.js';
import { exposureFor, findingPairs, type ViewDeps } from './views.js';

export const GRADES = ['A', 'B', 'C', 'D', 'E'] as const;
export type Grade = (typeof GRADES)[number];

const POINTS: Record<string, number> = { critical: 10, high: 5, medium: 2, low: 1 };

export function exposureGrade(points: number, kev: boolean): Grade {
  const g: Grade = points === 0 ? 'A' : points <= 5 ? 'B' : points <= 20 ? 'C' : points <= 50 ? 'D' : 'E';
  return kev && GRADES.indexOf(g) < 3 ? 'D' : g;
}

export function complianceGrade(percent: number | null): Grade | null {
  if (percent === null) return null;
  return percent >= 95 ? 'A' : percent >= 85 ? 'B' : percent >= 70 ? 'C' : percent >= 50 ? 'D' : 'E';
}

const worse = (a: Grade | null, b: Grade | null): Grade | null => (a === null ? b : b === null ? a : GRADES[Math.max(GRADES.indexOf(a), GRADES.indexOf(b))]!);

export interface NodeScore {
  node_id: string;
  grade: Grade | null;
  compliance: { percent: number | null; grade: Grade | null };
  exposure: { points: number; advisories: number; kev: number; grade: Grade };
}

export interface FleetScore {
  grade: Grade | null;
  nodes: number;
  by_grade: Record<Grade, number>;
  formula: string;
}

export const FORMULA = 'node grade = worse of compliance grade (A ≥95%, B ≥85%, C ≥70%, D ≥50%, E) and exposure grade (points per unmuted advisory: critical 10, high 5, medium 2, low/unrated 1, ×3 in KEV; A 0, B ≤5, C ≤20, D ≤50, E; KEV → D at best); fleet = mean of node grades (A 4 … E 0) rounded down';

/** Every accepted node's score, or those the filters choose. */
export async function nodeScores(deps: ViewDeps & { clock: ComplianceClock }, filters: NodeFilter[] = []): Promise<NodeScore[]> {
  const store: Store = deps.store;
  const compliance = new Map<string, ComplianceCounts>();
  for (let after: string | null = null; ;) {
    const page = await store.complianceNodes(after, 1000, deps.clock, filters);
    for (const r of page) compliance.set(r.node_id, r.counts);
    if (page.length < 1000) break;
    after = page[page.length - 1]!.node_id;
  }
  const exposure = new Map<string, { points: number; advisories: number; kev: number }>();
  // Each unmuted (node, advisory) adds its points to the node; its rating is the advisory's highest.
  const ids = [...compliance.keys()];
  const pairs = ids.length ? (await findingPairs(deps, ids)).filter((p) => !p.muted) : [];
  const ratings = new Map((await store.vulns.getAdvisories([...new Set(pairs.map((p) => p.advisory))])).map((a) => [a.id, a.rating]));
  const exposed = await exposureFor(store, [...new Set(pairs.flatMap((p) => p.cves))]);
  for (const r of pairs) {
    const kev = exposed(r.cves).kev !== null;
    const e = exposure.get(r.node_id) ?? { points: 0, advisories: 0, kev: 0 };
    e.points += (POINTS[ratings.get(r.advisory) ?? r.rating ?? ''] ?? 1) * (kev ? 3 : 1);
    e.advisories++;
    if (kev) e.kev++;
    exposure.set(r.node_id, e);
  }
  return ids.map((id) => {
    const pct = percentages(compliance.get(id) ?? zeroCounts()).compliance;
    const e = exposure.get(id) ?? { points: 0, advisories: 0, kev: 0 };
    const cg = complianceGrade(pct);
    const eg = exposureGrade(e.points, e.kev > 0);
    return { node_id: id, grade: worse(cg, eg), compliance: { percent: pct, grade: cg }, exposure: { ...e, grade: eg } };
  });
}

export function fleetScore(scores: NodeScore[]): FleetScore {
  const by = Object.fromEntries(GRADES.map((g) => [g, 0])) as Record<Grade, number>;
  let sum = 0;
  let n = 0;
  for (const s of scores) {
    if (s.grade === null) continue;
    by[s.grade]++;
    sum += 4 - GRADES.indexOf(s.grade);
    n++;
  }
  return { grade: n ? GRADES[4 - Math.floor(sum / n)]! : null, nodes: n, by_grade: by, formula: FORMULA };
}
