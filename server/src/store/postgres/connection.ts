/**
 * The pool's connection settings. Per-connection settings go into the start-up packet's
 * `options`, not into a query run on each new connection: such a query, queued by a `connect`
 * listener while the pool hands the same connection to a caller, made node-pg run two queries
 * on one client at once, which it warns about on every start (and pg 9 refuses).
 */
import type pg from 'pg';

/**
 * `jit = off`: JIT compilation costs 100+ ms and pays off only for long analytic queries; the
 * registry's are short, and a filter's estimated cost easily crosses jit_above_cost (measured: a
 * 60 ms list took 180 ms). `search_path` when the store keeps its own schema (tests use one per run).
 */
export function poolConfig(url: string, max: number, schema?: string): pg.PoolConfig {
  const ours = ['-c jit=off', ...(schema !== undefined ? [`-c search_path=${schema}`] : [])].join(' ');
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined;
  }
  if (!parsed || !/^postgres(ql)?:$/.test(parsed.protocol)) return { connectionString: url, max, options: ours };
  // node-pg lets an `options` parameter in the URL win over the `options` field, so the two are
  // merged here: ours first, the URL's after them (for the same setting, the last one counts).
  const given = parsed.searchParams.get('options');
  parsed.searchParams.set('options', given ? `${ours} ${given}` : ours);
  return { connectionString: parsed.toString(), max };
}
