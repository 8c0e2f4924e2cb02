/** SQLite rows to records. SQLite keeps times as ISO text already; JSON and booleans need decoding. */
import type { HistoryEntry, NodeRecord, RunRecord } from '../store.js';
import { rowOutcomes, type BaseCache } from '../run-codec.js';
import { NODE_COLUMNS } from '../query.js';
import { nodeFromColumns, nodeToColumns } from '../records.js';

export function nodeFromRow(row: Record<string, unknown>): NodeRecord {
  return nodeFromColumns(row, (v) => (v ?? null), (v) => JSON.parse(v as string));
}

export function runFromRow(row: Record<string, unknown>, bases: BaseCache): RunRecord {
  return {
    id: row.id as number,
    node_id: row.node_id as string,
    started_at: row.started_at as string,
    config_id: (row.config_id as string | null) ?? null,
    complete: row.complete === 1,
    report_count: row.report_count as number,
    counts: JSON.parse(row.counts as string) as RunRecord['counts'],
    outcomes: rowOutcomes(row, bases),
    file_name: row.file_name as string,
    sha256: row.sha256 as string,
    received_at: row.received_at as string,
  };
}

export function historyFromRow(row: Record<string, unknown>): HistoryEntry {
  return {
    id: row.id as number,
    node_id: row.node_id as string,
    at: row.at as string,
    field: row.field as HistoryEntry['field'],
    from: (row.from_value as string | null) ?? null,
    to: row.to_value as string,
    cause: row.cause as string,
  };
}

/** Named parameters for writing a whole node row (better-sqlite3 binds `@name` from an object). */
export function nodeParams(n: NodeRecord): Record<string, unknown> {
  const cols = nodeToColumns(n);
  const p: Record<string, unknown> = {};
  for (const c of NODE_COLUMNS) p[c] = cols[c];
  return p;
}
