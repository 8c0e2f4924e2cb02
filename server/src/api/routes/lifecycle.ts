/** Admin API: registry counts and what the lifecycle sweep did (GET /api/1/lifecycle). */
import type { FastifyInstance } from 'fastify';
import type { LifecyclePolicy, SweepResult } from '../../registry/lifecycle.js';
import type { Reads } from '../../reads.js';
import type { AggregateCache } from '../../console/cache.js';
import type { Query } from '../params.js';
import { maybeCached } from './compliance.js';

export interface LifecycleView {
  policy: LifecyclePolicy;
  last: () => SweepResult | null;
}

export function lifecycleRoutes(app: FastifyInstance, store: Reads, view: LifecycleView | undefined, cache?: AggregateCache): void {
  app.get<{ Querystring: Query }>('/api/1/lifecycle', async (req, reply) => {
    // max_age (the console's dashboard): counts up to that old will do.
    const counts = await maybeCached({ ...(cache && { cache }) }, req.query, reply, 'counts', () => store.counts());
    return {
      data: {
        nodes: { by_status: counts.by_status, by_state: counts.by_state, by_acceptance: counts.by_acceptance },
        purged_nodes: counts.purged_nodes,
        deleted_runs: counts.deleted_runs,
        policy: view?.policy ?? null,
        last_sweep: view?.last() ?? null,
      },
    };
  });
}
