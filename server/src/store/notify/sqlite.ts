/** Subscriptions and their outbox on SQLite (one writer: a claim needs no row locks). */
import { capstanError } from '@capstan/shared/errors';
import type { SqliteDb } from '../sqlite/db.js';
import { sqliteRows } from '../sqlite/db.js';
import { checkPaging } from '../input.js';
import type { Page } from '../store.js';
import { toUtcIso } from '../time.js';
import { checkCollected, checkDeliveryState, deliveryFromRow, mergeHeld, PATCH_COLUMNS, subscriptionFromRow } from './rows.js';
import type {
  Collected, DeliveryOutcome, DeliveryRecord, DeliveryState, NotifyStore, SubscriptionInsert, SubscriptionPatch, SubscriptionRecord,
} from './types.js';

const sub = (r: unknown) => subscriptionFromRow(r as Record<string, unknown>, sqliteRows);
const delivery = (r: unknown) => deliveryFromRow(r as Record<string, unknown>, sqliteRows);

export class SqliteNotify implements NotifyStore {
  constructor(private readonly db: SqliteDb) {}

  async createSubscription(s: SubscriptionInsert, at: string): Promise<SubscriptionRecord> {
    const when = toUtcIso(at, 'at');
    return this.db.write('createSubscription', () => {
      if (this.db.stmt('SELECT 1 FROM subscriptions WHERE id = ?').get(s.id)) throw capstanError('ERR_CONFLICT', `subscription ${s.id} exists`);
      const cursor = Number(this.db.stmt("SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)").pluck().get());
      this.db.stmt(`INSERT INTO subscriptions (id, name, kind, target, secret_sealed, types, min_severity, filter, group_window_ms, enabled, cursor,
          created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
        .run(s.id, s.name, s.kind, s.target, s.secret_sealed, JSON.stringify(s.types), s.min_severity, s.filter, s.group_window_ms, s.enabled ? 1 : 0,
          cursor, when, when);
      return sub(this.db.stmt('SELECT * FROM subscriptions WHERE id = ?').get(s.id));
    });
  }

  async getSubscription(id: string): Promise<SubscriptionRecord | null> {
    const r = this.db.read('getSubscription', () => this.db.stmt('SELECT * FROM subscriptions WHERE id = ?').get(id));
    return r ? sub(r) : null;
  }

  async listSubscriptions(): Promise<SubscriptionRecord[]> {
    return this.db.read('listSubscriptions', () => this.db.stmt('SELECT * FROM subscriptions ORDER BY id').all().map(sub));
  }

  async updateSubscription(id: string, patch: SubscriptionPatch, at: string): Promise<SubscriptionRecord | null> {
    const when = toUtcIso(at, 'at');
    const sets: string[] = [];
    const values: unknown[] = [];
    for (const c of PATCH_COLUMNS) {
      const v = patch[c];
      if (v === undefined) continue;
      sets.push(`${c} = ?`);
      values.push(c === 'types' ? JSON.stringify(v) : c === 'enabled' ? (v ? 1 : 0) : v);
    }
    return this.db.write('updateSubscription', () => {
      if (this.db.prepare(`UPDATE subscriptions SET ${[...sets, 'updated_at = ?'].join(', ')} WHERE id = ?`).run(...values, when, id).changes === 0) return null;
      return sub(this.db.stmt('SELECT * FROM subscriptions WHERE id = ?').get(id));
    });
  }

  async deleteSubscription(id: string): Promise<boolean> {
    return this.db.write('deleteSubscription', () => this.db.stmt('DELETE FROM subscriptions WHERE id = ?').run(id).changes > 0);
  }

  async collect(c: Collected): Promise<boolean> {
    const { now, due, max } = checkCollected(c);
    return this.db.write('collect', () => {
      const cursor = this.db.stmt('SELECT cursor FROM subscriptions WHERE id = ?').pluck().get(c.subscription_id) as number | undefined;
      if (cursor === undefined || Number(cursor) !== c.from) return false;
      let ids = c.event_ids;
      let held: Record<string, number> | null = Object.keys(c.held).length ? c.held : null;
      if (ids.length > 0 || held) {
        // The message still waiting for its window takes what it has room for.
        const open = this.db.stmt(`SELECT id, event_ids, held FROM deliveries WHERE subscription_id = ? AND state = 'pending' AND attempts = 0
          AND claimed_by IS NULL AND next_at > ? ORDER BY id DESC LIMIT 1`).get(c.subscription_id, now) as { id: number; event_ids: string; held: string | null } | undefined;
        if (open) {
          const have = JSON.parse(open.event_ids) as number[];
          const room = Math.max(0, max - have.length);
          const merged = mergeHeld(open.held === null ? null : JSON.parse(open.held) as Record<string, number>, held ?? {});
          this.db.stmt('UPDATE deliveries SET event_ids = ?, held = ? WHERE id = ?')
            .run(JSON.stringify([...have, ...ids.slice(0, room)]), merged === null ? null : JSON.stringify(merged), open.id);
          ids = ids.slice(room);
          held = null;
        }
        const ins = this.db.stmt(`INSERT INTO deliveries (subscription_id, state, event_ids, held, created_at, next_at) VALUES (?, 'pending', ?, ?, ?, ?)`);
        for (let i = 0; i < ids.length || held; i += max) {
          ins.run(c.subscription_id, JSON.stringify(ids.slice(i, i + max)), held === null ? null : JSON.stringify(held), now, due);
          held = null;
        }
      }
      this.db.stmt('UPDATE subscriptions SET cursor = ? WHERE id = ?').run(c.to, c.subscription_id);
      return true;
    });
  }

  async claimDeliveries(claimer: string, now: string, until: string, limit: number): Promise<DeliveryRecord[]> {
    const n = toUtcIso(now, 'now');
    const u = toUtcIso(until, 'until');
    return this.db.write('claimDeliveries', () => this.db.stmt(`UPDATE deliveries SET claimed_by = ?, claimed_until = ?
      WHERE id IN (SELECT id FROM deliveries WHERE state = 'pending' AND next_at <= ? AND (claimed_until IS NULL OR claimed_until <= ?)
        ORDER BY next_at, id LIMIT ?) RETURNING *`).all(claimer, u, n, n, limit).map(delivery));
  }

  async finishDelivery(id: number, claimer: string, o: DeliveryOutcome, at: string): Promise<void> {
    const when = toUtcIso(at, 'at');
    this.db.write('finishDelivery', () => {
      if (o.delivered) {
        // Delivered stands whoever holds the claim now: the receiver has it.
        this.db.stmt(`UPDATE deliveries SET state = 'delivered', finished_at = ?, attempts = attempts + 1, last_status = ?, last_error = NULL,
          claimed_by = NULL, claimed_until = NULL WHERE id = ? AND state = 'pending'`).run(when, o.status, id);
        return;
      }
      const next = o.next_at === null ? null : toUtcIso(o.next_at, 'next_at');
      this.db.stmt(`UPDATE deliveries SET attempts = attempts + 1, last_status = ?, last_error = ?, claimed_by = NULL, claimed_until = NULL,
          next_at = coalesce(?, next_at), state = CASE WHEN ? IS NULL THEN 'dead' ELSE 'pending' END, finished_at = CASE WHEN ? IS NULL THEN ? END
        WHERE id = ? AND claimed_by = ? AND state = 'pending'`).run(o.status, o.error.slice(0, 1024), next, next, next, when, id, claimer);
    });
  }

  async listDeliveries(q: { subscription_id?: string; state?: DeliveryState }, page: number, perPage: number): Promise<Page<DeliveryRecord>> {
    const { limit, offset } = checkPaging(page, perPage);
    const state = checkDeliveryState(q.state);
    const where: string[] = [];
    const values: unknown[] = [];
    if (q.subscription_id !== undefined) {
      where.push('subscription_id = ?');
      values.push(q.subscription_id);
    }
    if (state !== undefined) {
      where.push('state = ?');
      values.push(state);
    }
    const w = where.length ? `WHERE ${where.join(' AND ')}` : '';
    return this.db.read('listDeliveries', () => ({
      total: Number(this.db.stmt(`SELECT count(*) FROM deliveries ${w}`).pluck().get(...values)),
      data: this.db.stmt(`SELECT * FROM deliveries ${w} ORDER BY id DESC LIMIT ? OFFSET ?`).all(...values, limit, offset).map(delivery),
    }));
  }

  async getDelivery(id: number): Promise<DeliveryRecord | null> {
    if (!Number.isSafeInteger(id)) return null;
    const r = this.db.read('getDelivery', () => this.db.stmt('SELECT * FROM deliveries WHERE id = ?').get(id));
    return r ? delivery(r) : null;
  }

  async retryDelivery(id: number, at: string): Promise<DeliveryRecord | null> {
    if (!Number.isSafeInteger(id)) return null;
    const when = toUtcIso(at, 'at');
    const r = this.db.write('retryDelivery', () => this.db.stmt(`UPDATE deliveries SET state = 'pending', attempts = 0, next_at = ?, finished_at = NULL,
      claimed_by = NULL, claimed_until = NULL WHERE id = ? AND state = 'dead' RETURNING *`).get(when, id));
    return r ? delivery(r) : null;
  }

  async deleteDeliveriesBefore(before: string, limit: number): Promise<number> {
    const b = toUtcIso(before, 'before');
    return this.db.write('deleteDeliveriesBefore', () => this.db.stmt(`DELETE FROM deliveries WHERE id IN (
      SELECT id FROM deliveries WHERE state <> 'pending' AND finished_at < ? LIMIT ?)`).run(b, limit).changes);
  }
}
