/**
 * Nodes in the registry: one row per node (its acceptance, state and status, certificate, tags
 * and groups), its history of transitions, an admin's properties, and its newest inventory with
 * the queryable copy the filter language reads. How a node changes is decided by the domain
 * (server/src/registry/rules.ts), whose rules the store applies (../rules.ts).
 */
import type { JsonValue } from '@capstan/shared/filter/properties';
import { CHECKED, lookup, REFUSE, type NulRules } from '../guard.js';
import type { Page } from '../store.js';
import type { NodePropertiesRow, NodePropertyLevel } from './properties.js';

export type { NodePropertiesRow, NodePropertyLevel } from './properties.js';

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
/** One node change as the store applies it (changeNode): which rule decides the next record. */
export type NodeChange =
  | { kind: 'acceptance'; accepted: Acceptance; fingerprint?: string }
  | { kind: 'state'; state: string }
  | { kind: 'patch'; patch: NodePatch }
  | { kind: 'contact' };

/** A filter after checking (registry/filters.ts): its values ORed, one per key. */
export interface CheckedFilter {
  key: FilterKey;
  values: string[];
  exclude: boolean;
}

export interface NodeFilter {
  key: FilterKey;
  values: string[];
  exclude?: boolean;
}

export const SORT_FIELDS = [
  'name', 'hostname', 'id', 'status', 'state', 'accepted', 'manager', 'region', 'last_run_at', 'last_contact_at', 'created_at',
  'compliance',
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
  /**
   * `sort: 'compliance'`: the moment compliance is judged at (epoch seconds: a node silent since
   * `silent_before` is no answer, one whose policy changed after `applying_after` is applying);
   * absent, the stored counts are compared as they are. Nodes without compliance data sort last.
   */
  compliance_at?: { silent_before: number; applying_after: number };
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
export type HistoryInsert = Omit<HistoryEntry, 'id'>;

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

/** What a node's upload is checked against before its signature: its acceptance and pinned certificate. */
export interface NodeTrust {
  accepted: Acceptance;
  certificate: string | null;
}

/** An accepted node as the relays' nodes list names it. */
export interface AcceptedNodeRow {
  id: string;
  hostname: string;
  policy_server: string;
  relay: boolean;
  certificate_fingerprint: string | null;
  certificate: string | null;
}

/** What callers may read of nodes. */
export interface NodeReads {
  getNode(id: string): Promise<NodeRecord | null>;
  /**
   * The two fields ingest checks before verifying a node's run log (one narrow read: the whole
   * node, read again where the run is stored, cost a second full read per run log).
   */
  getNodeTrust(id: string): Promise<NodeTrust | null>;
  listNodes(q: NodeListQuery): Promise<NodePage>;
  /** listNodes with the compliance sort's key computed afresh for every node (what the read from the kept shares must equal). */
  listNodesFresh(q: NodeListQuery): Promise<NodePage>;
  /** Ids of every node matching the filters, unpaged (policy groups: membership of a whole filter). */
  listNodeIds(filters: NodeFilter[]): Promise<string[]>;
  /**
   * At most `limit` accepted nodes in id order after `after` ('' from the start): each page found
   * by key and none counted, so a walk of the fleet costs one pass however large it is. What the
   * relays route by, so never answered by a replica (a relay refuses a node's files on it).
   * `withCertificates` false leaves the certificates unread (`certificate` null on every row):
   * they are most of a walk's cost, and a caller that keeps what it derives from them by
   * fingerprint reads them again only for a page that holds one it has not seen.
   */
  acceptedNodesPage(after: string, limit: number, withCertificates?: boolean): Promise<AcceptedNodeRow[]>;
  /** Transitions of one node, newest first. */
  getHistory(nodeId: string, page: number, perPage: number): Promise<Page<HistoryEntry>>;
  /**
   * An admin's plain properties of a node, JSON values by name (`property:<path>` in filters),
   * its secret ones left out; null when the node is unknown.
   */
  getProperties(nodeId: string): Promise<Record<string, JsonValue> | null>;
  /** A node's own properties, plain and secret (their text: for the domain, never to show); null when unknown. */
  getNodeLevel(nodeId: string): Promise<NodePropertyLevel | null>;
  /** The nodes with own properties, by id, each with its plain values and the names of its secrets. */
  listNodeProperties(page: number, perPage: number): Promise<Page<NodePropertiesRow>>;
}

/**
 * Node writes: the node registry (server/src/registry/nodes.ts) is their only caller outside the
 * store, so every change has its effects and its audit record; each applies the domain's rules.
 */
export interface NodeWrites {
  /** Manual creation by an admin (no agent yet): accepted, status unknown. ERR_NODE_EXISTS if the id or cloud identity exists. */
  createNode(n: NodeCreate): Promise<NodeRecord>;
  /**
   * One change of a node by its rule (the domain's applyChange: acceptance, state, an admin's patch,
   * a contact), read, applied and written back with its transitions in one transaction. Returns
   * the node afterwards, null when unknown.
   * - acceptance: pending|refused → accepted (pins the current certificate) or → refused. A node
   *   with a certificate conflict is accepted only with `fingerprint` naming one of its two
   *   certificates (ERR_CERTIFICATE_CONFLICT without; ERR_CERTIFICATE for another one), which is
   *   then pinned; a fingerprint given without a conflict must be the node's.
   * - state: ERR_NODE_TERMINATED when the node is terminated and `state` is another.
   * - patch: an admin's change (state and descriptive fields).
   * - contact: neither an inventory nor a run (last_contact_at, reachable, missing → running).
   */
  changeNode(id: string, change: NodeChange, at: string, cause: string): Promise<NodeRecord | null>;
  /**
   * The clock skew seen on an upload that was refused for it (a run dated in the future), so the
   * node shows why; `at` is the server's time. Returns false when the node is unknown.
   */
  recordClockSkew(id: string, skewSeconds: number, at: string): Promise<boolean>;
  /**
   * Deletes the node, its runs, inventory, history and compliance, and revokes its certificate:
   * the same certificate is never auto-accepted again. Returns false when unknown.
   */
  deleteNode(id: string, at?: string): Promise<boolean>;
  /**
   * Replace a node's properties (checkLevel first): its plain ones by `properties`, and its
   * secrets by `secrets`, or without it, the stored secrets `properties` does not name are kept.
   * Returns the plain properties; null when the node is unknown.
   */
  setProperties(nodeId: string, properties: Record<string, JsonValue>, secrets?: Record<string, string>): Promise<Record<string, JsonValue> | null>;
}

export interface NodeStore extends NodeReads, NodeWrites {}

/** A node's inventories: the newest document as sent, its queryable copy, and what changed between them. */
export interface InventoryStore {
  /**
   * Record an inventory. An unknown node is created `pending` (or accepted, by an auto-accept
   * rule) with the certificate it carries; a known node keeps its pinned certificate and
   * acceptance, its descriptive fields are refreshed, and a `missing` node is running again.
   * Returns the node as stored afterwards.
   */
  upsertFromInventory(inv: NodeUpsertFromInventory): Promise<NodeRecord>;
  getInventory(nodeId: string): Promise<{ received_at: string; inventory: unknown } | null>;
  /** What changed between a node's inventories, newest first (kept as long as changes). */
  inventoryHistory(nodeId: string, page: number, perPage: number): Promise<Page<InventoryChangeRecord>>;
  /**
   * Package versions across the fleet whose name matches a glob (`*`, `?`; case-sensitive), each
   * with the number of nodes that have it installed, by name then version order.
   */
  listSoftware(nameGlob: string, page: number, perPage: number): Promise<Page<{ name: string; version: string; nodes: number }>>;
  /**
   * Makes queryable (the filter language's tables, schema version 15) up to `limit` stored
   * inventories that are not yet, in node id order after `after`: those stored before that
   * version. One transaction per call; a node whose newer inventory arrived meanwhile is skipped.
   * `last` is where the next call goes on; `done` when nothing is left after it.
   */
  reindexInventories(limit: number, after?: string): Promise<{ indexed: number; last: string; done: boolean }>;
}

/** How each node method treats U+0000 (guard.ts). */
export const NODES_NUL: NulRules<NodeStore> = {
  getNode: lookup([0], () => null),
  getNodeTrust: lookup([0], () => null),
  listNodes: REFUSE,
  listNodesFresh: REFUSE,
  listNodeIds: REFUSE,
  acceptedNodesPage: REFUSE,
  createNode: REFUSE,
  changeNode: lookup([0], () => null),
  recordClockSkew: lookup([0], () => false),
  deleteNode: lookup([0], () => false),
  getHistory: lookup([0], () => ({ data: [], total: 0 })),
  getProperties: lookup([0], () => null),
  getNodeLevel: lookup([0], () => null),
  listNodeProperties: REFUSE,
  setProperties: lookup([0], () => null),
};

/** How each inventory method treats U+0000 (guard.ts): an inventory's document is kept as sent. */
export const INVENTORY_NUL: NulRules<InventoryStore> = {
  upsertFromInventory: CHECKED,
  getInventory: lookup([0], () => null),
  inventoryHistory: lookup([0], () => ({ data: [], total: 0 })),
  listSoftware: REFUSE,
  reindexInventories: REFUSE,
};
