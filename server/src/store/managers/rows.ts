/** Rows shared by both backends for managers and their links to nodes. */
import type { NodeListRow, NodeRecord } from '../store.js';
import type { ManagerInsert, ManagerRecord } from './types.js';
import { hasAgent } from '../nodes/filters/query.js';
import type { RowCodec } from '../row-codec.js';

export const MANAGER_COLUMNS = 'id, name, type, provider, spec, created_at, updated_at, last_poll_at, last_poll_error';

export function managerFromRow(r: Record<string, unknown>, codec: RowCodec): ManagerRecord {
  return {
    id: r.id as string,
    name: r.name as string,
    type: r.type as ManagerRecord['type'],
    provider: r.provider as string,
    spec: codec.json(r.spec) as Record<string, unknown>,
    created_at: codec.time(r.created_at)!,
    updated_at: codec.time(r.updated_at)!,
    last_poll_at: codec.time(r.last_poll_at),
    last_poll_error: (r.last_poll_error as string | null) ?? null,
  };
}

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

/** A new manager's record. */
export function managerFromInsert(m: ManagerInsert, at: string): ManagerRecord {
  return { ...m, created_at: at, updated_at: at, last_poll_at: null, last_poll_error: null };
}
