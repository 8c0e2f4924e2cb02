/**
 * Wires relayd together: spool ← uploads, spool → processors → upstream. `startRelay` is what
 * cli.ts runs and what in-process tests may call; it receives config and a logger, never argv.
 */
import type { AddressInfo } from 'node:net';
import { parseListen, Spool, SpoolProcessor, SPOOL_KINDS, type Logger, type SpoolKind } from '@capstan/shared';
import { buildApp } from './api/app.js';
import type { RelaydConfig } from './config.js';
import { Upstream } from './forward/upstream.js';
import { Metrics } from './metrics.js';

export interface RelayHandle {
  /** The address actually listened on (port 0 → the chosen port). */
  url: string;
  port: number;
  processors: Record<SpoolKind, SpoolProcessor>;
  close(): Promise<void>;
}

export async function startRelay(config: RelaydConfig, log: Logger): Promise<RelayHandle> {
  const spool = new Spool({
    root: config.spool.directory,
    maxFileBytes: config.spool.max_file_size,
    minFreeBytes: config.spool.min_free_space,
  });
  await spool.init();
  await spool.sweepTmp(config.spool.tmp_retention);

  const upstream = new Upstream({ url: config.upstream.url, timeoutMs: config.upstream.timeout, connections: config.upstream.concurrency });
  const metrics = new Metrics(() => spool.depth());
  let lastForwardOk: boolean | null = null;

  const processors = {} as Record<SpoolKind, SpoolProcessor>;
  for (const kind of SPOOL_KINDS) {
    const p = new SpoolProcessor({
      kind,
      spool,
      log,
      concurrency: config.upstream.concurrency,
      catchupIntervalMs: config.processing.catchup_interval,
      retryMinMs: config.processing.retry_min,
      retryMaxMs: config.processing.retry_max,
      handle: async (path, name) => {
        await upstream.forward(kind, name, path);
        lastForwardOk = true;
      },
    });
    p.on('processed', (e: { outcome: 'done' | 'failed' | 'retry'; error?: { code?: string } }) => {
      metrics.outcome(kind, e.outcome === 'done' ? 'forwarded' : e.outcome);
      if (e.outcome === 'retry' && e.error?.code === 'ERR_UPSTREAM') lastForwardOk = false;
    });
    processors[kind] = p;
  }

  const app = buildApp({
    config,
    spool,
    log,
    metrics,
    pending: () => Object.fromEntries(SPOOL_KINDS.map((k) => [k, processors[k].pending])) as Record<SpoolKind, number>,
    upstreamReachable: () => lastForwardOk,
  });
  const listen = parseListen(config.general.listen)!;
  await app.listen({ host: listen.host, port: listen.port });
  const addr = app.server.address() as AddressInfo;
  for (const kind of SPOOL_KINDS) await processors[kind].start();
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  log.info({ listen: `${host}:${addr.port}`, upstream: config.upstream.url, spool: config.spool.directory }, 'relayd started');

  return {
    url: `http://${host}:${addr.port}`,
    port: addr.port,
    processors,
    async close() {
      await app.close();
      for (const kind of SPOOL_KINDS) await processors[kind].stop();
      await upstream.close();
    },
  };
}
