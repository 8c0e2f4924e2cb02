/**
 * The door for subscription changes (API and command line alike): each is checked here, its
 * webhook secret made and sealed (identity/seal.ts: the database never holds it in clear), and
 * recorded in the audit log with who made it. The secret is shown once, in the answer that made it.
 */
import { randomBytes } from 'node:crypto';
import { capstanError } from '@capstan/shared/errors';
import { parseFilter } from '@capstan/shared/filter/parse';
import type { Actor } from '../audit/actor.js';
import type { AuditLog } from '../audit/log.js';
import type { KeySealer } from '../identity/seal.js';
import { EVENT_SEVERITIES, type DeliveryRecord, type EventSeverity, type Store, type SubscriptionInsert, type SubscriptionPatch, type SubscriptionRecord } from '../store/store.js';
import { isTypePattern } from '../events/types.js';

export const secretKid = (id: string) => `subscription:${id}`;

/** Limits on what a subscription holds. */
export const SUBSCRIPTION_LIMITS = { maxTypes: 50, maxAddresses: 20, maxUrl: 2048, minSecret: 16, maxSecret: 256, maxWindowMs: 3_600_000 } as const;

const ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const ADDRESS = /^[^\s@<>,;"]+@[^\s@<>,;"]+\.[^\s@<>,;"]+$/;

const bad = (m: string): never => {
  throw capstanError('ERR_BAD_REQUEST', m);
};
const target = (m: string): never => {
  throw capstanError('ERR_SUBSCRIPTION_TARGET', m);
};

/** What a subscription looks like to admins: its secret never. */
export type SubscriptionView = Omit<SubscriptionRecord, 'secret_sealed'> & { has_secret: boolean };

export const subscriptionView = ({ secret_sealed, ...rest }: SubscriptionRecord): SubscriptionView => ({ ...rest, has_secret: secret_sealed !== null });

export interface SubscriptionRequest {
  id?: unknown; name?: unknown; kind?: unknown; url?: unknown; to?: unknown; secret?: unknown;
  types?: unknown; min_severity?: unknown; filter?: unknown; group_window_ms?: unknown; enabled?: unknown;
}

function checkUrl(v: unknown): string {
  if (typeof v !== 'string' || v.length > SUBSCRIPTION_LIMITS.maxUrl) return target(`url must be an http or https URL of at most ${SUBSCRIPTION_LIMITS.maxUrl} characters`);
  let u: URL;
  try {
    u = new URL(v);
  } catch {
    return target('url is not a URL');
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') target('url must be http or https');
  if (u.username || u.password) target('url must not carry a user or password (the signature authenticates the server)');
  return u.toString();
}

function checkAddresses(v: unknown): string {
  const list = (Array.isArray(v) ? v : typeof v === 'string' ? v.split(',') : target('to must be an address or a list of addresses'))
    .map((a) => (typeof a === 'string' ? a.trim() : target('to must hold strings')));
  if (list.length === 0 || list.length > SUBSCRIPTION_LIMITS.maxAddresses) target(`to must hold 1 to ${SUBSCRIPTION_LIMITS.maxAddresses} addresses`);
  for (const a of list) if (a.length > 254 || !ADDRESS.test(a)) target(`${JSON.stringify(a)} is not an e-mail address`);
  return list.join(', ');
}

function checkTypes(v: unknown): string[] {
  if (v === undefined) return [];
  if (!Array.isArray(v) || v.length > SUBSCRIPTION_LIMITS.maxTypes) return bad(`types must be a list of at most ${SUBSCRIPTION_LIMITS.maxTypes} event types`);
  for (const t of v) if (typeof t !== 'string' || !isTypePattern(t)) bad(`${JSON.stringify(t)} is not an event type (docs/events.md), nor a type prefix such as node.*`);
  return [...new Set(v as string[])];
}

function checkSeverity(v: unknown): EventSeverity {
  if (v === undefined) return 'info';
  if (typeof v !== 'string' || !EVENT_SEVERITIES.includes(v as EventSeverity)) return bad(`min_severity must be one of ${EVENT_SEVERITIES.join(', ')}`);
  return v as EventSeverity;
}

function checkFilter(v: unknown): string | null {
  if (v === undefined || v === null || v === '') return null;
  if (typeof v !== 'string') return bad('filter must be a filter expression (docs/filters.md)');
  parseFilter(v);
  return v;
}

function checkWindow(v: unknown, dflt: number): number {
  if (v === undefined) return dflt;
  if (!Number.isSafeInteger(v) || (v as number) < 0 || (v as number) > SUBSCRIPTION_LIMITS.maxWindowMs) bad(`group_window_ms must be an integer from 0 to ${SUBSCRIPTION_LIMITS.maxWindowMs}`);
  return v as number;
}

export interface SubscriptionServiceDeps {
  store: Pick<Store, 'notify'>;
  sealer: KeySealer;
  audit?: AuditLog;
  /** E-mail subscriptions need an SMTP host. */
  smtpConfigured: boolean;
  defaultWindowMs: number;
  now?: () => Date;
}

export class SubscriptionService {
  private readonly now: () => Date;

  constructor(private readonly deps: SubscriptionServiceDeps) {
    this.now = deps.now ?? (() => new Date());
  }

  /** A new subscription; a webhook's answer carries its secret (made here unless given), once. */
  async create(req: SubscriptionRequest, actor: Actor): Promise<SubscriptionView & { secret?: string }> {
    if (typeof req.id !== 'string' || !ID.test(req.id)) bad('id must be 1 to 128 letters, digits, dots, dashes or underscores');
    const id = req.id as string;
    const kind = req.kind;
    if (kind !== 'webhook' && kind !== 'email') return bad('kind must be webhook or email');
    let secret: string | undefined;
    let dest: string;
    if (kind === 'webhook') {
      if (req.to !== undefined) bad('a webhook takes url, not to');
      dest = checkUrl(req.url);
      if (req.secret !== undefined && (typeof req.secret !== 'string' || req.secret.length < SUBSCRIPTION_LIMITS.minSecret || req.secret.length > SUBSCRIPTION_LIMITS.maxSecret)) {
        bad(`secret must be ${SUBSCRIPTION_LIMITS.minSecret} to ${SUBSCRIPTION_LIMITS.maxSecret} characters`);
      }
      secret = (req.secret as string | undefined) ?? randomBytes(32).toString('base64url');
    } else {
      if (req.url !== undefined || req.secret !== undefined) bad('an e-mail subscription takes to, not url or secret');
      if (!this.deps.smtpConfigured) target('e-mail subscriptions need [smtp] host in the server\'s configuration');
      dest = checkAddresses(req.to);
    }
    if (req.name !== undefined && (typeof req.name !== 'string' || req.name.length > 255)) bad('name must be a string of at most 255 characters');
    if (req.enabled !== undefined && typeof req.enabled !== 'boolean') bad('enabled must be true or false');
    const insert: SubscriptionInsert = {
      id, name: (req.name as string | undefined) ?? id, kind, target: dest,
      secret_sealed: secret === undefined ? null : this.deps.sealer.seal(secretKid(id), secret),
      types: checkTypes(req.types), min_severity: checkSeverity(req.min_severity), filter: checkFilter(req.filter),
      group_window_ms: checkWindow(req.group_window_ms, this.deps.defaultWindowMs), enabled: (req.enabled as boolean | undefined) ?? true,
    };
    const created = await this.deps.store.notify.createSubscription(insert, this.now().toISOString());
    const view = subscriptionView(created);
    await this.deps.audit?.record(actor, { action: 'subscription.create', target: id, before: null, after: view });
    return { ...view, ...(secret !== undefined && { secret }) };
  }

  async update(id: string, req: SubscriptionRequest, actor: Actor): Promise<SubscriptionView> {
    const before = await this.deps.store.notify.getSubscription(id);
    if (!before) throw capstanError('ERR_NOT_FOUND', `no subscription ${id}`);
    for (const k of ['id', 'kind', 'secret'] as const) if (req[k] !== undefined) bad(`${k} cannot be changed (make a new subscription)`);
    const patch: SubscriptionPatch = {};
    if (req.name !== undefined) patch.name = typeof req.name === 'string' && req.name.length <= 255 ? req.name : bad('name must be a string of at most 255 characters');
    if (req.url !== undefined) patch.target = before.kind === 'webhook' ? checkUrl(req.url) : bad('an e-mail subscription takes to, not url');
    if (req.to !== undefined) patch.target = before.kind === 'email' ? checkAddresses(req.to) : bad('a webhook takes url, not to');
    if (req.types !== undefined) patch.types = checkTypes(req.types);
    if (req.min_severity !== undefined) patch.min_severity = checkSeverity(req.min_severity);
    if (req.filter !== undefined) patch.filter = checkFilter(req.filter);
    if (req.group_window_ms !== undefined) patch.group_window_ms = checkWindow(req.group_window_ms, 0);
    if (req.enabled !== undefined) patch.enabled = typeof req.enabled === 'boolean' ? req.enabled : bad('enabled must be true or false');
    const after = await this.deps.store.notify.updateSubscription(id, patch, this.now().toISOString());
    if (!after) throw capstanError('ERR_NOT_FOUND', `no subscription ${id}`);
    await this.deps.audit?.record(actor, { action: 'subscription.update', target: id, before: subscriptionView(before), after: subscriptionView(after) });
    return subscriptionView(after);
  }

  async remove(id: string, actor: Actor): Promise<void> {
    const before = await this.deps.store.notify.getSubscription(id);
    if (!before || !(await this.deps.store.notify.deleteSubscription(id))) throw capstanError('ERR_NOT_FOUND', `no subscription ${id}`);
    await this.deps.audit?.record(actor, { action: 'subscription.delete', target: id, before: subscriptionView(before), after: null });
  }

  /** A dead message sent again (from the dead-letter list): due now, its attempts counted afresh. */
  async retry(deliveryId: number, actor: Actor): Promise<DeliveryRecord> {
    const before = await this.deps.store.notify.getDelivery(deliveryId);
    if (!before) throw capstanError('ERR_NOT_FOUND', `no delivery ${deliveryId}`);
    const after = await this.deps.store.notify.retryDelivery(deliveryId, this.now().toISOString());
    if (!after) throw capstanError('ERR_CONFLICT', `delivery ${deliveryId} is ${before.state}: only a dead one is retried`);
    await this.deps.audit?.record(actor, { action: 'delivery.retry', target: String(deliveryId), before, after });
    return after;
  }
}
