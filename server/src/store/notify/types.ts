/**
 * Subscriptions (who is told which events, by webhook or e-mail) and their durable outbox: each
 * delivery is one message holding one or more events, written in the same transaction that moves
 * the subscription's cursor past them, then claimed, sent and marked by the dispatcher
 * (server/src/notify/). A claim is a lease: a server killed while sending leaves the delivery to
 * be claimed again when the lease ends, so every event is delivered at least once.
 */
import type { Page } from '../store.js';
import { lookup, REFUSE, type NulRules } from '../guard.js';
import type { EventSeverity } from '../events/types.js';

export type SubscriptionKind = 'webhook' | 'email';
export type DeliveryState = 'pending' | 'delivered' | 'dead';
export const DELIVERY_STATES: readonly DeliveryState[] = ['pending', 'delivered', 'dead'];

export interface SubscriptionInsert {
  id: string;
  name: string;
  kind: SubscriptionKind;
  /** The webhook's URL, or the e-mail addresses (comma-separated). */
  target: string;
  /** The webhook's signing secret, sealed (identity/seal.ts); null for e-mail. */
  secret_sealed: string | null;
  /** Event types, exact or `prefix.*`; empty: every type. */
  types: string[];
  min_severity: EventSeverity;
  /** A filter-language expression choosing the nodes; null: every node, and events about none. */
  filter: string | null;
  /** How long the first event of a message waits for others to join it. */
  group_window_ms: number;
  enabled: boolean;
}

export interface SubscriptionRecord extends SubscriptionInsert {
  /** The last event id looked at for this subscription. */
  cursor: number;
  created_at: string;
  updated_at: string;
}

export type SubscriptionPatch = Partial<Pick<SubscriptionInsert, 'name' | 'target' | 'types' | 'min_severity' | 'filter' | 'group_window_ms' | 'enabled'>>;

export interface DeliveryRecord {
  id: number;
  subscription_id: string;
  state: DeliveryState;
  event_ids: number[];
  /** Events left out of the message because their node was flapping, by node id. */
  held: Record<string, number> | null;
  created_at: string;
  attempts: number;
  /** When it is due (its group window's end, then each retry). */
  next_at: string;
  last_status: number | null;
  last_error: string | null;
  /** When it was delivered, or given up on (dead). */
  finished_at: string | null;
}

/** What the dispatcher gathered for one subscription, from its cursor to `to`. */
export interface Collected {
  subscription_id: string;
  /** The cursor it read from: nothing is written when another server moved it meanwhile. */
  from: number;
  to: number;
  event_ids: number[];
  held: Record<string, number>;
  now: string;
  window_ms: number;
  /** Most events in one message. */
  max_events: number;
}

export type DeliveryOutcome =
  | { delivered: true; status: number | null }
  | { delivered: false; status: number | null; error: string; /** null: give up (dead). */ next_at: string | null };

export interface NotifyStore {
  /** A new subscription; it starts after the newest event (it is told of what happens from now on). */
  createSubscription(s: SubscriptionInsert, at: string): Promise<SubscriptionRecord>;
  getSubscription(id: string): Promise<SubscriptionRecord | null>;
  listSubscriptions(): Promise<SubscriptionRecord[]>;
  updateSubscription(id: string, patch: SubscriptionPatch, at: string): Promise<SubscriptionRecord | null>;
  /** Its deliveries go with it. */
  deleteSubscription(id: string): Promise<boolean>;
  /**
   * Append the events to the subscription's message still waiting for its window (or start new
   * ones) and move its cursor to `to`, in one transaction; false when the cursor was no longer
   * `from` (another server collected them).
   */
  collect(c: Collected): Promise<boolean>;
  /** Due deliveries (pending, next_at ≤ now, no live claim), claimed by `claimer` until `until`. */
  claimDeliveries(claimer: string, now: string, until: string, limit: number): Promise<DeliveryRecord[]>;
  /** The outcome of a claimed delivery's attempt. */
  finishDelivery(id: number, claimer: string, outcome: DeliveryOutcome, at: string): Promise<void>;
  listDeliveries(q: { subscription_id?: string; state?: DeliveryState }, page: number, perPage: number): Promise<Page<DeliveryRecord>>;
  getDelivery(id: number): Promise<DeliveryRecord | null>;
  /** A dead delivery made pending again, due now, its attempts reset; null when unknown or not dead. */
  retryDelivery(id: number, at: string): Promise<DeliveryRecord | null>;
  /** Delete delivered and dead deliveries finished before `before`, at most `limit`. */
  deleteDeliveriesBefore(before: string, limit: number): Promise<number>;
}

/** How each method treats U+0000 (guard.ts). */
export const NOTIFY_NUL: NulRules<NotifyStore> = {
  createSubscription: REFUSE,
  getSubscription: lookup([0], () => null),
  listSubscriptions: REFUSE,
  updateSubscription: lookup([0], () => null),
  deleteSubscription: lookup([0], () => false),
  collect: REFUSE,
  claimDeliveries: REFUSE,
  finishDelivery: REFUSE,
  listDeliveries: REFUSE,
  getDelivery: REFUSE,
  retryDelivery: REFUSE,
  deleteDeliveriesBefore: REFUSE,
};
