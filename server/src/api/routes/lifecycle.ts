/** Admin API: registry counts and what the lifecycle sweep did (GET /api/1/lifecycle). */
import type { FastifyInstance } from 'fastify';
import type { LifecyclePolicy, SweepResult } from '../../registry/lifecycle.js';
import type { Store } from '../../store/store.js';

export interface LifecycleView {
  policy: LifecyclePolicy;
  last: () => SweepResult | null;
}

export function lifecycleRoutes(app: FastifyInstance, store: Store, view: LifecycleView | undefined): void {
  app.get('/api/1/lifecycle', async () => {
    const counts = await store.counts();
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
