/**
 * Opening the registry: PostgreSQL when a database URL is configured (several server processes
 * on one database), otherwise the embedded SQLite file. The schema is migrated before the store
 * is handed out, so a database too new for this code stops the start-up (ERR_STARTUP) instead
 * of failing later, request by request.
 */
import { capstanError } from '@capstan/shared/errors';
import type { StoreRules } from './rules.js';
import type { Store } from './store.js';
import type { AnalyzeOptions } from './postgres/statistics.js';
import type { CheckpointOptions } from './sqlite/checkpointer.js';
import type { OnUnreadable } from './runs/outcomes.js';

export type * from './store.js';
export type * from './rules.js';
export { LATEST_SCHEMA_VERSION } from './migrations/index.js';
export { ReplicaReads, type ReplicaStatus } from './replicas.js';
export type { OnUnreadable, UnreadableValue } from './runs/outcomes.js';

export interface OpenStoreOptions {
  /** The domain's rules the store applies in its transactions (server/src/registry/open.ts gives them). */
  rules: StoreRules;
  sqlitePath?: string;
  databaseUrl?: string;
  poolSize?: number;
  /** Postgres only: keep the registry in this schema (tests use one per run). */
  schema?: string;
  /** Memory for decoded node-day bases of runs (store/runs/run-codec.ts); default 64 MiB. */
  runBaseCacheBytes?: number;
  /** Postgres only: memory for nodes' expected components the ingest reads (compliance/directive-cache.ts); default 64 MiB. */
  directiveCacheBytes?: number;
  /** Clock for times the store stamps itself (manual node creation); tests pass a fixed one. */
  now?: () => Date;
  /** Postgres only: told when an idle pooled connection fails. */
  onIdleError?: (err: Error) => void;
  /**
   * Told when a stored value cannot be read: a node's outcomes (its last run's, on its compliance
   * row) are read as none, so its run counts every component as missing until its next run; the
   * runs of a node-day whose run base is damaged are stored on their own (runs/run-codec.ts).
   */
  onUnreadable?: OnUnreadable;
  /** Postgres only: told when partition maintenance is skipped (retried at the next sweep). */
  onMaintenance?: (message: string, err?: unknown) => void;
  /** Only read through it (a streaming replica): not migrated, nothing written. */
  readOnly?: boolean;
  /** Postgres only: planner statistics after bulk writes (postgres/statistics.ts); null: never. */
  analyze?: Partial<AnalyzeOptions> | null;
  /** SQLite only: when the WAL's checkpoints move to a thread of their own (sqlite/checkpointer.ts). */
  sqliteCheckpoint?: CheckpointOptions;
}

export async function openStore(opts: OpenStoreOptions): Promise<Store> {
  let store: Store;
  // Each dialect (and its driver) is loaded when it is opened: one process uses one.
  if (opts.databaseUrl) {
    const { PostgresStore } = await import('./postgres/index.js');
    store = new PostgresStore({
      url: opts.databaseUrl,
      rules: opts.rules,
      ...(opts.poolSize !== undefined && { poolSize: opts.poolSize }),
      ...(opts.schema !== undefined && { schema: opts.schema }),
      ...(opts.now && { now: opts.now }),
      ...(opts.onIdleError && { onIdleError: opts.onIdleError }),
      ...(opts.onMaintenance && { onMaintenance: opts.onMaintenance }),
      ...(opts.onUnreadable && { onUnreadable: opts.onUnreadable }),
      ...(opts.runBaseCacheBytes !== undefined && { runBaseCacheBytes: opts.runBaseCacheBytes }),
      ...(opts.directiveCacheBytes !== undefined && { directiveCacheBytes: opts.directiveCacheBytes }),
      // A replica takes no ANALYZE: its statistics come from the primary's.
      ...(opts.readOnly ? { analyze: null } : opts.analyze !== undefined && { analyze: opts.analyze }),
    });
  } else if (opts.sqlitePath) {
    const { SqliteStore } = await import('./sqlite/index.js');
    store = new SqliteStore({
      path: opts.sqlitePath, rules: opts.rules, ...(opts.now && { now: opts.now }),
      ...(opts.runBaseCacheBytes !== undefined && { runBaseCacheBytes: opts.runBaseCacheBytes }),
      ...(opts.sqliteCheckpoint && { checkpoint: opts.sqliteCheckpoint }),
      ...(opts.onUnreadable && { onUnreadable: opts.onUnreadable }),
    });
  } else {
    throw capstanError('ERR_CONFIG', 'store needs a sqlite path or a database url');
  }
  if (opts.readOnly) return store;
  try {
    await store.migrate();
  } catch (err) {
    // Do not leak an open file or a pool when start-up stops here.
    await store.close().catch(() => undefined);
    throw err;
  }
  return store;
}
