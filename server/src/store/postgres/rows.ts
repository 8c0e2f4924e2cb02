/**
 * Postgres rows to records. node-pg hands timestamptz back as Date and bigint as string; records
 * carry ISO 8601 UTC strings and numbers, the same as the SQLite backend returns.
 */
import type { HistoryEntry, NodeRecord, RunRecord } from '../store.js';
import { rowOutcomes, type BaseCache } from '../run-codec.js';
import { NODE_COLUMNS } from '../query.js';
import { nodeFromColumns, nodeToColumns } from '../records.js';

const TIME_COLUMNS = new Set(['created_at', 'updated_at', 'accepted_at', 'last_inventory_at', 'last_run_at', 'last_contact_at', 'state_changed_at', 'conflict_at', 'clock_skew_at']);

export function iso(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  return value instanceof Date ? value.toISOString() : new Date(String(value)).toISOString();
}

export function nodeFromRow(row: Record<string, unknown>): NodeRecord {
  return nodeFromColumns(row, (v, c) => (TIME_COLUMNS.has(c) ? iso(v) : (v ?? null)), (v) => v);
}

export function runFromRow(row: Record<string, unknown>, bases: BaseCache): RunRecord {
  return {
    id: Number(row.id),
    node_id: row.node_id as string,
    started_at: row.started_at as string,
    config_id: (row.config_id as string | null) ?? null,
    complete: row.complete === true,
    report_count: Number(row.report_count),
    counts: row.counts as RunRecord['counts'],
    outcomes: rowOutcomes(row, bases),
    file_name: row.file_name as string,
    sha256: row.sha256 as string,
    received_at: iso(row.received_at)!,
  };
}

export function historyFromRow(row: Record<string, unknown>): HistoryEntry {
  return {
    id: Number(row.id),
    node_id: row.node_id as string,
    at: iso(row.at)!,
    field: row.field as HistoryEntry['field'],
    from: (row.from_value as string | null) ?? null,
    to: row.to_value as string,
    cause: row.cause as string,
  };
}

/** Positional values for writing a whole node row, in NODE_COLUMNS order. */
export function nodeValues(n: NodeRecord): unknown[] {
  const cols = nodeToColumns(n);
  return NODE_COLUMNS.map((c) => cols[c]);
}
