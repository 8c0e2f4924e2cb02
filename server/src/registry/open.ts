/**
 * Opening the registry database with the domain's rules: the store applies them inside its
 * transactions (store/rules.ts) and decides nothing itself. Every program and test that opens
 * the store comes through here, so the rules are the same whoever writes.
 */
import { openStore, ReplicaReads, type OnUnreadable, type OpenStoreOptions, type Store, type StoreRules } from '../store/index.js';
import { FILTER_RULES } from './filters.js';
import { NODE_RULES } from './rules.js';
import { TASK_RULES } from '../jobs/states.js';
import { DISCOVERY_RULES } from '../providers/discovery.js';
import { EVENT_RULES } from '../events/rules.js';

export const STORE_RULES: StoreRules = { nodes: NODE_RULES, filters: FILTER_RULES, tasks: TASK_RULES, discovery: DISCOVERY_RULES, events: EVENT_RULES };

export function openRegistry(opts: Omit<OpenStoreOptions, 'rules'>): Promise<Store> {
  return openStore({ ...opts, rules: STORE_RULES });
}

/** `serve --test`: is the database reachable, at a schema this code reads (nothing is created or migrated)? */
export { checkDatabase, isDatabaseUnavailable } from '../store/check.js';
/** An admin's node properties, checked at the door (the store checks them again). */
export { checkProperties } from '../store/nodes/inventory/indexing.js';

/**
 * The fleet-wide reads answered by PostgreSQL streaming replicas within a staleness bound
 * (store/replicas.ts); the primary `store` answers everything else, and every write.
 */
export function openReplicaReads(store: Store, opts: {
  primaryUrl: string; urls: readonly string[]; maxLagMs: number; checkMs: number; poolSize: number;
  onChange?: (url: string, inUse: boolean, why: string) => void;
  onIdleError?: (err: Error) => void;
  onUnreadable?: OnUnreadable;
}): Promise<ReplicaReads> {
  return ReplicaReads.open(store, {
    primaryUrl: opts.primaryUrl, urls: opts.urls, maxLagMs: opts.maxLagMs, checkMs: opts.checkMs,
    open: (url) => openStore({ databaseUrl: url, poolSize: opts.poolSize, rules: STORE_RULES, readOnly: true,
      ...(opts.onIdleError && { onIdleError: opts.onIdleError }), ...(opts.onUnreadable && { onUnreadable: opts.onUnreadable }) }),
    ...(opts.onChange && { onChange: opts.onChange }),
  });
}
export type { ReplicaReads, ReplicaStatus } from '../store/index.js';
