/**
 * The events the server emits: one catalogue, each type with the severity it usually has and what
 * its `data` holds (docs/events.md shows each with an example). A type is a stable dotted name;
 * fields are added, never renamed or removed, so a consumer written today keeps working.
 */
import type { EventInsert, EventSeverity } from '../store/store.js';

export const EVENT_TYPES = [
  'node.pending', 'node.accepted', 'node.refused', 'node.deleted', 'node.no_answer', 'node.answering', 'node.missing',
  'finding.opened', 'finding.closed', 'compliance.changed', 'drift.repaired',
  'job.finished', 'policy.deployed', 'policy.failed', 'admin.action',
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

const RANK: Record<EventSeverity, number> = { info: 0, warning: 1, error: 2 };

/** Is `s` at least `min`? */
export const atLeast = (s: EventSeverity, min: EventSeverity): boolean => RANK[s] >= RANK[min];

/** The worse of two severities. */
export const worse = (a: EventSeverity, b: EventSeverity): EventSeverity => (RANK[a] >= RANK[b] ? a : b);

/** Most items an event lists (rules moved, nodes deployed); the count says how many there were. */
export const MAX_LISTED = 20;

/**
 * Most components an event names (repairs, causes of a compliance change): enough to say what
 * happened, while each run's events stay small (the changes and findings have them all).
 */
export const MAX_NAMED = 5;

/** Longest text an event copies from a run log (a message): the finding or change has it whole. */
export const MAX_EVENT_TEXT = 512;

export const clip = (s: string): string => (s.length > MAX_EVENT_TEXT ? `${s.slice(0, MAX_EVENT_TEXT)}…` : s);

export function event(type: EventType, severity: EventSeverity, nodeId: string | null, at: string, data: Record<string, unknown>): EventInsert {
  return { type, severity, node_id: nodeId, at, data };
}

/**
 * Does `type` match one of `patterns` (exact, or `prefix.*`)? An empty list matches every type.
 */
export function typeMatches(type: string, patterns: readonly string[]): boolean {
  if (patterns.length === 0) return true;
  return patterns.some((p) => p === '*' || (p.endsWith('.*') ? type.startsWith(p.slice(0, -1)) : p === type));
}

/** A type pattern is a known type, or a known type's prefix followed by `.*`, or `*`. */
export function isTypePattern(p: string): boolean {
  if (p === '*') return true;
  if (p.endsWith('.*')) return EVENT_TYPES.some((t) => t.startsWith(p.slice(0, -1)));
  return (EVENT_TYPES as readonly string[]).includes(p);
}
