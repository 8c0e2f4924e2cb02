/**
 * `[database]` of server.toml: SQLite or PostgreSQL, the store's caches, its planner statistics
 * and the read replicas (see packaging/etc/capstan/server.toml).
 */
export const DATABASE_SCHEMA = {
  /** postgres://… to use PostgreSQL; empty → SQLite at <data_dir>/capstan.db. */
  url: { type: 'string', default: '', optional: true },
  pool_size: { type: 'integer', default: 10, min: 1, max: 200 },
  /** Decoded node-day bases of runs kept in memory per server process (store/runs/run-codec.ts). */
  run_base_cache: { type: 'size', default: '64MiB', min: 0 },
  /** Nodes' expectations and directive rows kept in memory for the ingest on PostgreSQL (store/compliance/directive-cache.ts). */
  directive_cache: { type: 'size', default: '64MiB', min: 0 },
  /**
   * PostgreSQL: after write transactions, at most this often, tables whose row count moved since
   * their last ANALYZE by more than analyze_min_rows plus analyze_growth_percent % of it are
   * analysed (store/postgres/statistics.ts); 0: never, autovacuum alone.
   */
  analyze_interval: { type: 'duration', default: '2s', min: 0 },
  analyze_min_rows: { type: 'integer', default: 1000, min: 0, max: 1000000000 },
  analyze_growth_percent: { type: 'integer', default: 100, min: 0, max: 1000 },
  /**
   * SQLite: once the WAL file reaches sqlite_checkpoint_from, its pages are copied into the
   * database by a thread of the server's own instead of in the commits that fill it
   * (store/sqlite/checkpointer.ts); 0: always in the commits, as SQLite does by default. Past
   * sqlite_wal_limit a commit checkpoints all the same, and the file is trimmed back to it.
   */
  sqlite_checkpoint_from: { type: 'size', default: '8MiB', min: 0 },
  sqlite_wal_limit: { type: 'size', default: '64MiB', min: 1048576 },
  /** Streaming replicas (postgres://…) for the fleet-wide reads (store/replicas.ts); decisions stay on url. */
  replicas: { type: 'strings', default: [] },
  /** A replica further behind than this is not read from; how often staleness is measured; connections each. */
  replica_max_lag: { type: 'duration', default: '10s', min: 0 },
  replica_check_interval: { type: 'duration', default: '1s', min: 50 },
  replica_pool_size: { type: 'integer', default: 10, min: 1, max: 200 },
} as const;
