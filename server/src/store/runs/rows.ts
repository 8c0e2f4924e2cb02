/** Run rows to records, for both backends. */
import type { RowCodec } from '../row-codec.js';
import { rowOutcomes, type BaseCache } from './run-codec.js';
import { readOutcomes } from './outcomes.js';
import type { RunRecord } from './types.js';

/** The columns of `runs` a RunRecord is made of (everything but the log itself). */
export const RUN_COLUMNS = [
  'id', 'node_id', 'started_at', 'config_id', 'complete', 'report_count', 'counts', 'outcomes',
  'file_name', 'sha256', 'received_at',
] as const;

/**
 * A `runs` row (RUN_COLUMNS, with its base's outcomes) as a record. Outcomes that cannot be read
 * (damaged bytes, a base that is gone) are none, with why: one damaged run does not refuse the
 * page of runs it is on.
 */
export function runFromRow(row: Record<string, unknown>, bases: BaseCache, codec: RowCodec): RunRecord {
  const outcomes = readOutcomes(() => rowOutcomes(row, bases));
  return {
    id: Number(row.id),
    node_id: row.node_id as string,
    started_at: row.started_at as string,
    config_id: (row.config_id as string | null) ?? null,
    complete: codec.bool(row.complete),
    report_count: Number(row.report_count),
    counts: codec.json(row.counts) as RunRecord['counts'],
    outcomes: typeof outcomes === 'string' ? [] : outcomes,
    file_name: row.file_name as string,
    sha256: row.sha256 as string,
    received_at: codec.time(row.received_at)!,
    ...(typeof outcomes === 'string' && { outcomes_unreadable: outcomes }),
  };
}
