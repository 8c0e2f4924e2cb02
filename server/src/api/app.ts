/**
 * capstan-server's HTTP app, built and not started: the agent-facing endpoints (so a relay's
 * upstream may be the server itself) and the admin API behind the bearer token.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import { installErrorHandler, installRawBodies, installUploadRoutes, type Logger, type Spool, type SpoolKind } from '@capstan/shared';
import type { ServerConfig } from '../config.js';
import type { Store } from '../store/store.js';
import { requireAdmin } from './auth.js';
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
}

export function buildApp(deps: ServerAppDeps): FastifyInstance {
  const app = Fastify({ logger: false, routerOptions: { ignoreDuplicateSlashes: true }, bodyLimit: deps.config.limits.max_body_size });
  installErrorHandler(app, deps.log);
  installRawBodies(app);
  installUploadRoutes(app, {
    spool: deps.spool,
    maxBytes: deps.config.limits.max_body_size,
    onAccepted: (kind, name) => deps.onAccepted?.(kind, name),
  });
  app.get('/uuid', async (_req, reply) => reply.type('text/plain').send(`${deps.config.general.node_id}\n`));

  app.register(async (admin) => {
    admin.addHook('onRequest', requireAdmin(deps.adminToken));
    nodeRoutes(admin, deps.store);
    admin.get('/api/1/system/status', async () => ({ data: await deps.status() }));
  });
  return app;
}
