/**
 * Subscriptions and their outbox on PostgreSQL, shared by every server on the database: a
 * subscription's row is locked while its events are collected (one server collects them), and
 * deliveries are claimed with SKIP LOCKED (each goes to one server at a time).
 */
import { capstanError } from '@capstan/shared/errors';
import { postgresRows, type PostgresDb } from '../postgres/db.js';
import { checkPaging } from '../input.js';
import type { Page } from '../store.js';
import { toUtcIso } from '../time.js';
import { checkCollected, checkDeliveryState, deliveryFromRow, mergeHeld, PATCH_COLUMNS, subscriptionFromRow } from './rows.js';
import type {
  Collected, DeliveryOutcome, DeliveryRecord, DeliveryState, NotifyStore, SubscriptionInsert, SubscriptionPatch, SubscriptionRecord,
} from './types.js';

const sub = (r: Record<string, unknown>) => subscriptionFromRow(r, postgresRows);
const delivery = (r: Record<string, unknown>) => deliveryFromRow(r, postgresRows);

export class PostgresNotify implements NotifyStore {
  constructor(private readonly db: PostgresDb) {}

  async createSubscription(s: SubscriptionInsert, at: string): Promise<SubscriptionRecord> {
    const when = toUtcIso(at, 'at');
    const { rows } = await this.db.query('createSubscription', this.db.pool, {
      text: `INSERT INTO subscriptions (id, name, kind, target, secret_sealed, types, min_severity, filter, group_window_ms, enabled, cursor, created_at, updated_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, (SELECT coalesce(max(id), 0) FROM events), $11, $11)
        ON CONFLICT (id) DO NOTHING RETURNING *`,
      values: [s.id, s.name, s.kind, s.target, s.secret_sealed, JSON.stringify(s.types), s.min_severity, s.filter, s.group_window_ms, s.enabled, when],
    });
    if (!rows[0]) throw capstanError('ERR_CONFLICT', `subscription ${s.id} exists`);
    return sub(rows[0]);
  }

  async getSubscription(id: string): Promise<SubscriptionRecord | null> {
    const { rows } = await this.db.query('getSubscription', this.db.pool, { text: 'SELECT * FROM subscriptions WHERE id = $1', values: [id] });
    return rows[0] ? sub(rows[0]) : null;
  }

  async listSubscriptions(): Promise<SubscriptionRecord[]> {
    const { rows } = await this.db.query('listSubscriptions', this.db.pool, { text: 'SELECT * FROM subscriptions ORDER BY id COLLATE "C"', values: [] });
    return rows.map(sub);
  }

  async updateSubscription(id: string, patch: SubscriptionPatch, at: string): Promise<SubscriptionRecord | null> {
    const values: unknown[] = [id, toUtcIso(at, 'at')];
    const sets = ['updated_at = $2'];
    for (const c of PATCH_COLUMNS) {
      const v = patch[c];
      if (v === undefined) continue;
      values.push(c === 'types' ? JSON.stringify(v) : v);
      sets.push(`${c} = $${values.length}`);
    }
    const { rows } = await this.db.query('updateSubscription', this.db.pool, { text: `UPDATE subscriptions SET ${sets.join(', ')} WHERE id = $1 RETURNING *`, values });
    return rows[0] ? sub(rows[0]) : null;
  }

  async deleteSubscription(id: string): Promise<boolean> {
    const { rowCount } = await this.db.query('deleteSubscription', this.db.pool, { text: 'DELETE FROM subscriptions WHERE id = $1', values: [id] });
    return (rowCount ?? 0) > 0;
  }

  async collect(c: Collected): Promise<boolean> {
    const { now, due, max } = checkCollected(c);
    return this.db.tx('collect', async (cx) => {
      const what = 'collect';
      const cur = await this.db.query<{ cursor: string }>(what, cx, { text: 'SELECT cursor FROM subscriptions WHERE id = $1 FOR UPDATE', values: [c.subscription_id] });
      if (!cur.rows[0] || Number(cur.rows[0].cursor) !== c.from) return false;
      let ids = c.event_ids;
      let held: Record<string, number> | null = Object.keys(c.held).length ? c.held : null;
      if (ids.length > 0 || held) {
        const open = await this.db.query<{ id: string; event_ids: string; held: string | null }>(what, cx, {
          text: `SELECT id, event_ids, held FROM deliveries WHERE subscription_id = $1 AND state = 'pending' AND attempts = 0
            AND claimed_by IS NULL AND next_at > $2 ORDER BY id DESC LIMIT 1 FOR UPDATE`,
          values: [c.subscription_id, now],
        });
        const o = open.rows[0];
        if (o) {
          const have = JSON.parse(o.event_ids) as number[];
          const room = Math.max(0, max - have.length);
          const merged = mergeHeld(o.held === null ? null : JSON.parse(o.held) as Record<string, number>, held ?? {});
          await this.db.query(what, cx, {
            text: 'UPDATE deliveries SET event_ids = $2, held = $3 WHERE id = $1',
            values: [o.id, JSON.stringify([...have, ...ids.slice(0, room)]), merged === null ? null : JSON.stringify(merged)],
          });
          ids = ids.slice(room);
          held = null;
        }
        for (let i = 0; i < ids.length || held; i += max) {
          await this.db.query(what, cx, {
            text: `INSERT INTO deliveries (subscription_id, state, event_ids, held, created_at, next_at) VALUES ($1, 'pending', $2, $3, $4, $5)`,
            values: [c.subscription_id, JSON.stringify(ids.slice(i, i + max)), held === null ? null : JSON.stringify(held), now, due],
          });
          held = null;
        }
      }
      await this.db.query(what, cx, { text: 'UPDATE subscriptions SET cursor = $2 WHERE id = $1', values: [c.subscription_id, c.to] });
      return true;
    });
  }

  async claimDeliveries(claimer: string, now: string, until: string, limit: number): Promise<DeliveryRecord[]> {
    const { rows } = await this.db.query('claimDeliveries', this.db.pool, {
      text: `UPDATE deliveries SET claimed_by = $1, claimed_until = $2
        WHERE id IN (SELECT id FROM deliveries WHERE state = 'pending' AND next_at <= $3 AND (claimed_until IS NULL OR claimed_until <= $3)
          ORDER BY next_at, id LIMIT $4 FOR UPDATE SKIP LOCKED) RETURNING *`,
      values: [claimer, toUtcIso(until, 'until'), toUtcIso(now, 'now'), limit],
    });
    return rows.map(delivery).sort((a, b) => a.id - b.id);
  }

  async finishDelivery(id: number, claimer: string, o: DeliveryOutcome, at: string): Promise<void> {
    const when = toUtcIso(at, 'at');
    if (o.delivered) {
      await this.db.query('finishDelivery', this.db.pool, {
        text: `UPDATE deliveries SET state = 'delivered', finished_at = $2, attempts = attempts + 1, last_status = $3, last_error = NULL,
          claimed_by = NULL, claimed_until = NULL WHERE id = $1 AND state = 'pending'`,
        values: [id, when, o.status],
      });
      return;
    }
    const next = o.next_at === null ? null : toUtcIso(o.next_at, 'next_at');
    await this.db.query('finishDelivery', this.db.pool, {
      text: `UPDATE deliveries SET attempts = attempts + 1, last_status = $3, last_error = $4, claimed_by = NULL, claimed_until = NULL,
          next_at = coalesce($5::timestamptz, next_at), state = CASE WHEN $5::timestamptz IS NULL THEN 'dead' ELSE 'pending' END,
          finished_at = CASE WHEN $5::timestamptz IS NULL THEN $2::timestamptz END
        WHERE id = $1 AND claimed_by = $6 AND state = 'pending'`,
      values: [id, when, o.status, o.error.slice(0, 1024), next, claimer],
    });
  }

  async listDeliveries(q: { subscription_id?: string; state?: DeliveryState }, page: number, perPage: number): Promise<Page<DeliveryRecord>> {
    const { limit, offset } = checkPaging(page, perPage);
    const state = checkDeliveryState(q.state);
    const where: string[] = [];
    const values: unknown[] = [];
    if (q.subscription_id !== undefined) where.push(`subscription_id = $${values.push(q.subscription_id)}`);
    if (state !== undefined) where.push(`state = $${values.push(state)}`);
    const w = where.length ? `WHERE ${where.join(' AND ')}` : '';
    const total = await this.db.query('listDeliveries', this.db.pool, { text: `SELECT count(*) AS n FROM deliveries ${w}`, values });
    const { rows } = await this.db.query('listDeliveries', this.db.pool, {
      text: `SELECT * FROM deliveries ${w} ORDER BY id DESC LIMIT $${values.length + 1} OFFSET $${values.length + 2}`, values: [...values, limit, offset],
    });
    return { total: Number(total.rows[0]!.n), data: rows.map(delivery) };
  }

  async getDelivery(id: number): Promise<DeliveryRecord | null> {
    if (!Number.isSafeInteger(id)) return null;
    const { rows } = await this.db.query('getDelivery', this.db.pool, { text: 'SELECT * FROM deliveries WHERE id = $1', values: [id] });
    return rows[0] ? delivery(rows[0]) : null;
  }

  async retryDelivery(id: number, at: string): Promise<DeliveryRecord | null> {
    if (!Number.isSafeInteger(id)) return null;
    const { rows } = await this.db.query('retryDelivery', this.db.pool, {
      text: `UPDATE deliveries SET state = 'pending', attempts = 0, next_at = $2, finished_at = NULL, claimed_by = NULL, claimed_until = NULL
        WHERE id = $1 AND state = 'dead' RETURNING *`,
      values: [id, toUtcIso(at, 'at')],
    });
    return rows[0] ? delivery(rows[0]) : null;
  }

  async deleteDeliveriesBefore(before: string, limit: number): Promise<number> {
    const { rowCount } = await this.db.query('deleteDeliveriesBefore', this.db.pool, {
      text: `DELETE FROM deliveries WHERE id IN (SELECT id FROM deliveries WHERE state <> 'pending' AND finished_at < $1 LIMIT $2)`,
      values: [toUtcIso(before, 'before'), limit],
    });
    return rowCount ?? 0;
  }
}
