/**
 * Multi-row statements on SQLite: `INSERT … VALUES (…), (…), …` for a batch, in a few fixed sizes
 * (powers of two up to MULTI_ROW_MAX), so a batch of any length runs a handful of prepared
 * statements instead of one per row, and its values are bound as they are (a bundle's text
 * passed inside a JSON array to json_each was escaped, then parsed again by SQLite).
 */
import type { SqliteDb } from './db.js';

/** The most rows one statement writes: 128 × 22 values of the widest row, well under SQLite's 32,766. */
export const MULTI_ROW_MAX = 128;

/** A statement of one shape, for any number of rows up to MULTI_ROW_MAX. */
export class MultiRow {
  private readonly texts: string[] = [];

  /** `head` up to `VALUES`, `columns` values per row, `tail` after the rows (ON CONFLICT …). */
  constructor(private readonly head: string, private readonly columns: number, private readonly tail = '') {}

  sql(rows: number): string {
    const one = `(${Array.from({ length: this.columns }, () => '?').join(', ')})`;
    return (this.texts[rows] ??= `${this.head} VALUES ${Array.from({ length: rows }, () => one).join(', ')} ${this.tail}`);
  }

  /** Write `rows` (each `columns` values), inside the caller's transaction. */
  run(db: SqliteDb, rows: readonly unknown[][]): void {
    let i = 0;
    for (let size = MULTI_ROW_MAX; size >= 1; size >>= 1) {
      for (; rows.length - i >= size; i += size) db.stmt(this.sql(size)).run(this.values(rows, i, size));
    }
  }

  /** Rows i … i + size - 1 as one list of values (Array.prototype.flat took twenty times as long). */
  private values(rows: readonly unknown[][], i: number, size: number): unknown[] {
    const out = new Array<unknown>(size * this.columns);
    let k = 0;
    for (let r = i; r < i + size; r++) {
      const row = rows[r]!;
      if (row.length !== this.columns) throw new RangeError(`a row of ${row.length} values for a statement of ${this.columns} columns`);
      for (let c = 0; c < this.columns; c++) out[k++] = row[c];
    }
    return out;
  }
}
