/** What both backends share for events: the WHERE of an event query, the row decoder, the lock that orders ids. */
import { capstanError } from '@capstan/shared/errors';
import type { Dialect } from '../nodes/filters/query.js';
import { filterConditions } from '../nodes/filters/query.js';
import type { CheckedFilter } from '../nodes/types.js';
import { isoOf, toUtcIso } from '../time.js';
import { EVENT_SEVERITIES, type EventInsert, type EventQuery, type EventRecord, type EventSeverity } from './types.js';

/**
 * PostgreSQL: every transaction that writes events takes this advisory lock first (held to its
 * commit), so ids are handed out in commit order and a reader moving past id N never misses a
 * lower id committed later. SQLite has one writer at a time, which orders them already.
 */
export const EVENTS_LOCK_KEY = 0x63617073; // "caps"

/** Most types, node ids one event query may name. */
export const MAX_EVENT_QUERY_ITEMS = 1000;

export function severitiesFrom(min: EventSeverity): EventSeverity[] {
  const i = EVENT_SEVERITIES.indexOf(min);
  if (i < 0) throw capstanError('ERR_BAD_REQUEST', `severity must be one of ${EVENT_SEVERITIES.join(', ')}`);
  return EVENT_SEVERITIES.slice(i);
}

/** The WHERE of an event query over `events e` (filters already checked, compiled over `nodes n`). */
export function eventWhere(q: EventQuery, checked: CheckedFilter[], d: Dialect): string {
  const parts: string[] = [];
  if (q.after !== undefined) {
    if (!Number.isSafeInteger(q.after) || q.after < 0) throw capstanError('ERR_BAD_REQUEST', 'after must be an event id (an integer ≥ 0)');
    parts.push(`e.id > ${d.param(q.after)}`);
  }
  if (q.types && q.types.length > 0 && !q.types.includes('*')) {
    if (q.types.length > MAX_EVENT_QUERY_ITEMS) throw capstanError('ERR_BAD_REQUEST', `at most ${MAX_EVENT_QUERY_ITEMS} types`);
    parts.push(`(${q.types.map((t) => (t.endsWith('.*')
      ? `substr(e.type, 1, ${t.length - 1}) = ${d.param(t.slice(0, -1))}`
      : `e.type = ${d.param(t)}`)).join(' OR ')})`);
  }
  if (q.min_severity !== undefined && q.min_severity !== 'info') {
    parts.push(`e.severity IN (${severitiesFrom(q.min_severity).map((s) => d.param(s)).join(', ')})`);
  }
  if (q.node_ids !== undefined) {
    if (q.node_ids.length > MAX_EVENT_QUERY_ITEMS) throw capstanError('ERR_BAD_REQUEST', `at most ${MAX_EVENT_QUERY_ITEMS} node ids`);
    parts.push(q.node_ids.length === 0 ? '1 = 0' : `e.node_id IN (${q.node_ids.map((n) => d.param(n)).join(', ')})`);
  }
  if (checked.length > 0) {
    parts.push(`e.node_id IN (SELECT n.id FROM nodes n WHERE ${filterConditions(checked, d).join(' AND ')})`);
  }
  return parts.length ? `WHERE ${parts.join(' AND ')}` : '';
}

/** An event ready to write: its time in UTC, its data as JSON. */
export function eventRow(e: EventInsert): { at: string; data: string } {
  if (!EVENT_SEVERITIES.includes(e.severity)) throw capstanError('ERR_BAD_REQUEST', `event severity must be one of ${EVENT_SEVERITIES.join(', ')}`);
  return { at: toUtcIso(e.at, 'at'), data: JSON.stringify(e.data ?? {}) };
}

export function eventFromRow(r: Record<string, unknown>): EventRecord {
  return {
    id: Number(r.id),
    at: isoOf(r.at),
    type: r.type as string,
    severity: r.severity as EventSeverity,
    node_id: (r.node_id as string | null) ?? null,
    data: JSON.parse(r.data as string) as Record<string, unknown>,
  };
}
