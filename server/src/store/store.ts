/**
 * The registry's storage interface. Two implementations share one test suite:
 * `sqlite/` (better-sqlite3, WAL, the embedded default) and `postgres/` (pg, for several server
 * processes on one database). Everything is async so both fit; SQLite answers synchronously inside.
 *
 * A run is one record (RUDDER writes one row per report line, which is what limits its ingest):
 * the verified run log, compressed, plus its parsed summary. Report-level reads decompress and
 * re-parse the stored log.
 */

export type Acceptance = 'pending' | 'accepted' | 'refused';
export type NodeStatus = 'unknown' | 'reachable' | 'unreachable';

export interface NodeRecord {
  id: string;
  hostname: string;
  /** Reachability: unknown until first contact. */
  status: NodeStatus;
  /** What the node's source says (admin action for agent nodes): running, stopped, terminated… */
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
}

export interface NodeListQuery {
  accepted?: Acceptance;
  status?: NodeStatus;
  /** Hostname prefix match; a trailing `*` is allowed and means the same. */
  hostname?: string;
  page: number; // 1-based
  per_page: number;
}

export interface RunSummaryOutcome {
  rule_id: string;
  directive_id: string;
  component: string;
  /** The worst event type reported for this (rule, directive, component) in the run. */
  outcome: string;
  count: number;
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
  /** The verified run log text (S/MIME stripped), compressed by the caller (zstd). */
  log_compressed: Buffer;
  received_at: string;
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

export interface Page<T> {
  data: T[];
  total: number;
}

export type InsertRunResult = { inserted: true; id: number } | { inserted: false; reason: 'duplicate'; id: number };

export interface Store {
  /** Create or migrate the schema (forward only). Idempotent. */
  migrate(): Promise<void>;
  close(): Promise<void>;

  getNode(id: string): Promise<NodeRecord | null>;
  listNodes(q: NodeListQuery): Promise<Page<NodeRecord>>;
  /**
   * Record an inventory. An unknown node is created `pending` with the certificate it carries; a
   * known node keeps its pinned certificate and acceptance, its descriptive fields are refreshed.
   * Returns the node as stored afterwards.
   */
  upsertFromInventory(inv: NodeUpsertFromInventory): Promise<NodeRecord>;
  /** Manual creation by an admin (no agent yet): accepted, status unknown. ERR_NODE_EXISTS if the id exists. */
  createNode(n: { id: string; hostname: string; certificate?: string | null; certificate_fingerprint?: string | null; state?: string }): Promise<NodeRecord>;
  /** pending|refused → accepted (pins the current certificate) or → refused. Returns null when unknown. */
  setAcceptance(id: string, accepted: Acceptance, at: string): Promise<NodeRecord | null>;
  setState(id: string, state: string, at: string): Promise<NodeRecord | null>;
  /** Deletes the node, its runs and its inventories. Returns false when unknown. */
  deleteNode(id: string): Promise<boolean>;
  getInventory(nodeId: string): Promise<{ received_at: string; inventory: unknown } | null>;

  /**
   * Store a run and update the node's last_run_at / last_config_id / status (reachable) in one
   * transaction. A run with the same (node_id, started_at) is a duplicate: nothing is written.
   */
  insertRun(run: RunInsert): Promise<InsertRunResult>;
  listRuns(nodeId: string, page: number, perPage: number): Promise<Page<RunRecord>>;
  getRunLog(runId: number): Promise<Buffer | null>;
}
