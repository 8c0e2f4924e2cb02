/**
 * Findings: an audit non-compliance or an error of one node's component, from the run that first
 * reported it until the run that no longer does. The compliance write opens and closes them, in
 * the run's transaction, as the domain's rule says (StoreRules.events.reconcile); a run that
 * changes nothing writes nothing here (an open finding's last sighting and run count are read
 * from the node's compliance).
 */
import type { ReportItem } from '../changes/types.js';
import type { Page } from '../store.js';
import { REFUSE, type NulRules } from '../guard.js';
import type { NodeFilter } from '../nodes/types.js';

export type FindingKind = 'non_compliant' | 'error';
export const FINDING_KINDS: readonly FindingKind[] = ['non_compliant', 'error'];

/**
 * Why a finding closed: `repaired` (the agent repaired the component), `fixed` (compliant, or not
 * applicable, with no repair by the agent: fixed by hand or by something else), `removed` (no
 * longer in the node's policy), `unreported` (a complete run did not report the component).
 */
export type CloseReason = 'repaired' | 'fixed' | 'removed' | 'unreported';
export const CLOSE_REASONS: readonly CloseReason[] = ['repaired', 'fixed', 'removed', 'unreported'];

/** A failing report of a run, as the ingest extracts it: what a finding opened by that run says. */
export interface FindingInput extends ReportItem {
  /** What a repair would change (an audit's diff report), if the agent said. */
  diff: string | null;
  diff_truncated: boolean;
}

/** An open finding, as the compliance write reads it before deciding. */
export interface OpenFinding {
  id: number;
  rule_id: string;
  directive_id: string;
  component: string;
  key_value: string;
  kind: FindingKind;
  first_seen_at: string;
  /** The node's runs_seen at the run that opened it. */
  first_count: number;
}

export interface FindingRecord {
  id: number;
  node_id: string;
  rule_id: string;
  directive_id: string;
  component: string;
  key_value: string;
  kind: FindingKind;
  event_type: string;
  message: string;
  diff: string | null;
  diff_truncated: boolean;
  status: 'open' | 'closed';
  first_seen_at: string;
  first_run_id: number | null;
  /** The last run that reported it (the node's last compliance run while open). */
  last_seen_at: string | null;
  last_run_id: number | null;
  /** Runs that reported it, the first one included. */
  runs: number;
  closed_at: string | null;
  closed_run_id: number | null;
  close_reason: CloseReason | null;
}

/** Which findings to list: every field narrows; times are RFC 3339. */
export interface FindingQuery {
  status?: 'open' | 'closed';
  kind?: FindingKind;
  node_ids?: string[];
  rule_ids?: string[];
  directive_ids?: string[];
  /** Node filters (the filter language and the list's keys). */
  filters?: NodeFilter[];
  /** First seen at or after / before. */
  first_seen_from?: string;
  first_seen_to?: string;
}

export interface FindingStore {
  /** Findings newest first (by id), paged. */
  listFindings(q: FindingQuery, page: number, perPage: number): Promise<Page<FindingRecord>>;
  /** Delete findings closed before `before`, at most `limit`. */
  deleteClosedFindingsBefore(before: string, limit: number): Promise<number>;
}

/** How each finding method treats U+0000 (guard.ts). */
export const FINDINGS_NUL: NulRules<FindingStore> = {
  listFindings: REFUSE,
  deleteClosedFindingsBefore: REFUSE,
};
