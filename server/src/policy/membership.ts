/**
 * Who is in which group, as generation, plans and explanations see it: the accepted nodes of the
 * groups a change touches, and each node's groups, with few nodes probed by id and many listed
 * once per group (Listing shares the listings of one generation).
 */
import type { Store } from '../store/store.js';
import { policyGroups, type PolicyModel } from './content.js';
import type { Listing } from './listing.js';

/** An `id` filter holds at most this many values (the node list's own limit). */
const ID_CHUNK = 100;
/** Above this many nodes, a group's whole membership is listed once instead of probed by id. */
const PROBE_LIMIT = 2000;

/** Accepted members of any of `groupIds`. */
export async function members(store: Pick<Store, 'listNodeIds'>, model: PolicyModel, groupIds: Set<string>, listing: Listing): Promise<Set<string>> {
  const out = new Set<string>();
  const statics = new Set<string>();
  for (const gid of groupIds) {
    const g = model.groups.get(gid);
    if (!g) continue;
    g.nodes?.forEach((n) => statics.add(n));
    if (g.filter) await listing.matching(g.filter, (id) => out.add(id));
  }
  for (const id of await acceptedAmong(store, statics, listing)) out.add(id);
  return out;
}

/** The accepted nodes among `ids` (a static group may name nodes not yet accepted, or gone). */
export async function acceptedAmong(store: Pick<Store, 'listNodeIds'>, ids: Set<string>, listing: Listing): Promise<Set<string>> {
  const out = new Set<string>();
  if (ids.size > PROBE_LIMIT) {
    const accepted = await listing.accepted();
    for (const id of ids) if (accepted.has(id)) out.add(id);
    return out;
  }
  const list = [...ids];
  for (let i = 0; i < list.length; i += ID_CHUNK) {
    const found = await store.listNodeIds([{ key: 'id', values: list.slice(i, i + ID_CHUNK) }, { key: 'accepted', values: ['accepted'] }]);
    found.forEach((id) => out.add(id));
  }
  return out;
}

/**
 * For each node of `nodes`, the ids of the groups that contain it: the groups rules target and
 * those holding properties (a node's data merges them all). With `every`, each node's every
 * group as well, those no rule uses included (compliance by group, policy_group_members).
 */
export async function membership(
  store: Pick<Store, 'listNodeIds'>, model: PolicyModel, nodes: Set<string>, listing: Listing, every?: Map<string, Set<string>>,
): Promise<Map<string, Set<string>>> {
  const accepted = await acceptedAmong(store, nodes, listing);
  const of = new Map<string, Set<string>>([...accepted].map((n) => [n, new Set<string>()]));
  if (every) for (const n of accepted) every.set(n, new Set());
  const used = policyGroups(model);
  for (const gid of every ? model.groups.keys() : used) {
    const g = model.groups.get(gid);
    if (!g) continue;
    const inUse = used.has(gid);
    const add = (id: string) => {
      if (inUse) of.get(id)?.add(gid);
      every?.get(id)?.add(gid);
    };
    for (const n of g.nodes ?? []) add(n);
    if (!g.filter) continue;
    // Few nodes: probe them by id. Many, or a filter that already names ids (an `id` filter
    // merged with ours would OR the values): list the group once.
    if (of.size <= PROBE_LIMIT && !g.filter.some((f) => f.key === 'id')) {
      const ids = [...of.keys()];
      for (let i = 0; i < ids.length; i += ID_CHUNK) {
        (await store.listNodeIds([...g.filter, { key: 'id', values: ids.slice(i, i + ID_CHUNK) }])).forEach(add);
      }
    } else {
      await listing.matching(g.filter, add);
    }
  }
  return of;
}

/**
 * The groups one node is in, sorted (a node that is not accepted is in none): the groups its last
 * generation found it in (policy_group_members, every group of the model), one read where every
 * group's filter evaluated for the node was a query each (400 ms with 20 groups on PostgreSQL at
 * 100,000 nodes). A node generated since is in one at least (all-nodes); one that never was has
 * none recorded: its filters are evaluated.
 */
export async function groupsOfNode(store: Pick<Store, 'listNodeIds' | 'groupMembersOf'>, model: PolicyModel, nodeId: string, listing: Listing): Promise<string[]> {
  const groups: string[] = [];
  if (!(await acceptedAmong(store, new Set([nodeId]), listing)).has(nodeId)) return groups;
  const recorded = new Set(await store.groupMembersOf(nodeId));
  for (const g of model.groups.values()) {
    if (g.nodes?.includes(nodeId)) groups.push(g.id);
    else if (recorded.size > 0) {
      if (g.filter && recorded.has(g.id)) groups.push(g.id);
    } else if (g.filter && g.filter.some((f) => f.key === 'id')) {
      // An `id` filter of the group's own would be ORed with ours: list the group instead.
      if ((await store.listNodeIds(g.filter)).includes(nodeId)) groups.push(g.id);
    } else if (g.filter && (await store.listNodeIds([...g.filter, { key: 'id', values: [nodeId] }])).length > 0) groups.push(g.id);
  }
  return groups.sort();
}
