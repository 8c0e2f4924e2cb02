/**
 * Patch campaigns in the store (both backends): one row per campaign holding its whole document
 * (what was asked, its waves and every node's result) with a version for optimistic writes —
 * the campaign runner (server/src/campaigns/runner.ts) reads, advances and saves it, and a save
 * from a stale read changes nothing. The jobs its waves made live in the jobs tables.
 */
import type { UpgradedPackage, UpgradeRequest } from '@capstan/shared/upgrade';
import { lookup, REFUSE, type NulRules } from '../guard.js';
import type { NodeFilter, Page } from '../store.js';

export const CAMPAIGN_STATES = ['scheduled', 'running', 'waiting_window', 'stopped', 'cancelled', 'finished'] as const;
export type CampaignState = (typeof CAMPAIGN_STATES)[number];
/** States the runner still moves. */
export const ACTIVE_CAMPAIGN_STATES: readonly CampaignState[] = ['scheduled', 'running', 'waiting_window'];

export const WEEKDAYS = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'] as const;
export type Weekday = (typeof WEEKDAYS)[number];

/** A weekly maintenance window, in a time zone: each listed day from `start`, for `duration_ms`. */
export interface MaintenanceWindow {
  days: Weekday[];
  /** HH:MM, local time in `tz`. */
  start: string;
  duration_ms: number;
  /** An IANA time zone (Europe/Paris, UTC). */
  tz: string;
}

/** A window for the members of one group (as the filter `group = <id>` counts them). */
export interface GroupWindow {
  group: string;
  window: MaintenanceWindow;
}

export interface CampaignSpec {
  /** As asked: static nodes and node filters (a filter expression is the key `q`). */
  nodes: string[];
  filters: NodeFilter[];
  upgrade: UpgradeRequest;
  /** null: any time. With `windows`: the window of nodes in none of their groups. */
  window: MaintenanceWindow | null;
  /**
   * Windows per group, in priority order: a node takes the window of the first group here it is
   * a member of (decided at creation, like the targets). Absent or empty: `window` for all.
   */
  windows?: GroupWindow[];
  /** The first wave: a count or a percentage of the targets; null: one wave. */
  canary: { count: number } | { percent: number } | null;
  /** Stop the campaign when more than this percentage of a wave's nodes failed (0: any failure). */
  failure_threshold: number;
  /** Attempts per node (a node offline in a window is retried in the next one) before it fails. */
  max_attempts: number;
  /** The vulnerability the campaign fixes, when it was made from one. */
  vulnerability?: string;
}

export type NodeResultState = 'pending' | 'running' | 'done' | 'failed' | 'retry' | 'cancelled' | 'skipped';

export interface CampaignNodeResult {
  node_id: string;
  /** Index of its wave; -1 for nodes skipped at creation (they cannot run). */
  wave: number;
  /** The group whose window (spec.windows) the node runs in; null or absent: the campaign's `window`. */
  window?: string | null;
  /** A node to retry starts in a window opening at or after this (absent: its wave's retry_after). */
  retry_after?: string | null;
  state: NodeResultState;
  attempts: number;
  /** The job of its last attempt. */
  job_id: string | null;
  /** The task's reason (exit_code, offline, timeout…), or the skip's. */
  reason: string | null;
  message: string | null;
  exit_code: number | null;
  upgraded: UpgradedPackage[];
  unmet: string[];
  reboot_required: boolean;
  updated_at: string;
}

export type WaveState = 'pending' | 'running' | 'waiting' | 'done' | 'stopped' | 'cancelled';

export interface CampaignWave {
  index: number;
  nodes: string[];
  state: WaveState;
  /** Every job this wave made (one per window it ran in). */
  job_ids: string[];
  /** The running job, when there is one (the newest, when the wave's windows run several at once). */
  job_id: string | null;
  /** The earliest a node to retry may start again (each node keeps its own, CampaignNodeResult.retry_after). */
  retry_after: string | null;
  started_at: string | null;
  ended_at: string | null;
}

export interface CampaignRecord {
  id: string;
  name: string;
  state: CampaignState;
  /** Why it is in its state, in words (the threshold passed, the next window…). */
  message: string | null;
  spec: CampaignSpec;
  waves: CampaignWave[];
  nodes: CampaignNodeResult[];
  created_at: string;
  updated_at: string;
  /** When the runner looks at it next (null: never, it is final). */
  next_at: string | null;
  /** Bumped by every save. */
  version: number;
}

export interface CampaignStore {
  create(c: CampaignRecord): Promise<CampaignRecord>;
  get(id: string): Promise<CampaignRecord | null>;
  /** Newest first. */
  list(page: number, perPage: number, state?: CampaignState): Promise<Page<CampaignRecord>>;
  /**
   * Write `c` when the stored version is still `c.version` (then version + 1, returned); null
   * when another writer saved it meanwhile (nothing changed).
   */
  save(c: CampaignRecord): Promise<CampaignRecord | null>;
  /** Ids of active campaigns whose next_at is at or before `now`, soonest first. */
  due(now: string, limit: number): Promise<string[]>;
}

export const CAMPAIGNS_NUL: NulRules<CampaignStore> = {
  create: REFUSE,
  get: lookup([0], () => null),
  list: REFUSE,
  save: REFUSE,
  due: REFUSE,
};
