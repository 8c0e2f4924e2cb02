/**
 * Compliance in the registry: per node, its last complete run's outcomes judged against what its
 * current policy expects (the expectations the policy generator stores), kept up to date as runs
 * and policies arrive; the time states (`applying`, `no_answer`) are decided when read.
 */
import type { ComplianceCounts, ComplianceState, ComplianceWindows, ExpectedComponent, NodeTimeMarks } from '@capstan/shared/compliance/compute';
import { lookup, REFUSE, type NulRules } from '../guard.js';
import type { NodeFilter, NodeStatus } from '../nodes/types.js';
import type { RunSummaryOutcome } from '../runs/types.js';
import type { KeptSweep } from './kept.js';

export type { KeptSweep } from './kept.js';

export type { ComplianceCounts, ComplianceState, ComplianceWindows, ExpectedComponent, NodeTimeMarks } from '@capstan/shared/compliance/compute';

/** What compliance is computed from for one node: its base run's outcomes and what is expected. */
export interface ComplianceBase {
  node_id: string;
  /** The node's last complete run, or null when it has none (then every expected item is missing). */
  run: { id: number; started_at: string; config_id: string | null } | null;
  policy_config_id: string | null;
  /** The expectations of the node's current policy; null when it has none (received outcomes count as they are). */
  expected: ExpectedComponent[] | null;
  outcomes: RunSummaryOutcome[];
  /** What decides `applying` and `no_answer` when read (shared nodeTimeState). */
  marks: NodeTimeMarks;
  relay: boolean;
  has_agent: boolean;
}

/** The moment compliance is read at, and its windows: the time states are decided in the query. */
export interface ComplianceClock extends ComplianceWindows {
  now_s: number;
}

/** The kinds of node compliance is summed over apart: relays and nodes without an agent are not managed nodes. */
export type NodeClass = 'agent' | 'relay' | 'agentless';

/** Compliance summed over a set of nodes (or of one rule or directive over those nodes). */
export interface ComplianceAggregate {
  /** Accepted nodes with an agent in the set (not relays), and how many of them have compliance data. */
  nodes: number;
  nodes_with_data: number;
  counts: ComplianceCounts;
  /** Relays and accepted nodes without an agent in the set, counted apart. */
  relays: { nodes: number; counts: ComplianceCounts };
  agentless: { nodes: number; counts: ComplianceCounts };
}

export interface RuleComplianceRow {
  rule_id: string;
  directive_id?: string;
  nodes: number;
  counts: ComplianceCounts;
}

/**
 * One policy group's compliance: its members at their policy's last generation
 * (policy_group_members), summed as the fleet is (agent nodes' counts; relays and agentless
 * nodes counted apart).
 */
export interface GroupComplianceRow {
  group_id: string;
  nodes: number;
  counts: ComplianceCounts;
  relays: number;
  agentless: number;
}

/** One node's compliance as the export lists it (time states applied). */
export interface NodeComplianceRow {
  node_id: string;
  hostname: string;
  class: NodeClass;
  status: NodeStatus;
  state: string;
  last_run_at: string | null;
  policy_config_id: string | null;
  counts: ComplianceCounts;
}

/** One page of a rule's (or one of its directives') nodes, worst first unless `order` is `desc`. */
export interface TargetNodesQuery {
  rule_id: string;
  /** One directive of the rule; absent: the rule's directives summed per node. */
  directive_id?: string;
  /** Only nodes with at least one item in this state. */
  state?: ComplianceState;
  /** By compliance: `asc` worst first (the default), `desc` best first; ties by node id. */
  order?: 'asc' | 'desc';
  page: number;
  per_page: number;
}

export interface TargetNodesPage {
  data: NodeComplianceRow[];
  total: number;
}

export interface ComplianceStore {
  /**
   * Store what a node is expected to report for one config id (the policy generator calls this)
   * and make that config the node's policy; compliance is recomputed. Returns false when the node
   * is unknown. Only the expectations of this config and of the previous policy are kept.
   */
  setExpectations(nodeId: string, configId: string, items: ExpectedComponent[], at: string, opts?: { keep_last_s?: number }): Promise<boolean>;
  /** The expectations stored for one config id of a node; null when none are. */
  getExpectations(nodeId: string, configId: string): Promise<ExpectedComponent[] | null>;
  /** The inputs of one node's compliance; null when the node is unknown. */
  getComplianceBase(nodeId: string): Promise<ComplianceBase | null>;
  /**
   * Compliance summed over the accepted nodes matching the filters (none: all accepted nodes),
   * or over the nodes of `nodeIds`, with the time states of `clock`.
   */
  complianceSummary(filters: NodeFilter[], clock: ComplianceClock, nodeIds?: string[]): Promise<ComplianceAggregate>;
  /** Compliance per rule, or per (rule, directive), over the accepted nodes with an agent (kept counters, kept.ts). */
  complianceByRule(by: 'rule' | 'directive', clock: ComplianceClock): Promise<RuleComplianceRow[]>;
  /**
   * Compliance per policy group over its members at their last generation (kept counters,
   * migration 25), in group id byte order; groups without a member are not listed.
   */
  complianceByGroup(clock: ComplianceClock): Promise<GroupComplianceRow[]>;
  /** complianceByGroup summed afresh over every member's rows (what the kept counters must equal). */
  complianceByGroupFresh(clock: ComplianceClock): Promise<GroupComplianceRow[]>;
  /**
   * Replace the stored memberships of `nodeIds` (policy generation): each node's policy groups,
   * a node absent from `groups` in none. Writes only what changed; answers how many rows moved.
   */
  putGroupMembers(nodeIds: readonly string[], groups: ReadonlyMap<string, readonly string[]>): Promise<number>;
  /** The groups one node was found in at its last generation (putGroupMembers), in byte order; none when it was never generated. */
  groupMembersOf(nodeId: string): Promise<string[]>;
  /** complianceByRule summed afresh over every node's rows (what the kept counters must equal). */
  complianceByRuleFresh(by: 'rule' | 'directive', clock: ComplianceClock): Promise<RuleComplianceRow[]>;
  /** complianceSummary over all accepted nodes, summed afresh over every node (what the kept counters must equal). */
  complianceSummaryFresh(clock: ComplianceClock): Promise<ComplianceAggregate>;
  /**
   * Move the kept counters' time thresholds to `clock` (kept.ts): the nodes whose time state
   * changed move between counters, at most `step` nodes (KEPT_SWEEP_STEP) per transaction.
   */
  sweepCompliance(clock: ComplianceClock, step?: number): Promise<KeptSweep>;
  /** Accepted nodes' compliance in node id order, after `after` (keyset paging, for streamed exports). */
  complianceNodes(after: string | null, limit: number, clock: ComplianceClock, filters?: NodeFilter[]): Promise<NodeComplianceRow[]>;
  /**
   * The accepted nodes with an agent under one rule (or one directive of it) with their counts
   * for it alone (time states applied), sorted by that compliance, paged (rule drill-downs).
   */
  targetNodes(q: TargetNodesQuery, clock: ComplianceClock): Promise<TargetNodesPage>;
  /** targetNodes judged afresh over every node under the rule (what the read from the kept keys, migration 28, must equal). */
  targetNodesFresh(q: TargetNodesQuery, clock: ComplianceClock): Promise<TargetNodesPage>;
  /** The `limit` accepted nodes with an agent whose compliance is lowest, worst first (nodes without items left out). */
  worstNodes(limit: number, clock: ComplianceClock): Promise<NodeComplianceRow[]>;
  /** worstNodes computed afresh over every node (what the read from the kept shares must equal). */
  worstNodesFresh(limit: number, clock: ComplianceClock): Promise<NodeComplianceRow[]>;
  /**
   * Set how long these nodes' last compliance is kept once they are silent (their groups'
   * expiration policy, seconds; 0: none). Nodes without compliance yet are skipped. Returns how many changed.
   */
  setKeepLast(nodeIds: string[], seconds: number): Promise<number>;
}

/** How each compliance method treats U+0000 (guard.ts). */
export const COMPLIANCE_NUL: NulRules<ComplianceStore> = {
  setExpectations: lookup([0], () => false),
  getExpectations: lookup([0, 1], () => null),
  getComplianceBase: lookup([0], () => null),
  complianceSummary: lookup([2]),
  complianceByRule: REFUSE,
  complianceByRuleFresh: REFUSE,
  complianceByGroup: REFUSE,
  complianceByGroupFresh: REFUSE,
  putGroupMembers: REFUSE,
  groupMembersOf: lookup([0], () => []),
  complianceSummaryFresh: REFUSE,
  sweepCompliance: REFUSE,
  complianceNodes: REFUSE,
  worstNodes: REFUSE,
  worstNodesFresh: REFUSE,
  targetNodes: REFUSE,
  targetNodesFresh: REFUSE,
  setKeepLast: lookup([0]),
};
