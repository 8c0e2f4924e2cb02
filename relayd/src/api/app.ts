/**
 * relayd's HTTP app, built and not started (tests call it without listening; cli.ts listens).
 * Agent-facing uploads plus the RUDDER relay API's system routes; the relay-api JSON envelope is
 * RUDDER's so existing curl runbooks keep working.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import {
  CAPSTAN_VERSION, installErrorHandler, installRawBodies, installUploadRoutes, type Logger, type Spool, type SpoolKind,
} from '@capstan/shared';
import type { RelaydConfig } from '../config.js';
import type { Metrics } from '../metrics.js';

export interface RelayAppDeps {
  config: RelaydConfig;
  spool: Spool;
  log: Logger;
  metrics: Metrics;
  /** Files waiting per kind, for system/status. */
  pending: () => Record<SpoolKind, number>;
  upstreamReachable: () => boolean | null;
}

function envelope(action: string, data: unknown) {
  return { result: 'success', action, data };
}

export function buildApp(deps: RelayAppDeps): FastifyInstance {
  const app = Fastify({ logger: false, routerOptions: { ignoreDuplicateSlashes: true }, bodyLimit: deps.config.spool.max_file_size });
  installErrorHandler(app, deps.log);
  installRawBodies(app);
  installUploadRoutes(app, {
    spool: deps.spool,
    maxBytes: deps.config.spool.max_file_size,
    onAccepted: (kind, name, a) => {
      deps.metrics.received(kind, a.bytes);
      deps.log.debug({ kind, file: name, bytes: a.bytes }, 'file spooled');
    },
  });

  app.get('/uuid', async (_req, reply) => reply.type('text/plain').send(`${deps.config.general.node_id}\n`));

  const api = '/rudder/relay-api/1';
  app.get(`${api}/system/info`, async () =>
    envelope('getSystemInfo', { major_version: CAPSTAN_VERSION.split('.').slice(0, 2).join('.'), full_version: CAPSTAN_VERSION, node_id: deps.config.general.node_id }),
  );
  app.get(`${api}/system/status`, async () => {
    const depth = await deps.spool.depth();
    const reachable = deps.upstreamReachable();
    return envelope('getStatus', {
      spool: { incoming: depth, pending: deps.pending() },
      upstream: { url: deps.config.upstream.url, status: reachable === null ? 'unknown' : reachable ? 'success' : 'error' },
    });
  });
  app.get('/metrics', async (_req, reply) => reply.type('text/plain; version=0.0.4').send(await deps.metrics.render()));
  return app;
}
