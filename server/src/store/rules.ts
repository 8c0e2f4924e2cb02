/**
 * The rules the store applies inside its transactions, handed to it by the domain that owns them
 * (server/src/registry/rules.ts for nodes, jobs/states.ts for tasks, providers/discovery.ts for
 * discovery, registry/filters.ts for filter checks). The store reads a row, calls the rule and
 * writes what it returns: it decides nothing itself, and it imports nothing above it.
 */
import type { DiscoveredInstance, ManagerRecord } from './managers/types.js';
import type { CheckedFilter, HistoryInsert, NodeChange, NodeCreate, NodeListQuery, NodeRecord, NodeUpsertFromInventory } from './nodes/types.js';
import type { TaskState } from './jobs/types.js';

export interface NodeRules {
  /** States a node may be reachable in; any other makes it unreachable. */
  readonly liveStates: readonly string[];
  /** The state the sweep gives a silent node. */
  readonly missing: string;
  /** States whose nodes are purged after the retention period. */
  readonly purgeable: readonly string[];
  /** The only node fields afterRun changes (the run's transaction writes just these). */
  readonly afterRunFields: ReadonlyArray<keyof NodeRecord>;
  manualNode(n: NodeCreate, now: string): NodeRecord;
  nodeFromInventory(inv: NodeUpsertFromInventory, autoAccept: boolean): NodeRecord;
  mergeInventory(node: NodeRecord, inv: NodeUpsertFromInventory, autoAccept: boolean): NodeRecord;
  isCertificateConflict(node: NodeRecord, inv: Pick<NodeUpsertFromInventory, 'certificate_fingerprint'>): boolean;
  acceptCause(inv: NodeUpsertFromInventory, auto: boolean, revoked: boolean): { accepted?: string };
  afterRun(node: NodeRecord, startedUtc: string, configId: string | null, receivedAt: string): NodeRecord;
  applyChange(node: NodeRecord, change: NodeChange, at: string): NodeRecord;
  transitions(before: NodeRecord | null, after: NodeRecord, at: string, cause: string, causes?: { accepted?: string }): HistoryInsert[];
}

export interface FilterRules {
  /** Check a list query's filters and merge them per key (ERR_BAD_REQUEST, ERR_FILTER_CONFLICT). */
  check(q: Pick<NodeListQuery, 'filters' | 'accepted' | 'status' | 'hostname'>): CheckedFilter[];
}

export interface TaskRules {
  readonly nonFinal: readonly TaskState[];
  isFinal(s: TaskState): boolean;
  /** Throws ERR_JOB_TRANSITION for a transition or reason the state machine does not have. */
  checkTransition(from: TaskState, to: TaskState, reason: string): void;
}

export interface DiscoveryRules {
  discoveredNode(inst: DiscoveredInstance, manager: ManagerRecord, at: string): NodeRecord;
  rediscovered(node: NodeRecord, inst: DiscoveredInstance, at: string): NodeRecord;
  disappeared(node: NodeRecord, at: string): NodeRecord;
  adopted(node: NodeRecord, nodeId: string, at: string): NodeRecord;
}

export interface StoreRules {
  nodes: NodeRules;
  filters: FilterRules;
  tasks: TaskRules;
  discovery: DiscoveryRules;
}
