/**
 * The one node update, the same in both dialects: each dialect's `update` reads the node
 * (PostgreSQL: locks its row), applies the domain's rule and writes it back with its
 * transitions, in one transaction.
 */
import { checkPatch } from '../input.js';
import type { NodeRules } from '../rules.js';
import type { NodeChange, NodeRecord } from './types.js';

export abstract class NodeChanges {
  constructor(readonly rules: NodeRules) {}

  /** Read, change with the rule, write back and record the transitions if anything changed. */
  protected abstract update(what: string, id: string, at: string, cause: string, change: (n: NodeRecord) => NodeRecord): NodeRecord | null | Promise<NodeRecord | null>;

  async changeNode(id: string, change: NodeChange, at: string, cause: string): Promise<NodeRecord | null> {
    const c = change.kind === 'patch' ? { kind: 'patch' as const, patch: checkPatch(change.patch) } : change;
    return this.update(`changeNode ${change.kind}`, id, at, cause, (node) => this.rules.applyChange(node, c, at));
  }
}
