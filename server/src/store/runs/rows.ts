/** Run rows to records, for both backends. */
import type { RowCodec } from '../row-codec.js';
import { rowOutcomes, type BaseCache } from './run-codec.js';
import type { RunRecord } from './types.js';

/** The columns of `runs` a RunRecord is made of (everything but the log itself). */
export const RUN_COLUMNS = [
  'id', 'node_id', 'started_at', 'config_id', 'complete', 'report_count', 'counts', 'outcomes',
  'file_name', 'sha256', 'received_at',
] as const;

/** A `runs` row (RUN_COLUMNS, with its base's outcomes) as a record. */
export function runFromRow(row: Record<string, unknown>, bases: BaseCache, codec: RowCodec): RunRecord {
  return {
    id: Number(row.id),
    node_id: row.node_id as string,
    started_at: row.started_at as string,
    config_id: (row.config_id as string | null) ?? null,
    complete: codec.bool(row.complete),
    report_count: Number(row.report_count),
    counts: codec.json(row.counts) as RunRecord['counts'],
    outcomes: rowOutcomes(row, bases),
    file_name: row.file_name as string,
    sha256: row.sha256 as string,
    received_at: codec.time(row.received_at)!,
  };
}
