/** Events on SQLite: one writer at a time, so ids (AUTOINCREMENT: never reused) follow commit order. */
import type { SqliteDb } from '../sqlite/db.js';
import { sqliteDialect } from '../nodes/filters/sqlite.js';
import type { StoreRules } from '../rules.js';
import { toUtcIso } from '../time.js';
import { eventFromRow, eventRow, eventWhere } from './rows.js';
import { MAX_EVENTS_READ, type EventInsert, type EventQuery, type EventRecord, type EventStore } from './types.js';
import type { WriteOptions } from '../write-options.js';

export class SqliteEvents implements EventStore {
  constructor(private readonly db: SqliteDb, private readonly rules: StoreRules) {}

  /** Write events inside the caller's transaction; their ids. */
  write(events: readonly EventInsert[]): number[] {
    if (events.length === 0) return [];
    const ins = this.db.stmt('INSERT INTO events (at, type, severity, node_id, data) VALUES (?, ?, ?, ?, ?)');
    return events.map((e) => {
      const { at, data } = eventRow(e);
      return Number(ins.run(at, e.type, e.severity, e.node_id, data).lastInsertRowid);
    });
  }

  async insertEvents(events: EventInsert[], opts: WriteOptions = {}): Promise<number[]> {
    events.forEach(eventRow);
    return opts.grouped ? this.db.writeGrouped('insertEvents', () => this.write(events)) : this.db.write('insertEvents', () => this.write(events));
  }

  async listEvents(q: EventQuery, limit: number): Promise<EventRecord[]> {
    const checked = this.rules.filters.check({ filters: q.filters ?? [] });
    const values: unknown[] = [];
    const where = eventWhere(q, checked, sqliteDialect(this.db, values, checked, this.rules.filters.check));
    const n = Math.max(1, Math.min(MAX_EVENTS_READ, Math.floor(limit)));
    return this.db.read('listEvents', () => (this.db.stmt(`SELECT e.* FROM events e ${where} ORDER BY e.id LIMIT ${n}`)
      .all(...values) as Record<string, unknown>[]).map(eventFromRow));
  }

  async getEvents(ids: number[]): Promise<EventRecord[]> {
    if (ids.length === 0) return [];
    return this.db.read('getEvents', () => (this.db.stmt('SELECT * FROM events WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id')
      .all(JSON.stringify(ids)) as Record<string, unknown>[]).map(eventFromRow));
  }

  async lastEventId(): Promise<number> {
    return this.db.read('lastEventId', () => Number(this.db.stmt("SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)").pluck().get()));
  }

  async countNodeEvents(nodeId: string, types: string[], since: string, cap: number): Promise<number> {
    const from = toUtcIso(since, 'since');
    // The node's newest events first, stopping after `cap` of these types: a flapping node's
    // whole history is not read for each of its events.
    return this.db.read('countNodeEvents', () => Number(this.db.stmt(`SELECT count(*) FROM (SELECT at FROM events
      WHERE node_id = ? AND type IN (SELECT value FROM json_each(?)) ORDER BY id DESC LIMIT ?) WHERE at >= ?`)
      .pluck().get(nodeId, JSON.stringify(types), cap, from)));
  }

  async deleteEventsBefore(before: string, limit: number): Promise<number> {
    const b = toUtcIso(before, 'before');
    // Oldest ids first, with no index on time: ids follow time closely enough, and the walk stops
    // at the first kept event instead of reading a time index it would cost every event to keep.
    return this.db.write('deleteEventsBefore', () => this.db.stmt(`DELETE FROM events WHERE id IN (
      SELECT id FROM (SELECT id, at FROM events ORDER BY id LIMIT ?) WHERE at < ?)`).run(limit, b).changes);
  }
}
