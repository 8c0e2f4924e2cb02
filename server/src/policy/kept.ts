/**
 * What policy generation keeps between its runs, in the store so that it outlives the process
 * (docs/policy.md, Secrets and What generation does): the sealed secret values given to each node
 * (reused while the plaintext and the node's key are unchanged, or the node's config id would
 * change at every restart), and why a node's policy was last not generated. The generator reads
 * a node's seals before it first renders the node, and writes what a batch changed after it.
 */
import type { SealedSecret } from '@capstan/shared/policy/secrets';
import type { PolicyStateWrite, Store } from '../store/store.js';
import { SealCache, type NodeProblem } from './render.js';

export type KeptProblem = NodeProblem & { at: string };

export class KeptState {
  readonly seals = new SealCache();
  /** Nodes whose stored seals were read (or found absent) by this process. */
  private readonly sealsRead = new Set<string>();
  private problemsRead: Promise<void> | null = null;
  private readonly problems = new Map<string, KeptProblem>();
  private readonly problemsSet = new Map<string, KeptProblem>();
  private readonly problemsCleared = new Set<string>();

  constructor(private readonly store: Store) {}

  /** The stored seals of those of `nodeIds` not read yet. */
  async readSeals(nodeIds: readonly string[]): Promise<void> {
    const ids = nodeIds.filter((n) => !this.sealsRead.has(n));
    if (ids.length === 0) return;
    for (const r of await this.store.policySeals(ids)) {
      this.seals.load(r.node_id, r.name, { digest: r.digest, sealed: JSON.parse(r.sealed) as SealedSecret });
    }
    for (const n of ids) this.sealsRead.add(n);
  }

  /** Every stored problem, read once per process. */
  readProblems(): Promise<void> {
    this.problemsRead ??= this.store.policyProblems(null).then((rows) => {
      for (const r of rows) if (!this.problems.has(r.node_id)) this.problems.set(r.node_id, { ...(r.problem as unknown as NodeProblem), at: r.at });
    });
    return this.problemsRead;
  }

  /** A node's kept problem (the store's, once readProblems has run). */
  problem(nodeId: string): KeptProblem | undefined {
    return this.problems.get(nodeId);
  }

  /**
   * The node's policy was not generated: keep why. True when it is new or another than the kept
   * one (an unchanged problem keeps the time it was first found).
   */
  setProblem(nodeId: string, problem: NodeProblem, at: string): boolean {
    const was = this.problems.get(nodeId);
    if (was && was.message === problem.message) return false;
    const kept = { ...problem, at };
    this.problems.set(nodeId, kept);
    this.problemsCleared.delete(nodeId);
    this.problemsSet.set(nodeId, kept);
    return true;
  }

  /** The node's policy was generated (or it has none to get): its problem goes. */
  clearProblem(nodeId: string): void {
    if (!this.problems.delete(nodeId)) return;
    this.problemsSet.delete(nodeId);
    this.problemsCleared.add(nodeId);
  }

  /** Write what changed since the last flush. */
  async flush(): Promise<void> {
    const { sealed, dropped } = this.seals.drain();
    const w: PolicyStateWrite = {};
    if (sealed.length) w.seals = sealed.map((s) => ({ node_id: s.nodeId, name: s.name, digest: s.kept.digest, sealed: JSON.stringify(s.kept.sealed) }));
    if (dropped.length) w.dropSeals = dropped.map((d) => ({ node_id: d.nodeId, name: d.name }));
    if (this.problemsSet.size) {
      w.problems = [...this.problemsSet].map(([nodeId, { at, ...problem }]) => ({ node_id: nodeId, at, problem: problem as unknown as Record<string, unknown> }));
    }
    if (this.problemsCleared.size) w.clearProblems = [...this.problemsCleared];
    this.problemsSet.clear();
    this.problemsCleared.clear();
    if (Object.keys(w).length > 0) await this.store.putPolicyState(w);
  }
}
