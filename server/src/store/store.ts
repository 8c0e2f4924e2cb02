/**
 * The registry's storage interface. Two implementations share one test suite:
 * `sqlite/` (better-sqlite3, WAL, the embedded default) and `postgres/` (pg, for several server
 * processes on one database). Everything is async so both fit; SQLite answers synchronously inside.
 *
 * A run is one record (RUDDER writes one row per report line, which is what limits its ingest):
 * the verified run log, compressed, plus its parsed summary. Report-level reads decompress and
 * re-parse the stored log.
 */
import type { ComplianceCounts, ComplianceWindows, ExpectedComponent, NodeTimeMarks, RunOutcome } from '@capstan/shared';
import type { BootstrapStore } from './bootstrap/types.js';
import type { IdentityStore } from './identity/types.js';
import type { JobStore } from './jobs/types.js';
import type { ManagerStore } from './managers/types.js';
import type { AdminStore } from './admins/types.js';
import type { NodeChange } from './rules.js';
import { CHECKED, lookup, REFUSE, type NulRules } from './guard.js';

export type * from './bootstrap/types.js';
export type * from './identity/types.js';
export type * from './jobs/types.js';
export type * from './managers/types.js';
export type * from './admins/types.js';
export type { NodeChange };
export type { ComplianceCounts, ComplianceState, ComplianceWindows, ExpectedComponent, NodeTimeMarks } from '@capstan/shared';

export type Acceptance = 'pending' | 'accepted' | 'refused';
export type NodeStatus = 'unknown' | 'reachable' | 'unreachable';

export interface NodeRecord {
  id: string;
  hostname: string;
  /** Display name: the hostname unless an admin named the node. */
  name: string;
  /** Where to reach it (manual nodes are added by address); null for agent nodes. */
  address: string | null;
  /** How the node came in: `agent` (inventory), `manual` (admin), or a provider's id. */
  manager: string;
  region: string | null;
  /** Cloud identity `(source_id, region, account_id)`: all three or none (providers fill them). */
  source_id: string | null;
  account_id: string | null;
  tags: Record<string, string>;
  groups: string[];
  /** Reachability: unknown until first contact. */
  status: NodeStatus;
  /** What the node's source says (admin action for agent nodes): running, stopped, terminated, missing… */
  state: string;
  accepted: Acceptance;
  /** PEM of the node certificate: the one pinned at acceptance once accepted. */
  certificate: string | null;
  /** sha256 hex of the certificate's DER, for display and quick comparison. */
  certificate_fingerprint: string | null;
  os_name: string | null;
  os_version: string | null;
  agent_version: string | null;
  policy_server: string | null;
  created_at: string; // ISO 8601 UTC
  updated_at: string;
  accepted_at: string | null;
  last_inventory_at: string | null;
  last_run_at: string | null;
  last_config_id: string | null;
  /** Server-clock time of the last inventory or run received: what silence is measured from. */
  last_contact_at: string | null;
  state_changed_at: string;
  /** The config id of the node's current policy (set with its expectations). */
  policy_config_id: string | null;
  /** A relay registered by an admin: its tokens carry `capstan_role: "relay"` (migration 9). */
  relay: boolean;
  /**
   * A node not accepted yet keeps the first certificate it sent. An inventory with another
   * certificate for its id (signed by that other key) is a conflict, kept here (the newest one)
   * until an admin accepts the node choosing a fingerprint (migration 12).
   */
  conflict_certificate: string | null;
  conflict_fingerprint: string | null;
  conflict_at: string | null;
  /**
   * The node's clock minus the server's, in seconds, at its last upload: the time the node put
   * in it (an inventory's file-name time, a run's start) against when it was received. A run
   * starts before it is sent, so a few negative seconds are normal (migration 13).
   */
  clock_skew: number | null;
  clock_skew_at: string | null;
}

export interface NodeUpsertFromInventory {
  id: string;
  hostname: string;
  certificate: string;
  certificate_fingerprint: string;
  os_name: string | null;
  os_version: string | null;
  agent_version: string | null;
  policy_server: string | null;
  /** The whole inventory document, kept as sent (unknown fields included). */
  inventory: unknown;
  received_at: string;
  /** The node's time of the inventory (its file name's), for the node's clock skew. */
  sent_at?: string;
  /**
   * Set when an auto-accept rule matched (the text is the cause recorded in the history). The
   * store still refuses to auto-accept a certificate an admin revoked by deleting its node.
   */
  auto_accept?: string | null;
}

export interface NodeCreate {
  id: string;
  hostname: string;
  name?: string | null;
  address?: string | null;
  certificate?: string | null;
  certificate_fingerprint?: string | null;
  state?: string;
  manager?: string;
  region?: string | null;
  source_id?: string | null;
  account_id?: string | null;
  tags?: Record<string, string>;
  groups?: string[];
  /** A relay (needs a certificate: it renews its token by signed request like an agent). */
  relay?: boolean;
  /**
   * The node id of the relay (or server) this node talks to, as the nodes list gives relays to
   * route by; agents report theirs in their inventory, a relay registered by an admin is told.
   */
  policy_server?: string | null;
}

/** What an admin may change on a node besides acceptance (PATCH). */
export interface NodePatch {
  state?: string;
  name?: string;
  address?: string | null;
  region?: string | null;
  tags?: Record<string, string>;
  groups?: string[];
  relay?: boolean;
  /** See NodeCreate.policy_server (null: directly under the root). */
  policy_server?: string | null;
}

/** One change between two inventories: `kind` package_added|removed|upgraded|downgraded, address_added|removed, kernel. */
export interface InventoryChangeRecord {
  at: string;
  kind: string;
  name: string;
  from: string | null;
  to: string | null;
}

/** The keys `listNodes` filters on; `tag:<key>` filters on one tag. */
export type FilterKey =
  | 'q' | 'id' | 'name' | 'hostname' | 'region' | 'state' | 'status' | 'manager' | 'group' | 'accepted' | 'last_run'
  | 'managed_by' | 'has_agent' | 'relay' | `tag:${string}`;

/**
 * One filter: its values are ORed, filters on different keys are ANDed. `exclude` keeps the
 * nodes that match none of the values. `name`, `hostname` and `region` values ending in `*` are
 * prefixes; `last_run` values are `<from>..<to>` ranges (either end may be empty).
 */
export interface NodeFilter {
  key: FilterKey;
  values: string[];
  exclude?: boolean;
}

export const SORT_FIELDS = [
  'name', 'hostname', 'id', 'status', 'state', 'accepted', 'manager', 'region', 'last_run_at', 'last_contact_at', 'created_at',
] as const;
export type SortField = (typeof SORT_FIELDS)[number];

export interface NodeListQuery {
  filters?: NodeFilter[];
  /** Shorthands kept from the first API: equal to an include filter on that key. */
  accepted?: Acceptance;
  status?: NodeStatus;
  /** Hostname prefix match; a trailing `*` is allowed and means the same. */
  hostname?: string;
  /** Default `name`; ties are broken by id, and empty values sort last either way. */
  sort?: SortField;
  order?: 'asc' | 'desc';
  page: number; // 1-based
  per_page: number;
}

/** A node as the list shows it: with the managers holding it and whether it has an agent. */
export interface NodeListRow extends NodeRecord {
  /** Ids of the managers that hold the node, sorted. */
  managers: string[];
  /** It has sent an inventory, or a certificate is registered for it. */
  has_agent: boolean;
}

export interface NodePage extends Page<NodeListRow> {
  /** How many nodes of the filtered set have each status (they add up to `total`). */
  totals: Record<NodeStatus, number>;
}

/** One recorded transition of a node's acceptance, state or status. */
export interface HistoryEntry {
  id: number;
  node_id: string;
  at: string;
  /** `certificate`: a conflicting certificate was sent (from the pinned fingerprint to the other), or an admin chose one. */
  field: 'accepted' | 'state' | 'status' | 'certificate';
  from: string | null;
  to: string;
  cause: string;
}

/** One component's outcome in a run (shared compliance module). */
export type RunSummaryOutcome = RunOutcome;

/** A change a run reported (a `result_repaired`, or an `audit_noncompliant`), as ingest extracts it. */
export interface ChangeInput {
  rule_id: string;
  directive_id: string;
  component: string;
  key_value: string;
  event_type: string;
  message: string;
  /** The report's execution time, RFC 3339. */
  at: string;
  /** What the agent said it changed (a diff report after the change), if anything. */
  diff: string | null;
  diff_truncated: boolean;
}

export type ChangeLabel = 'intentional' | 'corrective';
export const CHANGE_LABELS: readonly ChangeLabel[] = ['intentional', 'corrective'];

/** A stored change. */
export interface ChangeRecord extends ChangeInput {
  id: number;
  node_id: string;
  run_id: number | null;
  run_started_at: string;
  /**
   * `intentional`: the node's config id differs from its previous run's (a new or edited
   * directive); `corrective`: the same config, so drift was repaired.
   */
  label: ChangeLabel;
  config_id: string | null;
}

/** Which changes to list: every field narrows (ANDed); times are RFC 3339, `from` inclusive, `to` exclusive. */
export interface ChangeQuery {
  from?: string;
  to?: string;
  node_ids?: string[];
  rule_ids?: string[];
  directive_ids?: string[];
  label?: ChangeLabel;
}

/** A page of changes; `total` stops counting at CHANGES_COUNT_LIMIT (`total_capped` then says so). */
export interface ChangePage extends Page<ChangeRecord> {
  total_capped: boolean;
}

/**
 * Most changes a list counts: beyond it `total` says "at least this many". Counting every one of
 * millions of matching changes would cost more than the page itself; the histogram counts exactly.
 */
export const CHANGES_COUNT_LIMIT = 10_000;

export interface ChangeBucket {
  /** The bucket's start, ISO 8601 UTC. */
  at: string;
  intentional: number;
  corrective: number;
}

export interface RunInsert {
  node_id: string;
  /** The run's start time (first report's start datetime), ISO 8601 with offset as reported. */
  started_at: string;
  config_id: string | null;
  complete: boolean;
  report_count: number;
  /** Reports by event type, e.g. {"result_success": 35}. */
  counts: Record<string, number>;
  outcomes: RunSummaryOutcome[];
  /** The file name it arrived under, and the sha256 hex of the bytes received. */
  file_name: string;
  sha256: string;
  /**
   * The verified run log text (S/MIME stripped), compressed by the caller (zstd): stored as
   * given and returned as given by getRunLog. Either this or `log_text`.
   */
  log_compressed?: Buffer;
  /**
   * The verified run log text itself: the store keeps it against the node-day's base (migration
   * 16, store/run-codec.ts), ~5× smaller than compressed alone. The ingest gives this.
   */
  log_text?: Buffer;
  received_at: string;
  /**
   * `outcomes` already packed (store/outcomes.ts: the packed JSON of exactly `outcomes`), by a
   * caller that did it off the event loop (the ingest workers). Absent: the store packs them.
   */
  outcomes_packed?: Buffer;
  /**
   * `JSON.stringify(outcomes)` as UTF-8, by a caller that made it off the event loop (the ingest
   * workers, which need it for `outcomes_packed`). The store encodes it against the node-day's
   * base; absent, the store makes it.
   */
  outcomes_json?: Buffer;
  /** The changes the run reported; stored with the run, labelled by the store. */
  changes?: ChangeInput[];
}

/** One batch of compactRuns: what it did, how far it has looked (run ids), and whether it is done. */
export interface CompactProgress {
  converted: number;
  /** Looked at and left as they were (not zstd). */
  skipped: number;
  through_id: number;
  max_id: number;
  /** Nothing whole is left above through_id. */
  done: boolean;
}

export interface RunRecord {
  id: number;
  node_id: string;
  started_at: string;
  config_id: string | null;
  complete: boolean;
  report_count: number;
  counts: Record<string, number>;
  outcomes: RunSummaryOutcome[];
  file_name: string;
  sha256: string;
  received_at: string;
}

/** A time range on a run's start, `from` inclusive, `to` exclusive; RFC 3339. */
export interface RunRange {
  from?: string;
  to?: string;
}

export interface Page<T> {
  data: T[];
  total: number;
}

export type InsertRunResult = { inserted: true; id: number } | { inserted: false; reason: 'duplicate'; id: number };

/** One run of an insertRuns batch: its own result, or why it alone was refused. */
export type RunBatchResult = { ok: true; result: InsertRunResult } | { ok: false; error: unknown };

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

/** Registry-wide counts for the lifecycle view and /metrics. */
export interface RegistryCounts {
  by_status: Record<string, number>;
  by_state: Record<string, number>;
  by_acceptance: Record<string, number>;
  /** Totals since the database was created (kept in the database, so shared by every server process). */
  purged_nodes: number;
  deleted_runs: number;
}

/** The three kinds of policy object the admin API manages. */
export type PolicyKind = 'directive' | 'group' | 'rule';

export interface PolicyObjectRecord {
  kind: PolicyKind;
  id: string;
  /** The object as validated by the policy model (server/src/policy/model.ts). */
  body: Record<string, unknown>;
  updated_at: string;
}

/** A node's generated policy bundle (unsigned JSON text; signed when served). */
export interface PolicyBundleRecord {
  node_id: string;
  config_id: string;
  generated_at: string;
  bundle: string;
}

/** One node's new bundle and the components it makes the node expected to report. */
export interface PolicyWrite {
  bundle: PolicyBundleRecord;
  expected: ExpectedComponent[];
  /**
   * The stored bundle is this one already (same config id): set the expectations only, keeping
   * the bundle and its generated_at (expectations written by an older server for the same content).
   */
  expectationsOnly?: boolean;
}

export interface Store extends RegistryStore {
  /** Create or migrate the schema (forward only). Idempotent. */
  migrate(): Promise<void>;
  /** Node identity: keyring, node tokens, renewal nonces (./identity/types.ts). */
  readonly identity: IdentityStore;
  /** Jobs: runs triggered on many nodes, their per-node tasks and transitions (./jobs/types.ts). */
  readonly jobs: JobStore;
  /** Managers (discovery sources) and the nodes they hold (./managers/types.ts). */
  readonly managers: ManagerStore;
  /** SSH credentials, pinned host keys and enrollment tokens of bootstrap jobs (./bootstrap/types.ts). */
  readonly bootstrap: BootstrapStore;
  /** Named admins and the audit log (./admins/types.ts). */
  readonly admins: AdminStore;
  close(): Promise<void>;
}

/** Nodes, their inventories, runs, compliance, changes, policies and the lifecycle sweep. */
export interface RegistryStore {
  getNode(id: string): Promise<NodeRecord | null>;
  listNodes(q: NodeListQuery): Promise<NodePage>;
  /**
   * Record an inventory. An unknown node is created `pending` (or accepted, by an auto-accept
   * rule) with the certificate it carries; a known node keeps its pinned certificate and
   * acceptance, its descriptive fields are refreshed, and a `missing` node is running again.
   * Returns the node as stored afterwards.
   */
  upsertFromInventory(inv: NodeUpsertFromInventory): Promise<NodeRecord>;
  /** Manual creation by an admin (no agent yet): accepted, status unknown. ERR_NODE_EXISTS if the id or cloud identity exists. */
  createNode(n: NodeCreate): Promise<NodeRecord>;
  /**
   * One change of a node by its rule (rules.ts applyChange: acceptance, state, an admin's patch,
   * a contact), read, applied and written back with its transitions in one transaction. Returns
   * the node afterwards, null when unknown. The four methods below are this with a fixed kind.
   * Callers outside the store go through the node registry (registry/nodes.ts), which announces
   * the change to its listeners.
   */
  changeNode(id: string, change: NodeChange, at: string, cause: string): Promise<NodeRecord | null>;
  /**
   * pending|refused → accepted (pins the current certificate) or → refused. Returns null when
   * unknown. A node with a certificate conflict is accepted only with `fingerprint` naming one of
   * its two certificates (ERR_CERTIFICATE_CONFLICT without; ERR_CERTIFICATE for another one),
   * which is then pinned; a fingerprint given without a conflict must be the node's.
   */
  setAcceptance(id: string, accepted: Acceptance, at: string, cause?: string, fingerprint?: string): Promise<NodeRecord | null>;
  /** ERR_NODE_TERMINATED when the node is terminated and `state` is another. Returns null when unknown. */
  setState(id: string, state: string, at: string, cause?: string): Promise<NodeRecord | null>;
  /** An admin's change (state and descriptive fields) in one transaction. Returns null when unknown. */
  updateNode(id: string, patch: NodePatch, at: string, cause?: string): Promise<NodeRecord | null>;
  /**
   * Deletes the node, its runs, inventory, history and compliance, and revokes its certificate:
   * the same certificate is never auto-accepted again. Returns false when unknown.
   */
  deleteNode(id: string, at?: string): Promise<boolean>;
  getInventory(nodeId: string): Promise<{ received_at: string; inventory: unknown } | null>;
  /** Transitions of one node, newest first. */
  getHistory(nodeId: string, page: number, perPage: number): Promise<Page<HistoryEntry>>;
  /**
   * A contact at `at` (server clock) that is neither an inventory nor a run (rules.ts
   * afterContact: last_contact_at, reachable, missing → running), in one transaction with its
   * transitions. Returns the node afterwards, null when unknown.
   */
  recordContact(id: string, at: string, cause?: string): Promise<NodeRecord | null>;
  /**
   * The clock skew seen on an upload that was refused for it (a run dated in the future), so the
   * node shows why; `at` is the server's time. Returns false when the node is unknown.
   */
  recordClockSkew(id: string, skewSeconds: number, at: string): Promise<boolean>;

  /**
   * Store a run and update the node's last run, config, contact and status in one transaction
   * (and its compliance, when the run is its newest complete one). A run with the same
   * (node_id, started_at instant) is a duplicate: nothing is written.
   */
  insertRun(run: RunInsert): Promise<InsertRunResult>;
  /**
   * insertRun for several runs in one transaction, so they share one commit (the ingest's group
   * commit). Each run succeeds or fails alone (savepoints): a refused run gets its error in its
   * slot and the others are stored. Rejects as a whole only when the transaction itself fails
   * (database down, commit failed): then none of them is stored.
   */
  insertRuns(runs: RunInsert[]): Promise<RunBatchResult[]>;
  /** Runs of a node, newest start first, optionally within a range of start times. */
  listRuns(nodeId: string, page: number, perPage: number, range?: RunRange): Promise<Page<RunRecord>>;
  /**
   * A run's log, zstd-compressed: the bytes stored for a run given `log_compressed`, a zstd frame
   * of the text for one given `log_text`. Null when the run is unknown.
   */
  getRunLog(runId: number): Promise<Buffer | null>;
  /**
   * A run's log text, decompressed (ERR_DECOMPRESSED_TOO_LARGE beyond `maxBytes`); null when the
   * run is unknown. What report-level reads use.
   */
  getRunLogText(runId: number, maxBytes: number): Promise<Buffer | null>;
  /**
   * Converts up to `limit` runs stored whole (before migration 14) to the node-day form, oldest
   * id first, one transaction per call; resumable (the last id looked at is kept in the
   * database). A run whose log is not a zstd frame is left as it is.
   */
  compactRuns(limit: number): Promise<CompactProgress>;
  /**
   * Makes queryable (the filter language's tables, schema version 15) up to `limit` stored
   * inventories that are not yet, in node id order after `after`: those stored before that
   * version. One transaction per call; a node whose newer inventory arrived meanwhile is skipped.
   * `last` is where the next call goes on; `done` when nothing is left after it.
   */
  reindexInventories(limit: number, after?: string): Promise<{ indexed: number; last: string; done: boolean }>;

  /**
   * Store what a node is expected to report for one config id (the policy generator calls this)
   * and make that config the node's policy; compliance is recomputed. Returns false when the node
   * is unknown. Only the expectations of this config and of the previous policy are kept.
   */
  setExpectations(nodeId: string, configId: string, items: ExpectedComponent[], at: string, opts?: { keep_last_s?: number }): Promise<boolean>;
  /** The inputs of one node's compliance; null when the node is unknown. */
  getComplianceBase(nodeId: string): Promise<ComplianceBase | null>;
  /**
   * Compliance summed over the accepted nodes matching the filters (none: all accepted nodes),
   * or over the nodes of `nodeIds`, with the time states of `clock`.
   */
  complianceSummary(filters: NodeFilter[], clock: ComplianceClock, nodeIds?: string[]): Promise<ComplianceAggregate>;
  /** Compliance per rule, or per (rule, directive), over the accepted nodes with an agent. */
  complianceByRule(by: 'rule' | 'directive', clock: ComplianceClock): Promise<RuleComplianceRow[]>;
  /** Accepted nodes' compliance in node id order, after `after` (keyset paging, for streamed exports). */
  complianceNodes(after: string | null, limit: number, clock: ComplianceClock, filters?: NodeFilter[]): Promise<NodeComplianceRow[]>;

  /** The `limit` accepted nodes with an agent whose compliance is lowest, worst first (nodes without items left out). */
  worstNodes(limit: number, clock: ComplianceClock): Promise<NodeComplianceRow[]>;

  /** Changes newest first (then by id, descending), paged. */
  listChanges(q: ChangeQuery, page: number, perPage: number): Promise<ChangePage>;
  /** Changes counted per hour or day (UTC), oldest bucket first; empty buckets are left out. */
  changesHistogram(q: ChangeQuery, by: 'hour' | 'day'): Promise<ChangeBucket[]>;
  /**
   * Set how long these nodes' last compliance is kept once they are silent (their groups'
   * expiration policy, seconds; 0: none). Nodes without compliance yet are skipped. Returns how many changed.
   */
  setKeepLast(nodeIds: string[], seconds: number): Promise<number>;
  /** Delete changes older than `before`. */
  deleteChangesBefore(before: string, limit: number): Promise<number>;

  // Lifecycle sweep: each call handles at most `limit` nodes or rows and returns how many it did,
  // so the sweeper works in short transactions and ingestion is never stalled for long.
  /** status reachable → unreachable for nodes with no contact since `before`. */
  markUnreachable(before: string, at: string, limit: number): Promise<number>;
  /** state running/unknown → missing for contacted nodes silent since `before`. */
  markMissing(before: string, at: string, limit: number): Promise<number>;
  /** Delete nodes missing or terminated since before `before` (their runs and all go with them). */
  purgeNodes(before: string, limit: number): Promise<number>;
  /** Delete runs that started before `before` (a UTC midnight); Postgres drops whole day partitions. */
  deleteRunsBefore(before: string, limit: number): Promise<number>;
  /** Delete history entries older than `before`. */
  pruneHistory(before: string, limit: number): Promise<number>;
  /** Prepare run storage around `now` (Postgres: the day partitions ahead). */
  prepareRunStorage(now: Date): Promise<void>;
  counts(): Promise<RegistryCounts>;

  // Policy model and generated bundles.
  listPolicyObjects(kind: PolicyKind): Promise<PolicyObjectRecord[]>;
  getPolicyObject(kind: PolicyKind, id: string): Promise<PolicyObjectRecord | null>;
  /** Create or replace; returns true when it was created. */
  putPolicyObject(kind: PolicyKind, id: string, body: Record<string, unknown>, at: string): Promise<boolean>;
  deletePolicyObject(kind: PolicyKind, id: string): Promise<boolean>;
  getPolicyBundle(nodeId: string): Promise<PolicyBundleRecord | null>;
  /** Store a node's bundle (replacing the previous); false when the node is unknown. */
  putPolicyBundle(b: PolicyBundleRecord): Promise<boolean>;
  deletePolicyBundle(nodeId: string): Promise<boolean>;
  /** Ids of every node matching the filters, unpaged (policy groups: membership of a whole filter). */
  listNodeIds(filters: NodeFilter[]): Promise<string[]>;
  /** What changed between a node's inventories, newest first (kept as long as changes). */
  inventoryHistory(nodeId: string, page: number, perPage: number): Promise<Page<InventoryChangeRecord>>;
  /**
   * Package versions across the fleet whose name matches a glob (`*`, `?`; case-sensitive), each
   * with the number of nodes that have it installed, by name then version order.
   */
  listSoftware(nameGlob: string, page: number, perPage: number): Promise<Page<{ name: string; version: string; nodes: number }>>;
  /** An admin's properties of a node (`property:<key>` in filters); null when the node is unknown. */
  getProperties(nodeId: string): Promise<Record<string, string> | null>;
  /** Replace a node's properties (checkProperties first); null when the node is unknown. */
  setProperties(nodeId: string, properties: Record<string, string>): Promise<Record<string, string> | null>;
  /** The expectations stored for one config id of a node; null when none are. */
  getExpectations(nodeId: string, configId: string): Promise<ExpectedComponent[] | null>;
  /** The config ids of the stored bundles of these nodes (absent: none stored). */
  policyConfigIds(nodeIds: string[]): Promise<Map<string, string>>;
  /**
   * Store bundles and set their expectations (as setExpectations) in one transaction, for the
   * generator's batches; nodes that are gone are skipped. Returns how many were stored.
   */
  putPolicies(items: PolicyWrite[]): Promise<number>;
}

/** How each registry method treats U+0000 (guard.ts). */
export const REGISTRY_NUL: NulRules<RegistryStore> = {
  getNode: lookup([0], () => null),
  listNodes: REFUSE,
  upsertFromInventory: CHECKED,
  createNode: REFUSE,
  changeNode: lookup([0], () => null),
  setAcceptance: lookup([0], () => null),
  setState: lookup([0], () => null),
  updateNode: lookup([0], () => null),
  deleteNode: lookup([0], () => false),
  getInventory: lookup([0], () => null),
  getHistory: lookup([0], () => ({ data: [], total: 0 })),
  recordContact: lookup([0], () => null),
  recordClockSkew: lookup([0], () => false),
  insertRun: CHECKED,
  insertRuns: CHECKED,
  listRuns: lookup([0], () => ({ data: [], total: 0 })),
  getRunLog: REFUSE,
  getRunLogText: REFUSE,
  compactRuns: REFUSE,
  reindexInventories: REFUSE,
  setExpectations: lookup([0], () => false),
  getComplianceBase: lookup([0], () => null),
  complianceSummary: lookup([2]),
  complianceByRule: REFUSE,
  complianceNodes: REFUSE,
  worstNodes: REFUSE,
  listChanges: REFUSE,
  changesHistogram: REFUSE,
  setKeepLast: lookup([0]),
  deleteChangesBefore: REFUSE,
  markUnreachable: REFUSE,
  markMissing: REFUSE,
  purgeNodes: REFUSE,
  deleteRunsBefore: REFUSE,
  pruneHistory: REFUSE,
  prepareRunStorage: REFUSE,
  counts: REFUSE,
  listPolicyObjects: lookup([0], () => []),
  getPolicyObject: lookup([0, 1], () => null),
  putPolicyObject: REFUSE,
  deletePolicyObject: lookup([0, 1], () => false),
  getPolicyBundle: lookup([0], () => null),
  putPolicyBundle: REFUSE,
  deletePolicyBundle: lookup([0], () => false),
  listNodeIds: REFUSE,
  inventoryHistory: lookup([0], () => ({ data: [], total: 0 })),
  listSoftware: REFUSE,
  getProperties: lookup([0], () => null),
  setProperties: lookup([0], () => null),
  getExpectations: lookup([0, 1], () => null),
  policyConfigIds: lookup([0]),
  // The generator's batches: every bundle and expectation is checked (checkBundleRecord,
  // checkExpectations) by each dialect before anything is written.
  putPolicies: CHECKED,
};
