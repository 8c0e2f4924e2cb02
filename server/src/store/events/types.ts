/**
 * The event stream as stored: one row per event, ids in commit order (a reader that has seen id N
 * never later meets an id below N), read by id (`after`), kept `retention.events`. What the
 * events say is the domain's (server/src/events/): the store writes the rows it is handed, in the
 * transaction of the change they tell of when there is one (a run, a job's last task).
 */
import { lookup, REFUSE, type NulRules } from '../guard.js';
import type { NodeFilter } from '../nodes/types.js';
import type { WriteOptions } from '../write-options.js';

export const EVENT_SEVERITIES = ['info', 'warning', 'error'] as const;
export type EventSeverity = (typeof EVENT_SEVERITIES)[number];

/** An event to store. */
export interface EventInsert {
  /** When it happened, RFC 3339 (stored as UTC). */
  at: string;
  /** A stable dotted name (docs/events.md lists them). */
  type: string;
  severity: EventSeverity;
  /** The node it is about; null for events about no single node (a job, a deployment). */
  node_id: string | null;
  /** The event's own fields (docs/events.md). */
  data: Record<string, unknown>;
}

export interface EventRecord extends EventInsert {
  id: number;
}

/** Which events to read: every field narrows. */
export interface EventQuery {
  /** Only ids above this one. */
  after?: number;
  /** Event types, exact (`finding.opened`) or a prefix ending in `.*` (`node.*`). */
  types?: string[];
  min_severity?: EventSeverity;
  node_ids?: string[];
  /** Node filters (the filter language): only events about a node they select. */
  filters?: NodeFilter[];
}

/** Most events one read returns. */
export const MAX_EVENTS_READ = 1000;

export interface EventStore {
  /** Store events in a transaction of their own; their ids, in order. */
  insertEvents(events: EventInsert[], opts?: WriteOptions): Promise<number[]>;
  /** Events matching `q`, oldest first, at most `limit` (≤ MAX_EVENTS_READ). */
  listEvents(q: EventQuery, limit: number): Promise<EventRecord[]>;
  /** These events (those still kept), oldest first. */
  getEvents(ids: number[]): Promise<EventRecord[]>;
  /** The highest id stored so far (0: none yet). */
  lastEventId(): Promise<number>;
  /** How many events of these types a node had since `since`, counting at most `cap` (flap damping). */
  countNodeEvents(nodeId: string, types: string[], since: string, cap: number): Promise<number>;
  /** Delete events older than `before`, oldest first, at most `limit`. */
  deleteEventsBefore(before: string, limit: number): Promise<number>;
}

/** How each event method treats U+0000 (guard.ts): what an event carries from a run log is cleaned by the domain. */
export const EVENTS_NUL: NulRules<EventStore> = {
  insertEvents: REFUSE,
  listEvents: REFUSE,
  getEvents: REFUSE,
  lastEventId: REFUSE,
  countNodeEvents: lookup([0], () => 0),
  deleteEventsBefore: REFUSE,
};
