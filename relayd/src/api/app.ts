/**
 * relayd's HTTP app, built and not started (tests inject into it; daemon.ts listens).
 * Agent-facing: uploads, /uuid, the remote-run connection. RUDDER's relay API: system/*,
 * shared-files, shared-folder, remote-run triggers. /metrics for Prometheus.
 */
import type { ServerOptions as HttpsOptions } from 'node:https';
import Fastify, { type FastifyInstance } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import { UPLOAD_PATHS, type SpoolKind } from '@capstan/shared/protocol';
import { installBodyPace, installCloseDrain, etagMatches, listenerOptions, installErrorHandler, installRawBodies, installUploadRoutes } from '@capstan/toolkit/http/app';
import { batchResultOf } from '@capstan/toolkit/http/batch';
import { bodyPace } from '@capstan/toolkit/http/limits';
import type { ListenerTls } from '@capstan/toolkit/http/tls';
import { installVersionCheck } from '@capstan/toolkit/http/version';
import type { RelayContext } from './context.js';
import { policyRoutes } from './routes/policies.js';
import { remoteRunRoutes } from './routes/remote-run.js';
import { sharedFilesRoutes } from './routes/shared-files.js';
import { sharedFolderRoutes } from './routes/shared-folder.js';
import { systemRoutes } from './routes/system.js';
import { identityRoutes } from '../identity/routes.js';

export interface BuildOptions {
  /** TLS for the listener (cert, key, minVersion); absent → plain HTTP. */
  https?: HttpsOptions;
  /** The node list synced from the upstream, served as received to sub-relays (null: none yet). */
  nodesList?: () => { body: string; etag: string | null } | null;
  /**
   * Revalidate that list with the upstream first (rate-limited; null when not now): a sub-relay
   * asks when it meets a node it does not know, and a copy older than that node would send it
   * away (seen with an agent accepted a moment before, two relays down).
   */
  refreshNodesList?: () => Promise<unknown> | null;
}

const UPLOAD_PATH = new RegExp(`^/(${UPLOAD_PATHS.map(([p]) => p).join('|')})/`);
const UPLOAD_KIND = new Map(UPLOAD_PATHS);

export function buildApp(ctx: RelayContext, opts: BuildOptions = {}): FastifyInstance {
  const app = Fastify({
    logger: false,
    // Header timeout and size, TLS, coded answers to the parser's and router's refusals.
    ...listenerOptions(ctx.config.http, opts.https as ListenerTls | undefined),
    bodyLimit: ctx.config.spool.max_file_size,
    // Remote-run connections are idle for hours by design; uploads are bounded by their size.
    requestTimeout: 0,
    keepAliveTimeout: 75_000,
    // Close idle keep-alive sockets on close(); requests in flight are let finish.
    forceCloseConnections: 'idle',
  }) as unknown as FastifyInstance;
  installErrorHandler(app, ctx.log);
  installCloseDrain(app);
  installVersionCheck(app);
  installRawBodies(app);
  // JSON and form bodies read whole follow the same pace as uploads ([http] body_timeout, min_upload_rate).
  installBodyPace(app, bodyPace(ctx.config.http));
  installUploadRoutes(app, {
    spool: ctx.spool,
    maxBytes: ctx.config.spool.max_file_size,
    pace: bodyPace(ctx.config.http),
    maxPerClient: ctx.config.http.max_uploads_per_client,
    maxUploads: ctx.config.http.max_uploads,
    // Small bodies go to the forwarder from memory (it forwards them at once, no re-read).
    keepBytes: 1024 * 1024,
    onWritten: (kind, name, data) => ctx.written(kind, name, data),
    onAccepted: (kind, name, a) => {
      ctx.metrics.received.inc({ kind });
      ctx.metrics.receivedBytes.inc({ kind }, a.bytes);
      ctx.spooled(kind, name);
    },
    // A relay below sends its files up in batches: each is spooled as its own PUT would be.
    batch: {
      maxFiles: ctx.config.http.max_batch_files,
      maxBytes: ctx.config.http.max_batch_size,
      maxMemory: ctx.config.http.max_batch_memory,
      take: (kind, files) => Promise.all(files.map(async (f) => {
        try {
          const a = await ctx.spool.accept(kind, f.name, [f.data], f.data.length, {
            keepBytes: 1024 * 1024,
            onWritten: (data) => ctx.written(kind, f.name, data),
          });
          ctx.metrics.received.inc({ kind });
          ctx.metrics.receivedBytes.inc({ kind }, a.bytes);
          ctx.spooled(kind, f.name);
          return { file: f.name, status: 201 };
        } catch (err) {
          return batchResultOf(f.name, err);
        }
      })),
    },
  });
  // A full spool is temporary: tell clients when to come back (agents keep the file meanwhile).
  let closing = false;
  app.addHook('onSend', async (req, reply) => {
    // Answers given while shutting down close their connection, so the client reconnects elsewhere.
    if (closing) reply.header('connection', 'close');
    if ((reply.statusCode === 507 || reply.statusCode === 503) && !reply.hasHeader('retry-after')) reply.header('retry-after', '60');
    if (reply.statusCode === 507) ctx.spoolFull();
    if (reply.statusCode < 400) return;
    const m = UPLOAD_PATH.exec(req.url);
    if (m && req.method === 'PUT') ctx.metrics.refused.inc({ kind: UPLOAD_KIND.get(m[1]!) as SpoolKind, status: String(reply.statusCode) });
  });

  app.get('/uuid', async (_req, reply) => reply.type('text/plain').send(`${ctx.config.general.node_id}\n`));
  app.get('/metrics', async (_req, reply) => {
    const m = await ctx.metrics.render();
    return reply.type(m.contentType).send(m.body);
  });
  // Sub-relays sync their node list from here: this relay's copy, byte for byte (same ETag).
  app.get('/rudder/relay-api/1/nodes', async (req, reply) => {
    await opts.refreshNodesList?.()?.catch(() => undefined);
    const list = opts.nodesList?.() ?? null;
    if (!list) throw capstanError('ERR_NOT_FOUND', 'this relay has no nodes list synced from its upstream');
    if (list.etag) {
      reply.header('etag', list.etag).header('cache-control', 'no-cache');
      if (etagMatches(req.headers['if-none-match'], list.etag)) return reply.code(304).send();
    }
    return reply.type('application/json').send(list.body);
  });
  systemRoutes(app, ctx);
  sharedFilesRoutes(app, ctx);
  sharedFolderRoutes(app, ctx);
  policyRoutes(app, ctx);
  remoteRunRoutes(app, ctx);
  // After the remote-run route: its upgrade listener is put behind the token check.
  if (ctx.identity) identityRoutes(app, { identity: ctx.identity, upstream: ctx.upstream, timeoutMs: ctx.config.upstream.timeout, log: ctx.log });
  // Long-lived remote-run connections would hold close() forever: end them first.
  app.addHook('preClose', async () => {
    closing = true;
    ctx.remoteRun.hub.close();
  });
  return app;
}
