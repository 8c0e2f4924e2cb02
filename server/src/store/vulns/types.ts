/**
 * Vulnerabilities as the store keeps them (migration 21): advisories with what matching needs,
 * KEV and EPSS by CVE, each feed's state, per-node findings with their reason, the names each
 * node is looked up by, and mutes. The rules (matching, mutes, staleness) are server/src/vulns/'s.
 */
import { CHECKED, lookup, REFUSE, type NulRules } from '../guard.js';
import type { NodeFilter } from '../store.js';

export interface AdvisoryRow {
  id: string;
  modified: string;
  withdrawn: string | null;
  summary: string | null;
  /** The highest rating of its affected entries (low … critical), null when unrated. */
  rating: string | null;
  cves: string[];
  /** The validated advisory (vulns/osv.ts Advisory) as stored. */
  doc: unknown;
}

export interface KevRow {
  cve: string;
  date_added: string;
  due_date: string | null;
  ransomware: string | null;
}

export interface EpssRow {
  cve: string;
  epss: number;
  percentile: number;
}

export interface FeedStateRow {
  name: string;
  source: string;
  /** When the last import finished (null: never). */
  imported_at: string | null;
  /** The feed's own date: its Last-Modified, or its file's modification time. */
  feed_date: string | null;
  /** The last import's report (vulns/feed.ts ImportReport, or KEV/EPSS counts). */
  report: unknown;
  /** Why the last attempt failed, if it did. */
  error: string | null;
}

export interface VulnFindingRow {
  node_id: string;
  advisory: string;
  package: string;
  version: string;
  rating: string | null;
  fixed: string | null;
  /** The reason (vulns/bucket.ts Match). */
  match: unknown;
  found_at: string;
}

export interface MuteRow {
  id: string;
  target: string;
  groups: string[] | null;
  reason: string;
  expires: string | null;
  created_at: string;
  created_by: string;
}

/** Affected nodes per advisory, over every node or the ones given. */
export interface AdvisoryCount {
  advisory: string;
  nodes: number;
}

/** One advisory's row of VulnStore.advisoryTally. */
export interface AdvisoryTally {
  advisory: string;
  /** The highest rating of its findings in scope ('none' over no rating). */
  rating: string | null;
  nodes: number;
  muted: number;
}

export interface VulnStore {
  /** Every stored advisory's id and `modified` (what an import compares with). */
  advisoryVersions(): Promise<Array<{ id: string; modified: string }>>;
  /** Insert or replace advisories (and their CVE ids), in one transaction. */
  putAdvisories(rows: AdvisoryRow[]): Promise<void>;
  /** Advisories not withdrawn, by id after `after`, at most `limit` (loading the index at start). */
  pageAdvisories(after: string, limit: number): Promise<AdvisoryRow[]>;
  getAdvisories(ids: string[]): Promise<AdvisoryRow[]>;
  /** The advisories known by a CVE id. */
  advisoriesOfCve(cve: string): Promise<string[]>;
  /** Replace the KEV catalogue, or the EPSS scores, whole (null: leave as is). */
  replaceEnrichment(kev: KevRow[] | null, epss: EpssRow[] | null): Promise<void>;
  enrichment(cves: string[]): Promise<{ kev: KevRow[]; epss: EpssRow[] }>;
  putFeedState(f: FeedStateRow): Promise<void>;
  feedStates(): Promise<FeedStateRow[]>;
  /** A node's findings and lookup names replaced by these (after its inventory). */
  replaceNodeFindings(nodeId: string, findings: VulnFindingRow[], names: string[]): Promise<void>;
  /** One advisory's findings replaced, on the nodes given only (a changed advisory). */
  replaceAdvisoryFindings(advisory: string, nodeIds: string[], findings: VulnFindingRow[]): Promise<void>;
  /** Every finding of one advisory dropped (withdrawn). */
  deleteAdvisoryFindings(advisory: string): Promise<number>;
  nodeFindings(nodeId: string): Promise<VulnFindingRow[]>;
  advisoryFindings(advisories: string[]): Promise<VulnFindingRow[]>;
  /** Nodes looked up by one of these package names (binary or source). */
  nodesWithNames(names: string[]): Promise<string[]>;
  /** Affected nodes per advisory; `nodeIds` restricts them (a filter's answer). */
  countByAdvisory(nodeIds?: string[]): Promise<AdvisoryCount[]>;
  /**
   * Per advisory, over the findings of the nodes `filters` select (all without one): its highest
   * rating and how many nodes have a finding of it no mute covers (`nodes`) or one covered
   * (`muted`), mutes in force at `now` applied as the filter terms apply them — counted by the
   * database, not read finding by finding (the fleet-wide list view).
   */
  advisoryTally(filters: NodeFilter[], now: string): Promise<AdvisoryTally[]>;
  /** Findings per node (score, filter terms): node, advisory, rating. */
  findingSummary(nodeIds?: string[]): Promise<Array<{ node_id: string; advisory: string; rating: string | null; cves: string[] }>>;
  listMutes(): Promise<MuteRow[]>;
  /** false when the id exists. */
  insertMute(m: MuteRow): Promise<boolean>;
  deleteMute(id: string): Promise<boolean>;
}

/** How each method treats U+0000 (guard.ts). */
export const VULNS_NUL: NulRules<VulnStore> = {
  advisoryVersions: REFUSE,
  // The service drops U+0000 from the text columns; the document is stored as JSON text (escaped).
  putAdvisories: CHECKED,
  pageAdvisories: REFUSE,
  getAdvisories: lookup([0]),
  advisoriesOfCve: lookup([0], () => []),
  replaceEnrichment: REFUSE,
  enrichment: lookup([0]),
  putFeedState: REFUSE,
  feedStates: REFUSE,
  replaceNodeFindings: REFUSE,
  replaceAdvisoryFindings: REFUSE,
  deleteAdvisoryFindings: lookup([0], () => 0),
  nodeFindings: lookup([0], () => []),
  advisoryFindings: lookup([0]),
  nodesWithNames: lookup([0]),
  countByAdvisory: lookup([0]),
  advisoryTally: REFUSE,
  findingSummary: lookup([0]),
  listMutes: REFUSE,
  insertMute: REFUSE,
  deleteMute: lookup([0], () => false),
};
