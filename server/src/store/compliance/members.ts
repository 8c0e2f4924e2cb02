/**
 * Policy group memberships as generation writes them (migration 25's policy_group_members):
 * what to add and take for a batch of nodes, so that an unchanged membership writes nothing
 * (the periodic regeneration of a settled fleet moves no kept group counter).
 */

/** The (group, node) pairs to add and to remove to bring `stored` (rows of `nodeIds`) to `groups`. */
export function membershipChanges(
  nodeIds: readonly string[], groups: ReadonlyMap<string, readonly string[]>, stored: ReadonlyArray<{ node_id: string; group_id: string }>,
): { added: Array<[string, string]>; removed: Array<[string, string]> } {
  const have = new Map<string, Set<string>>();
  for (const r of stored) {
    let s = have.get(r.node_id);
    if (!s) have.set(r.node_id, (s = new Set()));
    s.add(r.group_id);
  }
  const added: Array<[string, string]> = [];
  const removed: Array<[string, string]> = [];
  for (const n of new Set(nodeIds)) {
    const want = new Set(groups.get(n) ?? []);
    const was = have.get(n) ?? new Set<string>();
    for (const g of was) if (!want.has(g)) removed.push([g, n]);
    for (const g of want) if (!was.has(g)) added.push([g, n]);
  }
  return { added, removed };
}
