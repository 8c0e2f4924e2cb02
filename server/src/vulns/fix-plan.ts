/**
 * What upgrade campaigns need of one vulnerability: given a CVE or advisory id, the packages to
 * upgrade (to which version, per ecosystem) and the nodes still exposed (muted findings left
 * out), each with the installed packages to upgrade there. A package without a published fix
 * is listed with `fixed: null` so the caller can say why it cannot plan it.
 */
import { resolveId, fixesView, type ViewDeps } from './views.js';

export interface FixPlan {
  id: string;
  advisories: string[];
  packages: Array<{ name: string; ecosystem: string; fixed: string | null; packages: string[] }>;
  nodes: string[];
}

export async function fixPlan(deps: ViewDeps, id: string): Promise<FixPlan> {
  const advisories = await resolveId(deps.store, id);
  const rows = await fixesView(deps, { advisories });
  return {
    id, advisories,
    packages: rows.map((r) => ({ name: r.name, ecosystem: r.ecosystem, fixed: r.fixed, packages: r.packages })),
    nodes: [...new Set(rows.flatMap((r) => r.nodes))].sort(),
  };
}
