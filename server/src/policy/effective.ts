/**
 * A node's effective properties as the admin API shows them (GET /api/1/nodes/<id>/properties/
 * effective): the merge the generator makes, each leaf with its origin and what it overrode, the
 * conflicts among its groups, and why its policy was last not generated. A secret's value is
 * never shown: its leaves say `"secret": true` instead.
 */
import type { Store } from '../store/store.js';
import { loadModel } from './content.js';
import type { PolicyGenerator } from './generate.js';
import type { Conflict, Json, LeafOrigin } from './properties.js';
import { mergeFor, type NodeProblem } from './render.js';

export interface EffectiveProperties {
  node_id: string;
  groups: string[];
  /** Effective values by name; a secret one is `{"secret": true}`. */
  properties: Record<string, Json>;
  origins: Array<Omit<LeafOrigin, 'value' | 'overridden'> & { value?: Json; secret?: true; overridden?: Array<{ origin: LeafOrigin['origin']; path: string[]; value?: Json }> }>;
  secrets: string[];
  conflicts: Conflict[];
  /** Why the node's policy was last not generated (its previous bundle stays); null when it was. */
  problem: (NodeProblem & { at: string }) | null;
}

export async function effectiveProperties(store: Store, generator: PolicyGenerator, nodeId: string): Promise<EffectiveProperties | null> {
  const input = (await store.policyNodeInputs([nodeId], { node: true })).get(nodeId);
  if (!input) return null;
  const { groups } = await generator.explain(nodeId);
  const model = await loadModel(store);
  const m = mergeFor(model, groups, input.properties, input.secrets);
  const secret = new Set(m.secrets);
  const hidden = (path: string[]) => secret.has(path[0]!);
  const conflictValue = (c: Conflict): Conflict => (hidden(c.path) ? { ...c, groups: c.groups.map((g) => ({ id: g.id, value: null })) } : c);
  return {
    node_id: nodeId,
    groups,
    properties: Object.fromEntries(Object.entries(m.effective).map(([k, v]) => [k, secret.has(k) ? { secret: true } : v])),
    origins: m.origins.map((o) => (hidden(o.path)
      ? { path: o.path, origin: o.origin, secret: true as const, ...(o.overridden && { overridden: o.overridden.map((x) => ({ origin: x.origin, path: x.path })) }) }
      : o)),
    secrets: m.secrets,
    conflicts: m.conflicts.map(conflictValue),
    problem: await generator.problemOf(nodeId),
  };
}
