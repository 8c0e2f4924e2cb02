/**
 * Events on PostgreSQL. Ids come from a sequence, which hands them out in the order transactions
 * ask, not the order they commit: a reader could move past id 12 before the transaction holding
 * id 11 commits. So every writer takes one advisory lock in the statement that inserts, held to
 * its commit; a transaction writes its events last (the ingest's at the end of its batch), so the
 * lock is held for a commit, not for the batch.
 */
import type pg from 'pg';
import type { PostgresDb } from '../postgres/db.js';
import { postgresDialect } from '../nodes/filters/postgres.js';
import type { StoreRules } from '../rules.js';
import { toUtcIso } from '../time.js';
import { EVENTS_LOCK_KEY, eventFromRow, eventRow, eventWhere } from './rows.js';
import { MAX_EVENTS_READ, type EventInsert, type EventQuery, type EventRecord, type EventStore } from './types.js';
import type { WriteOptions } from '../write-options.js';

export class PostgresEvents implements EventStore {
  constructor(private readonly db: PostgresDb, private readonly rules: StoreRules) {}

  /** Write events as the last thing of the caller's transaction on `c`; their ids. */
  async write(c: pg.PoolClient, events: readonly EventInsert[]): Promise<number[]> {
    if (events.length === 0) return [];
    const rows = events.map(eventRow);
    // The lock and the insert in one statement: the lock is held from here to the commit, and
    // a round trip to a busy client between the two would hold it the longer.
    const { rows: ids } = await this.db.query<{ id: string }>('writeEvents', c, {
      name: 'events_insert',
      text: `WITH lock AS MATERIALIZED (SELECT pg_advisory_xact_lock($6))
        INSERT INTO events (at, type, severity, node_id, data)
        SELECT e.* FROM lock, unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[]) e RETURNING id`,
      values: [rows.map((r) => r.at), events.map((e) => e.type), events.map((e) => e.severity), events.map((e) => e.node_id), rows.map((r) => r.data), EVENTS_LOCK_KEY],
    });
    return ids.map((r) => Number(r.id)).sort((a, b) => a - b);
  }

  async insertEvents(events: EventInsert[], _opts?: WriteOptions): Promise<number[]> {
    events.forEach(eventRow);
    return this.db.tx('insertEvents', (c) => this.write(c, events));
  }

  async listEvents(q: EventQuery, limit: number): Promise<EventRecord[]> {
    const checked = this.rules.filters.check({ filters: q.filters ?? [] });
    const values: unknown[] = [];
    const where = eventWhere(q, checked, await postgresDialect(this.db, values, checked, this.rules.filters.check));
    const n = Math.max(1, Math.min(MAX_EVENTS_READ, Math.floor(limit)));
    const { rows } = await this.db.query('listEvents', this.db.pool, { text: `SELECT e.* FROM events e ${where} ORDER BY e.id LIMIT ${n}`, values });
    return rows.map(eventFromRow);
  }

  async getEvents(ids: number[]): Promise<EventRecord[]> {
    if (ids.length === 0) return [];
    const { rows } = await this.db.query('getEvents', this.db.pool, { text: 'SELECT * FROM events WHERE id = ANY($1::bigint[]) ORDER BY id', values: [ids] });
    return rows.map(eventFromRow);
  }

  async lastEventId(): Promise<number> {
    const { rows } = await this.db.query('lastEventId', this.db.pool, { text: 'SELECT coalesce(max(id), 0) AS id FROM events', values: [] });
    return Number(rows[0]!.id);
  }

  async countNodeEvents(nodeId: string, types: string[], since: string, cap: number): Promise<number> {
    const { rows } = await this.db.query('countNodeEvents', this.db.pool, {
      text: `SELECT count(*) AS n FROM (SELECT at FROM events WHERE node_id = $1 AND type = ANY($2::text[]) ORDER BY id DESC LIMIT $3) e WHERE at >= $4`,
      values: [nodeId, types, cap, toUtcIso(since, 'since')],
    });
    return Number(rows[0]!.n);
  }

  async deleteEventsBefore(before: string, limit: number): Promise<number> {
    const { rowCount } = await this.db.query('deleteEventsBefore', this.db.pool, {
      text: `DELETE FROM events WHERE id IN (SELECT id FROM (SELECT id, at FROM events ORDER BY id LIMIT $1) e WHERE at < $2)`,
      values: [limit, toUtcIso(before, 'before')],
    });
    return rowCount ?? 0;
  }
}
