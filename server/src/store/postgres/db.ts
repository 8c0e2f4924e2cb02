/**
 * The registry's PostgreSQL pool, and the one way every part of the PostgreSQL store reaches it:
 * one statement on the pool, or one transaction on one pooled connection. Every failure comes out
 * as a store error naming what was being done (errors.ts decides transient or refused). Rows come
 * back through one codec (postgresRows).
 *
 * Per-connection settings go into the start-up packet's `options`, not into a query run on each
 * new connection: such a query, queued by a `connect` listener while the pool hands the same
 * connection to a caller, made node-pg run two queries on one client at once, which it warns
 * about on every start (and pg 9 refuses).
 */
import pg from 'pg';
import { capstanError } from '@capstan/shared/errors';
import { storeError } from '../errors.js';
import type { RowCodec } from '../row-codec.js';
import { ANALYZE_DEFAULTS, TableStatistics, type AnalyzeOptions } from './statistics.js';

/** Where a statement runs: the pool (one statement), or the connection of a transaction. */
export type Queryable = pg.Pool | pg.PoolClient;

export interface PostgresDbOptions {
  url: string;
  poolSize?: number;
  /** Keep the registry in this schema (created by migrate() if missing); default: the search_path. */
  schema?: string;
  now?: () => Date;
  /** Told about connections that fail while idle in the pool (the next query reports it too). */
  onIdleError?: (err: Error) => void;
  /** Planner statistics brought up to date after bulk writes (statistics.ts); null: never (a replica). */
  analyze?: Partial<AnalyzeOptions> | null;
}

// A plain identifier: it goes into the connection's search_path and into CREATE SCHEMA.
const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export class PostgresDb {
  readonly pool: pg.Pool;
  readonly schema: string | undefined;
  /** The clock for times the store stamps itself (manual node creation, deletion). */
  readonly now: () => Date;
  /** ANALYZE of the tables the writes grew (statistics.ts), checked after each write transaction. */
  readonly statistics: TableStatistics | null;
  private closed = false;

  constructor(opts: PostgresDbOptions) {
    if (opts.schema !== undefined && !SCHEMA_NAME.test(opts.schema)) {
      throw capstanError('ERR_CONFIG', 'database schema must be a lower-case identifier');
    }
    this.schema = opts.schema;
    this.now = opts.now ?? (() => new Date());
    this.pool = new pg.Pool(poolConfig(opts.url, opts.poolSize ?? 10, opts.schema));
    // Without a listener, an idle connection dropped by the server would crash the process.
    this.pool.on('error', (err) => opts.onIdleError?.(err));
    this.statistics = opts.analyze === null ? null : new TableStatistics(this.pool, { ...ANALYZE_DEFAULTS, ...opts.analyze });
  }

  /**
   * One statement: on the pool (`what`, text, values), or on `q` (a transaction's connection)
   * with a query config; hot statements carry a `name`, so node-pg prepares them once per connection.
   */
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(what: string, text: string, values?: unknown[]): Promise<pg.QueryResult<R>>;
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(what: string, q: Queryable, config: pg.QueryConfig | string, values?: unknown[]): Promise<pg.QueryResult<R>>;
  async query<R extends pg.QueryResultRow>(what: string, a: Queryable | string, b?: pg.QueryConfig | string | unknown[], c?: unknown[]): Promise<pg.QueryResult<R>> {
    try {
      if (typeof a === 'string') return await this.pool.query<R>(a, b as unknown[] | undefined);
      return await (typeof b === 'string' ? a.query<R>(b, c) : a.query<R>(b as pg.QueryConfig));
    } catch (err) {
      throw storeError(what, err);
    }
  }

  /**
   * Run `fn` in one transaction on one pooled connection. A connection whose ROLLBACK failed is
   * broken and is dropped from the pool rather than handed to the next caller.
   */
  async tx<T>(what: string, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    let c: pg.PoolClient;
    try {
      c = await this.pool.connect();
    } catch (err) {
      throw storeError(what, err);
    }
    try {
      await c.query('BEGIN');
      const result = await fn(c);
      await c.query('COMMIT');
      c.release();
      this.statistics?.wrote();
      return result;
    } catch (err) {
      await c.query('ROLLBACK').then(() => c.release(), (e: Error) => c.release(e));
      throw storeError(what, err);
    }
  }

  /** Run `fn`'s statements on the pool (no transaction), turning failures into coded errors. */
  async read<T>(what: string, fn: (q: Queryable) => Promise<T>): Promise<T> {
    try {
      return await fn(this.pool);
    } catch (err) {
      throw storeError(what, err);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.statistics?.stop();
    await this.pool.end();
  }
}

/**
 * `jit = off`: JIT compilation costs 100+ ms and pays off only for long analytic queries; the
 * registry's are short, and a filter's estimated cost easily crosses jit_above_cost (measured: a
 * 60 ms list took 180 ms).
 * `random_page_cost = 1.1` (PostgreSQL's default is 4, for spinning disks): the registry's working
 * set is in memory or on SSD, where a page read at random costs about what one read in sequence
 * does. At 4, the kept counters' statement triggers joined each batch's few thousand rows to
 * kept_nodes by hashing all of it (a sequential scan of 100,000 rows per statement) rather than
 * looking each node up: a first generation of 100,000 nodes spent 8.8 s of the database's CPU in
 * those scans, 2.8 s with index lookups (the whole generation went from 78–83 s to 64 s).
 * A database on spinning disks sets it back with the URL's options (`?options=-c random_page_cost=4`).
 * `search_path` when the store keeps its own schema (tests use one per run).
 */
function poolConfig(url: string, max: number, schema?: string): pg.PoolConfig {
  const ours = ['-c jit=off', '-c random_page_cost=1.1', ...(schema !== undefined ? [`-c search_path=${schema}`] : [])].join(' ');
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

/** A timestamp as ISO 8601 UTC text; null stays null. */
export function iso(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  return value instanceof Date ? value.toISOString() : new Date(String(value)).toISOString();
}

/** How rows come back from node-pg: timestamptz as Date, jsonb parsed; records carry ISO text. */
export const postgresRows: RowCodec = {
  time: iso,
  // jsonb comes back parsed; JSON kept in a text column is parsed here.
  json: (v) => (typeof v === 'string' ? JSON.parse(v) : v),
  bool: (v) => v === true,
};
