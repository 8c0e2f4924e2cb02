/**
 * Checks and conversions of what callers hand the store, done once for both backends before
 * any SQL runs. Bad input gets a permanent ERR_BAD_REQUEST here; letting the database refuse it
 * would give each backend its own answer (Postgres refuses U+0000 in text, SQLite stores it).
 */
import { capstanError } from '@capstan/shared';
import type { NodeUpsertFromInventory, RunInsert } from './store.js';
import { toUtcIso } from './time.js';

export function refuseNul(fields: Record<string, unknown>): void {
  for (const [name, value] of Object.entries(fields)) {
    if (typeof value === 'string' && value.includes('\u0000')) {
      throw capstanError('ERR_BAD_REQUEST', `${name} contains a NUL character`);
    }
  }
}

/**
 * Serialise a document for a JSON column; a value JSON cannot carry is bad input, not a store
 * failure. `nul: false` for columns that are jsonb in Postgres, which refuses an escaped
 * \u0000 (one preceded by an even number of backslashes, i.e. not a literal "\\u0000").
 */
export function toJson(value: unknown, field: string, opts: { nul?: boolean } = {}): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value ?? null);
  } catch (err) {
    throw capstanError('ERR_BAD_REQUEST', `${field} is not serialisable as JSON`, { cause: err });
  }
  if (opts.nul === false && text !== undefined && /(^|[^\\])(\\\\)*\\u0000/.test(text)) {
    throw capstanError('ERR_BAD_REQUEST', `${field} contains a NUL character`);
  }
  return text ?? 'null';
}

/** An inventory ready to write: its time normalised, its document serialised. */
export function checkInventory(inv: NodeUpsertFromInventory): { receivedAt: string; document: string } {
  const { inventory: _doc, ...fields } = inv;
  refuseNul(fields);
  // The document may carry \u0000 (json in Postgres, text in SQLite both keep it as sent).
  return { receivedAt: toUtcIso(inv.received_at, 'received_at'), document: toJson(inv.inventory, 'inventory') };
}

/** A run ready to write: times normalised, summaries serialised. */
export function checkRun(run: RunInsert): { startedUtc: string; receivedAt: string; counts: string; outcomes: string } {
  const { log_compressed: _log, counts: _c, outcomes: _o, ...fields } = run;
  refuseNul(fields);
  // Postgres keeps it in an int4; no run comes near that many reports.
  if (!Number.isInteger(run.report_count) || run.report_count < 0 || run.report_count > 0x7fffffff) {
    throw capstanError('ERR_BAD_REQUEST', 'report_count must be an integer in 0..2^31-1');
  }
  if (!Buffer.isBuffer(run.log_compressed)) throw capstanError('ERR_BAD_REQUEST', 'log_compressed must be a Buffer');
  return {
    startedUtc: toUtcIso(run.started_at, 'started_at'),
    receivedAt: toUtcIso(run.received_at, 'received_at'),
    counts: toJson(run.counts, 'counts', { nul: false }),
    outcomes: toJson(run.outcomes, 'outcomes', { nul: false }),
  };
}
