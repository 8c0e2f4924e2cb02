/**
 * Wires capstan-server: store, spool, ingest processors and the HTTP app. `startServer` is what
 * cli.ts runs; it receives config and a logger, never argv.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { parseListen, Spool, SpoolProcessor, SPOOL_KINDS, type Logger, type SpoolKind } from '@capstan/shared';
import { buildApp } from './api/app.js';
import { ensureAdminToken } from './api/auth.js';
import type { ServerConfig } from './config.js';
import { ingestInventory } from './ingest/inventory.js';
import { ingestRunLog, type IngestDeps } from './ingest/runlog.js';
import { openStore } from './store/index.js';
import type { Store } from './store/store.js';

export interface ServerHandle {
  url: string;
  port: number;
  store: Store;
  adminToken: string;
  processors: Record<SpoolKind, SpoolProcessor>;
  close(): Promise<void>;
}

export async function startServer(config: ServerConfig, log: Logger): Promise<ServerHandle> {
  const dataDir = config.general.data_dir;
  await mkdir(dataDir, { recursive: true, mode: 0o750 });
  const store = await openStore(
    config.database.url
      ? { databaseUrl: config.database.url, poolSize: config.database.pool_size }
      : { sqlitePath: join(dataDir, 'capstan.db') },
  );
  const adminToken = await ensureAdminToken(dataDir);
  const spool = new Spool({ root: join(dataDir, 'spool'), maxFileBytes: config.limits.max_body_size });
  await spool.init();

  const deps: IngestDeps = {
    store,
    limits: {
      maxDecompressedBytes: config.limits.max_decompressed_size,
      maxReports: config.limits.max_reports,
      maxLineBytes: config.limits.max_line_length,
    },
  };
  const counters: Record<string, number> = {};
  const processors = {} as Record<SpoolKind, SpoolProcessor>;
  for (const kind of SPOOL_KINDS) {
    const p = new SpoolProcessor({
      kind,
      spool,
      log,
      concurrency: config.processing.concurrency,
      catchupIntervalMs: config.processing.catchup_interval,
      retryMinMs: config.processing.retry_min,
      retryMaxMs: config.processing.retry_max,
      handle: async (path, name) => {
        if (kind === 'reports') {
          const r = await ingestRunLog(deps, path, name);
          log.info({ file: name, runId: r.runId, duplicate: !r.inserted }, r.inserted ? 'run stored' : 'run already stored');
        } else {
          const node = await ingestInventory(deps, path, name);
          log.info({ file: name, nodeId: node.id, accepted: node.accepted }, 'inventory stored');
        }
      },
    });
    p.on('processed', (e: { outcome: string }) => {
      const k = `${kind}_${e.outcome}`;
      counters[k] = (counters[k] ?? 0) + 1;
    });
    processors[kind] = p;
  }

  const app = buildApp({
    config,
    store,
    spool,
    log,
    adminToken,
    status: async () => ({ spool: await spool.depth(), processed: { ...counters } }),
  });
  const listen = parseListen(config.general.listen)!;
  await app.listen({ host: listen.host, port: listen.port });
  const addr = app.server.address() as AddressInfo;
  for (const kind of SPOOL_KINDS) await processors[kind].start();
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  log.info({ listen: `${host}:${addr.port}`, dataDir, database: config.database.url ? 'postgresql' : 'sqlite' }, 'server started');

  return {
    url: `http://${host}:${addr.port}`,
    port: addr.port,
    store,
    adminToken,
    processors,
    async close() {
      await app.close();
      for (const kind of SPOOL_KINDS) await processors[kind].stop();
      await store.close();
    },
  };
}
