/**
 * Nodes as the API lists them (node list, pending nodes, a group's members, the answers to node
 * changes): shared by the node and policy routes.
 */
import type { NodeRecord } from '../reads.js';

/** A node without its certificates (pinned, conflicting): those are on the single-node view only. */
export function listView(n: NodeRecord): Omit<NodeRecord, 'certificate' | 'conflict_certificate'> {
  const { certificate: _omit, conflict_certificate: _other, ...rest } = n;
  return rest;
}
