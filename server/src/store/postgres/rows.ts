/**
 * The PostgreSQL row codec: node-pg hands timestamptz back as Date and jsonb parsed; records
 * carry ISO 8601 UTC strings, the same as the SQLite backend returns.
 */
import type { RowCodec } from '../row-codec.js';

export function iso(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  return value instanceof Date ? value.toISOString() : new Date(String(value)).toISOString();
}

export const postgresRows: RowCodec = {
  time: iso,
  // jsonb comes back parsed; JSON kept in a text column is parsed here.
  json: (v) => (typeof v === 'string' ? JSON.parse(v) : v),
  bool: (v) => v === true,
};
