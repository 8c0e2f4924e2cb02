/** Rows shared by both backends for managers and their links to nodes. */
import type { NodeListRow, NodeRecord } from './store.js';
import { hasAgent } from './query.js';

export interface LinkRow {
  node_id: string;
  manager_id: string;
}

/** List rows: each node with the sorted ids of its managers and whether it has an agent. */
export function listRows(nodes: NodeRecord[], links: LinkRow[]): NodeListRow[] {
  const by = new Map<string, string[]>();
  for (const l of links) {
    const list = by.get(l.node_id);
    if (list) list.push(l.manager_id);
    else by.set(l.node_id, [l.manager_id]);
  }
  return nodes.map((n) => ({
    ...n,
    managers: (by.get(n.id) ?? []).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)),
    has_agent: hasAgent(n),
  }));
}
