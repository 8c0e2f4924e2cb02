/**
 * capstan-server's HTTP app, built and not started: the agent-facing endpoints (so a relay's
 * upstream may be the server itself), /metrics, and the admin API behind the bearer token.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import {
  installErrorHandler, installRawBodies, installUploadRoutes, installVersionCheck, type Logger, type Spool, type SpoolKind,
} from '@capstan/shared';
import type { ServerConfig } from '../config.js';
import type { ServerMetrics } from '../metrics.js';
import type { Store } from '../store/store.js';
import { requireAdmin } from './auth.js';
import { complianceRoutes } from './routes/compliance.js';
import { lifecycleRoutes, type LifecycleView } from './routes/lifecycle.js';
import { nodeRoutes } from './routes/nodes.js';

export interface ServerAppDeps {
  config: ServerConfig;
  store: Store;
  spool: Spool;
  log: Logger;
  adminToken: string;
  /** Files waiting per kind and failed counts, for /api/1/system/status. */
  status: () => Promise<Record<string, unknown>>;
  onAccepted?: (kind: SpoolKind, name: string) => void;
  /** Prometheus metrics for GET /metrics (absent: no route). */
  metrics?: ServerMetrics;
  /** The lifecycle policy and last sweep, for GET /api/1/lifecycle. */
  lifecycle?: LifecycleView;
}

export function buildApp(deps: ServerAppDeps): FastifyInstance {
  const app = Fastify({ logger: false, routerOptions: { ignoreDuplicateSlashes: true }, bodyLimit: deps.config.limits.max_body_size });
  installErrorHandler(app, deps.log);
  // Capstan agents and relays outside the supported version window are told which side to upgrade.
  installVersionCheck(app);
  installRawBodies(app);
  installUploadRoutes(app, {
    spool: deps.spool,
    maxBytes: deps.config.limits.max_body_size,
    onAccepted: (kind, name) => deps.onAccepted?.(kind, name),
  });
  app.get('/uuid', async (_req, reply) => reply.type('text/plain').send(`${deps.config.general.node_id}\n`));
  const metrics = deps.metrics;
  if (metrics) {
    // Unauthenticated, like the relay's: counts only, no node names.
    app.get('/metrics', async (_req, reply) => reply.type(metrics.contentType()).send(await metrics.text()));
  }

  app.register(async (admin) => {
    admin.addHook('onRequest', requireAdmin(deps.adminToken));
    nodeRoutes(admin, deps.store);
    complianceRoutes(admin, deps.store);
    lifecycleRoutes(admin, deps.store, deps.lifecycle);
    admin.get('/api/1/system/status', async () => ({ data: await deps.status() }));
  });
  return app;
}
