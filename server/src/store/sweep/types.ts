/**
 * The lifecycle sweep and retention: each call handles at most `limit` nodes or rows and returns
 * how many it did, so the sweeper works in short transactions and ingestion is never stalled for long.
 */
import { REFUSE, type NulRules } from '../guard.js';

/** Registry-wide counts for the lifecycle view and /metrics. */
export interface RegistryCounts {
  by_status: Record<string, number>;
  by_state: Record<string, number>;
  by_acceptance: Record<string, number>;
  /** Totals since the database was created (kept in the database, so shared by every server process). */
  purged_nodes: number;
  deleted_runs: number;
}

/** One node a sweep step moved: its state and status before, and after (null: purged). */
export interface SweptNode {
  id: string;
  /** What an event about it says (events/sources.ts): its name, its relay, its last contact. */
  hostname?: string;
  policy_server?: string | null;
  last_contact_at?: string | null;
  before: { state: string; status: string };
  after: { state: string; status: string } | null;
}

export interface SweepStore {
  /** status reachable → unreachable for nodes with no contact since `before`; the nodes moved. */
  markUnreachable(before: string, at: string, limit: number): Promise<SweptNode[]>;
  /** state running/unknown → missing for contacted nodes silent since `before`; the nodes moved. */
  markMissing(before: string, at: string, limit: number): Promise<SweptNode[]>;
  /** Delete nodes missing or terminated since before `before` (their runs and all go with them); the nodes deleted. */
  purgeNodes(before: string, limit: number): Promise<SweptNode[]>;
  /** Delete runs that started before `before` (a UTC midnight); Postgres drops whole day partitions. */
  deleteRunsBefore(before: string, limit: number): Promise<number>;
  /** Delete history entries older than `before`. */
  pruneHistory(before: string, limit: number): Promise<number>;
  /** Delete changes older than `before`. */
  deleteChangesBefore(before: string, limit: number): Promise<number>;
  /**
   * Delete expectation lists no node's expectations name any more (migration 30), at most
   * `limit`. PostgreSQL keeps a list two hours after it was last taken into use, so that one a
   * writer has just named is never deleted under it; SQLite's writers and sweep take turns.
   */
  deleteUnusedExpectationLists(limit: number): Promise<number>;
  /**
   * Delete policy texts no bundle uses any more, at most `limit`. PostgreSQL (migration 42) keeps
   * a text two hours after a writer last took it into use, as it keeps lists; SQLite releases a
   * text with the last bundle that uses it (migration 41), so this finds none there unless a
   * release was missed.
   */
  deleteUnusedPolicyTexts(limit: number): Promise<number>;
  /** Prepare run storage around `now` (Postgres: the day partitions ahead). */
  prepareRunStorage(now: Date): Promise<void>;
  /** Nodes per status, state and acceptance from the kept counters (migration 25), and the registry's totals. */
  counts(): Promise<RegistryCounts>;
  /** counts() with the nodes counted afresh (what the kept counters must equal). */
  countsFresh(): Promise<RegistryCounts>;
}

/** How each sweep method treats U+0000 (guard.ts). */
export const SWEEP_NUL: NulRules<SweepStore> = {
  markUnreachable: REFUSE,
  markMissing: REFUSE,
  purgeNodes: REFUSE,
  deleteRunsBefore: REFUSE,
  pruneHistory: REFUSE,
  deleteChangesBefore: REFUSE,
  deleteUnusedExpectationLists: REFUSE,
  deleteUnusedPolicyTexts: REFUSE,
  prepareRunStorage: REFUSE,
  counts: REFUSE,
  countsFresh: REFUSE,
};
