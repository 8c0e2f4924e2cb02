/**
 * Array parameters for statements that take a whole batch at once: one `INSERT ... SELECT FROM
 * unnest($1::text[], $2::int[], ...)` or `UPDATE ... FROM unnest(...)` instead of one statement
 * per row. A statement costs the database a parse, a plan (or a prepared plan's bind), an executor
 * start and a round trip whatever its rows; with array parameters a batch of runs pays them once.
 * node-pg sends a JavaScript array as a PostgreSQL array literal (Buffers in hex, objects as JSON).
 */

/** `unnest($first::t1[], $first+1::t2[], ...)`: the types, in the order of the values given. */
export function unnestOf(types: readonly string[], first = 1): string {
  return `unnest(${types.map((t, i) => `$${first + i}::${t}[]`).join(', ')})`;
}

/** One array per column: `pick(rows, (r) => r.x)`. */
export function pick<T, V>(rows: readonly T[], f: (r: T) => V): V[] {
  const out = new Array<V>(rows.length);
  for (let i = 0; i < rows.length; i++) out[i] = f(rows[i]!);
  return out;
}

/** The arrays of several columns at once, in the order of `keys`. */
export function pickAll<T, K extends keyof T>(rows: readonly T[], keys: readonly K[]): Array<Array<T[K]>> {
  return keys.map((k) => pick(rows, (r) => r[k]));
}
