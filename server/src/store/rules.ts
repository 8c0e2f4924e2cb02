/**
 * The rules the store applies inside its transactions, handed to it by the domain that owns them
 * (server/src/registry/rules.ts for nodes, jobs/states.ts for tasks, providers/discovery.ts for
 * discovery, registry/filters.ts for filter checks). The store reads a row, calls the rule and
 * writes what it returns: it decides nothing itself, and it imports nothing above it.
 */
import type { DiscoveredInstance, ManagerRecord } from './managers/types.js';
import type { CheckedFilter, HistoryInsert, NodeChange, NodeCreate, NodeListQuery, NodeRecord, NodeUpsertFromInventory } from './nodes/types.js';
import type { JobProgress, JobRecord, TaskState } from './jobs/types.js';
import type { ComplianceItem } from '@capstan/shared/compliance/compute';
import type { ChangeInput, ChangeLabel } from './changes/types.js';
import type { EventInsert } from './events/types.js';
import type { CloseReason, FindingInput, FindingKind, OpenFinding } from './findings/types.js';

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

/** What one compliance write knows, for the findings and events it makes (EventRules.reconcile). */
export interface ReconcileInput {
  node_id: string;
  /** The run that decided this compliance (null: a policy change judged the last run again). */
  run: { id: number; started_utc: string } | null;
  /** When: the run's start, or the policy's time. */
  at: string;
  /** The node's compliance items now. */
  items: readonly ComplianceItem[];
  /** The node's open findings before this write. */
  open: readonly OpenFinding[];
  /** The run's failing reports (what a finding it opens says); empty for a policy change. */
  reports: readonly FindingInput[];
  /** The node's runs_seen after this write (a finding opened now has this as its first_count). */
  runs_seen: number;
  /** Where the open findings were last seen: the node's base run before this write, and its runs_seen then. */
  last_seen: { run_id: number | null; at: string | null; runs_seen: number };
}

/** A finding to open; `event` is its finding.opened event, whose `finding_id` the store sets once it has the id. */
export interface FindingOpen {
  input: FindingInput;
  kind: FindingKind;
  event: EventInsert;
}

export interface ReconcileResult {
  open: FindingOpen[];
  close: Array<{ id: number; reason: CloseReason; runs: number; event: EventInsert }>;
  /** Open findings whose kind changed (non-compliant ↔ error). */
  restate: Array<{ id: number; kind: FindingKind; event_type: string }>;
  /** The other events (compliance transitions). */
  events: EventInsert[];
}

/** The events the store writes inside its own transactions, as the domain builds them (server/src/events/). */
export interface EventRules {
  /** What a compliance write does to the node's findings, and the events it makes. */
  reconcile(input: ReconcileInput): ReconcileResult;
  /** A run's repairs: the event when they were drift (corrective), else null. */
  repaired(nodeId: string, run: { id: number; started_utc: string }, changes: readonly ChangeInput[], label: ChangeLabel): EventInsert | null;
  /** A run that made a silent node answer again: its event, else null. */
  answering(before: NodeRecord, after: NodeRecord, at: string): EventInsert | null;
  /** A job whose last task became final. */
  jobFinished(job: Pick<JobRecord, 'id' | 'name' | 'type'>, progress: JobProgress, at: string): EventInsert;
}

export interface StoreRules {
  nodes: NodeRules;
  filters: FilterRules;
  tasks: TaskRules;
  discovery: DiscoveryRules;
  events: EventRules;
}
