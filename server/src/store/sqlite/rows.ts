/**
 * The SQLite row codec: SQLite keeps times as ISO text already (written in one spelling,
 * time.ts), JSON as text and booleans as 0/1.
 */
import type { RowCodec } from '../row-codec.js';

export const sqliteRows: RowCodec = {
  time: (v) => (v ?? null) as string | null,
  json: (v) => JSON.parse(v as string),
  bool: (v) => v === 1,
};
