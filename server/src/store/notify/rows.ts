/** What both backends share for subscriptions and deliveries: checks and row decoders. */
import { capstanError } from '@capstan/shared/errors';
import type { RowCodec } from '../row-codec.js';
import { toUtcIso } from '../time.js';
import type { EventSeverity } from '../events/types.js';
import { DELIVERY_STATES, type Collected, type DeliveryRecord, type DeliveryState, type SubscriptionKind, type SubscriptionRecord } from './types.js';

/** Most event ids one delivery may hold (a message is about this many events at most). */
export const MAX_DELIVERY_EVENTS = 10_000;

export function checkDeliveryState(state: string | undefined): DeliveryState | undefined {
  if (state !== undefined && !DELIVERY_STATES.includes(state as DeliveryState)) {
    throw capstanError('ERR_BAD_REQUEST', `state must be one of ${DELIVERY_STATES.join(', ')}`);
  }
  return state as DeliveryState | undefined;
}

export function checkCollected(c: Collected): { now: string; due: string; max: number } {
  if (!Number.isSafeInteger(c.from) || !Number.isSafeInteger(c.to) || c.to < c.from) throw capstanError('ERR_BAD_REQUEST', 'collect needs from ≤ to');
  const max = Math.max(1, Math.min(MAX_DELIVERY_EVENTS, Math.floor(c.max_events)));
  const now = toUtcIso(c.now, 'now');
  return { now, due: new Date(Date.parse(now) + Math.max(0, c.window_ms)).toISOString(), max };
}

/** `held` counts merged: what an open message already held, plus what joins it. */
export function mergeHeld(a: Record<string, number> | null, b: Record<string, number>): Record<string, number> | null {
  const out: Record<string, number> = { ...(a ?? {}) };
  for (const [k, v] of Object.entries(b)) out[k] = (out[k] ?? 0) + v;
  return Object.keys(out).length ? out : null;
}

export function subscriptionFromRow(r: Record<string, unknown>, codec: RowCodec): SubscriptionRecord {
  return {
    id: r.id as string,
    name: r.name as string,
    kind: r.kind as SubscriptionKind,
    target: r.target as string,
    secret_sealed: (r.secret_sealed as string | null) ?? null,
    types: JSON.parse(r.types as string) as string[],
    min_severity: r.min_severity as EventSeverity,
    filter: (r.filter as string | null) ?? null,
    group_window_ms: Number(r.group_window_ms),
    enabled: codec.bool(r.enabled),
    cursor: Number(r.cursor),
    created_at: codec.time(r.created_at)!,
    updated_at: codec.time(r.updated_at)!,
  };
}

export function deliveryFromRow(r: Record<string, unknown>, codec: RowCodec): DeliveryRecord {
  return {
    id: Number(r.id),
    subscription_id: r.subscription_id as string,
    state: r.state as DeliveryState,
    event_ids: JSON.parse(r.event_ids as string) as number[],
    held: r.held === null || r.held === undefined ? null : (JSON.parse(r.held as string) as Record<string, number>),
    created_at: codec.time(r.created_at)!,
    attempts: Number(r.attempts),
    next_at: codec.time(r.next_at)!,
    last_status: r.last_status === null || r.last_status === undefined ? null : Number(r.last_status),
    last_error: (r.last_error as string | null) ?? null,
    finished_at: codec.time(r.finished_at ?? null),
  };
}

/** The columns a patch may set, and how each is written. */
export const PATCH_COLUMNS = ['name', 'target', 'types', 'min_severity', 'filter', 'group_window_ms', 'enabled'] as const;
