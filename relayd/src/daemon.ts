/**
 * Wires relayd together: uploads → spool → forwarder → upstream, plus the relay API, remote-run
 * and the clean-up timers. `startRelay` is what cli.ts runs and what in-process tests may call;
 * it receives config, a logger and hooks, never argv or signals.
 */
import type { Server as HttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { parseListen } from '@capstan/shared/config';
import { type Logger } from '@capstan/shared/log';
import type { SpoolKind } from '@capstan/shared/protocol';
import type { SpoolProcessor } from '@capstan/toolkit/spool/processor';
import { Spool } from '@capstan/toolkit/spool/spool';
import { buildApp } from './api/app.js';
import type { RelayContext } from './api/context.js';
import { relayBootstrapper } from './bootstrap/open.js';
import { bootstrapForwardRoutes } from './bootstrap/forward.js';
import type { RelaydConfig } from './config.js';
import { NodesList } from './data/nodes.js';
import { Routing, upstreamNodesSync } from './data/routing.js';
import { Forwarder } from './forward/forwarder.js';
import { Upstream } from './forward/upstream.js';
import { openJwks, relayIdentity, retainPublishedKeys } from './identity/checks.js';
import type { JwksCache } from './identity/jwks.js';
import { needsRelayToken, RelayToken } from './identity/own.js';
import { Metrics, relaySources } from './metrics.js';
import { providerForwardRoutes, providerHost } from './providers/host.js';
import { Reloader, SystemStatus } from './system.js';
import { RemoteRun } from './remote-run/dispatch.js';
import { UpstreamLink } from './remote-run/link.js';
import { Hub } from './remote-run/listeners.js';
import { startRetention } from './retention.js';
import { lockSpool } from './spool/lock.js';
import { loadAdminToken, loadListenerTls, loadUpstreamTls } from './tls.js';

export interface RelayHooks {
  /** Re-read the configuration file (reload, system/status's configuration check). */
  reloadConfig?: () => RelaydConfig;
  /** Apply a new log level (the logger belongs to cli.ts). */
  setLogLevel?: (level: string) => void;
  /** Export process_* and nodejs_* metrics (off in tests that run several relays in one process). */
  processMetrics?: boolean;
}

export interface RelayHandle {
  /** The address actually listened on (port 0 → the chosen port). */
  url: string;
  port: number;
  processors: Record<SpoolKind, SpoolProcessor>;
  context: RelayContext;
  reload(): Promise<void>;
  /** One line for sd_notify STATUS=. */
  statusLine(): Promise<string>;
  /** Stop accepting, finish uploads in flight, give forwards `shutdown_grace`, release the spool. */
  close(): Promise<void>;
}

export async function startRelay(config: RelaydConfig, log: Logger, hooks: RelayHooks = {}): Promise<RelayHandle> {
  // Not allowed in NODE_OPTIONS, so set here; V8 reads it at every heap-limit computation.
  if (config.general.heap_growing_percent > 0) setFlagsFromString(`--heap-growing-percent=${config.general.heap_growing_percent}`);
  const spool = new Spool({
    root: config.spool.directory,
    maxFileBytes: config.spool.max_file_size,
    minFreeBytes: config.spool.min_free_space,
    maxIncomingBytes: config.spool.max_size,
    writerThreads: config.spool.writer_threads,
    recycleFiles: config.spool.recycle_files,
    recycleBytes: config.spool.recycle_size,
    failedMaxFiles: config.spool.failed_max_files,
    failedMaxBytes: config.spool.failed_max_size,
  });
  await spool.init();
  const unlock = await lockSpool(config.spool.directory);
  try {
    return await start(config, log, hooks, spool, unlock);
  } catch (err) {
    await unlock();
    throw err;
  }
}

/**
 * Where files go: the node lists (the configured file and the one synced from the upstream),
 * routing by them, the forwarder that takes each spooled file upstream, and remote runs.
 */
async function routingAndForwarding(config: RelaydConfig, log: Logger, hooks: RelayHooks, spool: Spool) {
  const myId = config.general.node_id;
  const nodesFile = await NodesList.load(myId, config.general.nodes_list_file);
  const upstream = new Upstream({
    url: config.upstream.url, fallbackUrls: config.upstream.fallback_urls, timeoutMs: config.upstream.timeout, connections: config.upstream.concurrency, tls: await loadUpstreamTls(config),
    onSwitch: (from, to, reason) => log.warn({ from, to, reason }, 'upstream does not answer: the next one takes over'),
  });
  const hub = new Hub(config.remote_run.heartbeat, config.remote_run.max_connections);
  // A sync that brings a different list reaches every part that acts on it; the parts made
  // below are there before the first sync (it starts once the relay listens).
  let forwarder: Forwarder | null = null;
  let keyring: JwksCache | null = null;
  const sync = upstreamNodesSync(config, upstream, log, () => {
    forwarder?.nodesChanged();
    const list = sync?.current;
    if (list && config.identity.require_relay_token) hub.endUnlistedRelays(list, log);
    if (list) hub.endRevokedTokens(list, log);
    retainPublishedKeys(sync, keyring);
  });
  await sync?.load();
  const routing = new Routing(nodesFile, sync);
  const metrics = new Metrics(relaySources({ spool, nodes: routing.current, hub, upstream: () => forwarder?.upstream.state ?? null }), { processMetrics: hooks.processMetrics });
  const fwd = new Forwarder({
    spool, upstream, nodes: routing.current, log, metrics,
    ...(sync ? { sync: { list: sync, inUse: routing.syncInUse, refuseUnknown: config.nodes_sync.refuse_unknown } } : {}),
    concurrency: config.upstream.concurrency, probeIntervalMs: config.upstream.probe_interval,
    catchupIntervalMs: config.processing.catchup_interval, retryMinMs: config.processing.retry_min, retryMaxMs: config.processing.retry_max,
    ocsPairWaitMs: config.processing.ocs_pair_wait,
    batch: { files: config.upstream.batch_files, bytes: config.upstream.batch_size, waitMs: config.upstream.batch_wait },
  });
  forwarder = fwd;
  const remoteRun = new RemoteRun({
    hub, nodes: routing.current, myId, log, metrics, connectWaitMs: config.remote_run.connect_wait, maxDurationMs: config.remote_run.max_duration,
  });
  const jwks = await openJwks(config, upstream, log);
  keyring = jwks;
  retainPublishedKeys(sync, jwks);
  return { upstream, hub, sync, routing, metrics, fwd, remoteRun, jwks };
}

/** The HTTP app over the relay's parts, with what it forwards upstream for the relays under it. */
async function relayApp(config: RelaydConfig, log: Logger, hooks: RelayHooks, spool: Spool, parts: Awaited<ReturnType<typeof routingAndForwarding>>) {
  const { upstream, sync, routing, metrics, fwd, remoteRun, jwks, hub } = parts;
  const adminToken = await loadAdminToken(config);
  const listenerTls = await loadListenerTls(config);
  let app: ReturnType<typeof buildApp> | null = null;
  const reloader = new Reloader({
    config, routing, upstream, log, listenerTls: listenerTls !== null,
    server: () => (app ? (app.server as unknown as HttpsServer) : null),
    reloadConfig: hooks.reloadConfig, setLogLevel: hooks.setLogLevel,
  }, adminToken);
  const status = new SystemStatus({ config, reloadConfig: hooks.reloadConfig, spool, forwarder: fwd, routing, hub });
  const context: RelayContext = {
    config, log, spool, metrics, upstream, remoteRun,
    nodes: routing.current,
    knowsNode: (id) => routing.knows(id),
    adminToken: reloader.adminToken,
    spooled: (kind, name) => fwd.notify(kind, name),
    written: (kind, name, data) => fwd.remember(kind, name, data),
    spoolFull: () => status.spoolFull(),
    status: () => status.status(),
    reload: reloader.reload,
    identity: relayIdentity(config, jwks, routing),
  };
  // This relay's own identity, when it does what only a relay may do upstream: its key and
  // certificate (made at the first such start), and its relay token, renewed by signed request.
  const relayToken = needsRelayToken(config) ? await RelayToken.open({ config, upstream, log }) : null;
  const relayAuth = relayToken ? { auth: () => relayToken.authorization(), refused: () => relayToken.refused() } : {};
  if (relayToken) context.ownAuthorization = () => relayToken.authorization();
  app = buildApp(context, { ...(listenerTls ? { https: listenerTls } : {}), nodesList: () => sync?.served ?? null, refreshNodesList: () => sync?.refreshOnMiss() ?? null });
  // Sub-relays' provider and bootstrap calls go up like everything else.
  providerForwardRoutes(app, upstream, config.upstream.timeout);
  bootstrapForwardRoutes(app, upstream, config.upstream.timeout);
  return { app, context, reloader, status, relayToken, relayAuth, tls: listenerTls !== null };
}

async function start(config: RelaydConfig, log: Logger, hooks: RelayHooks, spool: Spool, unlock: () => Promise<void>): Promise<RelayHandle> {
  // Nothing is being uploaded yet: every partial file is from a process that died mid-upload.
  const swept = await spool.sweepTmp(-Infinity);
  if (swept > 0) log.info({ removed: swept }, 'removed partial uploads left by a previous run');
  const parts = await routingAndForwarding(config, log, hooks, spool);
  const { upstream, sync, routing, fwd, remoteRun } = parts;
  const { app, context, reloader, status, relayToken, relayAuth, tls } = await relayApp(config, log, hooks, spool, parts);
  const myId = config.general.node_id;
  // This relay hosts its own managers, and runs the bootstrap of their nodes.
  const providers = config.providers.enabled
    ? providerHost({ upstream, relayId: myId, refreshMs: config.providers.refresh_interval, timeoutMs: config.upstream.timeout, log, ...relayAuth })
    : null;
  const listen = parseListen(config.general.listen)!;
  await app.listen({ host: listen.host, port: listen.port });
  const addr = app.server.address() as AddressInfo;
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  const url = `${tls ? 'https' : 'http'}://${host}:${addr.port}`;
  const bootstrap = config.bootstrap.enabled ? await relayBootstrapper(config, { upstream, log, url, address: addr.address, ...relayAuth }) : null;
  // Not awaited: a hung upstream must not hold the start; a file that needs the list waits for it.
  void sync?.start();
  await fwd.start();
  const link = config.remote_run.link_upstream && config.remote_run.enabled
    ? new UpstreamLink({ upstreamUrl: () => upstream.url, myId, remoteRun, log, connect: () => upstream.connectOptions(), heartbeatMs: config.remote_run.heartbeat, ...relayAuth })
    : null;
  // Not awaited: an unreachable upstream, or a relay not registered yet, must not hold the start.
  void relayToken?.start();
  relayToken?.on('renewed', () => link?.refresh());
  link?.start();
  providers?.start();
  bootstrap?.start();
  const retention = await startRetention(config, spool, log);
  const nodes = routing.fileList;
  log.info({ listen: `${host}:${addr.port}`, tls, upstream: upstream.urls.join(' '), spool: config.spool.directory, nodes: nodes.configured ? nodes.size : 'all' }, 'relayd started');

  let closing: Promise<void> | null = null;
  return {
    url,
    port: addr.port,
    processors: fwd.processors,
    context,
    reload: reloader.reload,
    statusLine: () => status.line(),
    close() {
      closing ??= (async () => {
        retention.stop();
        await closeListener(app, config.processing.shutdown_grace);
        relayToken?.stop();
        await link?.stop();
        await providers?.stop();
        await bootstrap?.stop();
        sync?.stop();
        await fwd.stop(config.processing.shutdown_grace);
        await upstream.close();
        await spool.close();
        await unlock();
        log.info('relayd stopped');
      })();
      return closing;
    },
  };
}

/**
 * Stop accepting; uploads in flight finish their write (their 2xx means fsync'd). A client that
 * stalls past the grace period is cut off: its partial file never left tmp/.
 */
async function closeListener(app: ReturnType<typeof buildApp>, graceMs: number): Promise<void> {
  const force = setTimeout(() => app.server.closeAllConnections(), graceMs);
  force.unref();
  // server.close() closes the connections idle at that moment only; a keep-alive connection
  // whose upload finishes afterwards would hold the exit until its idle timeout.
  const idle = setInterval(() => app.server.closeIdleConnections(), 50);
  await app.close();
  clearTimeout(force);
  clearInterval(idle);
}
