/**
 * Inventories stored before the filter language's tables existed (schema version 15) are made
 * queryable in the background after start, in batches, so that an upgraded server's filters and
 * dynamic groups see every node at once instead of after each node's next inventory (which an
 * agent sends unchanged only once a day). Nothing to do on a database that has none: one query.
 */
import type { Logger } from '@capstan/shared/log';
import type { Store } from '../store/store.js';

export interface Reindexer {
  /** Resolves when the work is done, failed, or stopped. */
  readonly finished: Promise<number>;
  stop(): Promise<void>;
}

/**
 * `done(total)` runs once the inventories are indexed, when there were any (the server
 * regenerates every policy then: dynamic groups may have gained or lost members).
 */
export function reindexInventories(store: Store, log: Logger, done?: (total: number) => void, batch = 500): Reindexer {
  let stopped = false;
  const finished = (async () => {
    let total = 0;
    let last = '';
    try {
      for (;;) {
        if (stopped) break;
        const r = await store.reindexInventories(batch, last);
        total += r.indexed;
        last = r.last;
        if (r.done) break;
        if (total > 0) log.info({ indexed: total, through: last }, 'making stored inventories queryable');
        // Between batches the ingest and the API get their turn.
        await new Promise((resolve) => setImmediate(resolve));
      }
      if (total > 0) {
        log.info({ indexed: total }, 'stored inventories made queryable');
        if (!stopped) done?.(total);
      }
    } catch (err) {
      // The next start goes on where this one stopped (nodes not indexed yet are found again).
      log.warn({ err }, 'making stored inventories queryable failed; retried at the next start');
    }
    return total;
  })();
  return {
    finished,
    async stop() {
      stopped = true;
      await finished;
    },
  };
}
