/**
 * How a dialect hands column values back. SQLite keeps times as ISO 8601 text, JSON as text and
 * booleans as 0/1; node-pg gives Date objects, parsed jsonb and true/false. Row mappers are
 * written once over this, and each dialect has one codec (sqliteRows in sqlite/db.ts,
 * postgresRows in postgres/db.ts), so a record reads the same from both backends.
 */
export interface RowCodec {
  /** A timestamp column as ISO 8601 UTC text; null stays null. */
  time(value: unknown): string | null;
  /** A JSON column as its value. */
  json(value: unknown): unknown;
  /** A boolean column. */
  bool(value: unknown): boolean;
}
