/**
 * Changes: what runs reported repairing (`result_repaired`), one row each, labelled intentional
 * or corrective when stored. (Before findings, audit non-compliances were changes too: migration
 * 18 turned them into findings.)
 */
import type { Page } from '../store.js';
import { REFUSE, type NulRules } from '../guard.js';

/** What a report says of the item it is about: changes and findings keep it as it came. */
export interface ReportItem {
  rule_id: string;
  directive_id: string;
  component: string;
  key_value: string;
  event_type: string;
  message: string;
}

/** A change a run reported (a `result_repaired`), as ingest extracts it. */
export interface ChangeInput extends ReportItem {
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

export interface ChangeStore {
  /** Changes newest first (then by id, descending), paged. */
  listChanges(q: ChangeQuery, page: number, perPage: number): Promise<ChangePage>;
  /**
   * Changes counted per hour or day (UTC), oldest bucket first; empty buckets are left out. Read
   * from the kept counters where they answer (changes/kept.ts), counted afresh otherwise.
   */
  changesHistogram(q: ChangeQuery, by: 'hour' | 'day'): Promise<ChangeBucket[]>;
  /** changesHistogram counted afresh from every matching change (what the kept counters must equal). */
  changesHistogramFresh(q: ChangeQuery, by: 'hour' | 'day'): Promise<ChangeBucket[]>;
}

/** How each change method treats U+0000 (guard.ts). */
export const CHANGES_NUL: NulRules<ChangeStore> = {
  listChanges: REFUSE,
  changesHistogram: REFUSE,
  changesHistogramFresh: REFUSE,
};
