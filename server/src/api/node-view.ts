/**
 * Nodes as the API and the command line list them. Kept apart from the node routes so that a
 * command line listing nodes loads this, not the routes' certificate and run-log handling.
 */
import type { NodeRecord } from '../reads.js';

/** A node without its certificates (pinned, conflicting): those are on the single-node view only. */
export function listView(n: NodeRecord): Omit<NodeRecord, 'certificate' | 'conflict_certificate'> {
  const { certificate: _omit, conflict_certificate: _other, ...rest } = n;
  return rest;
}
