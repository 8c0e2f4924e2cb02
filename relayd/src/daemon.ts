/**
 * Wires relayd together: uploads → spool → forwarder → upstream, plus the relay API, remote-run
 * and the clean-up timers. `startRelay` is what cli.ts runs and what in-process tests may call;
 * it receives config, a logger and hooks, never argv or signals.
 */
import type { Server as HttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { statfs } from 'node:fs/promises';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { parseListen } from '@capstan/shared/config';
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import { type Logger } from '@capstan/shared/log';
import { SPOOL_KINDS, type SpoolKind } from '@capstan/shared/protocol';
import { Spool, startSpoolCleanup, type SpoolProcessor } from '@capstan/toolkit';
import { buildApp } from './api/app.js';
import type { RelayContext, RelayStatus } from './api/context.js';
import { SharedFilesStore } from './cache/shared-files.js';
import type { RelaydConfig } from './config.js';
import { NodesList } from './data/nodes.js';
import { NODES_LIST_PATH, NodesSync } from './data/sync.js';
import { Forwarder } from './forward/forwarder.js';
import { JwksCache } from './identity/jwks.js';
import { nodeTokenVerifier } from './identity/verify.js';
import { ensureRelayKey, needsRelayToken, RelayToken } from './identity/own.js';
import { Upstream } from './forward/upstream.js';
import { providerForwardRoutes, providerHost } from './providers/host.js';
import { bootstrapForwardRoutes } from './bootstrap/forward.js';
import { Metrics } from './metrics.js';
import { RemoteRun } from './remote-run/dispatch.js';
import { Hub } from './remote-run/listeners.js';
import { UpstreamLink } from './remote-run/link.js';
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

async function start(config: RelaydConfig, log: Logger, hooks: RelayHooks, spool: Spool, unlock: () => Promise<void>): Promise<RelayHandle> {
  // Nothing is being uploaded yet: every partial file is from a process that died mid-upload.
  const swept = await spool.sweepTmp(-Infinity);
  if (swept > 0) log.info({ removed: swept }, 'removed partial uploads left by a previous run');

  const myId = config.general.node_id;
  let nodes = await NodesList.load(myId, config.general.nodes_list_file);
  let adminToken = await loadAdminToken(config);
  const listenerTls = await loadListenerTls(config);
  const upstream = new Upstream({ url: config.upstream.url, timeoutMs: config.upstream.timeout, connections: config.upstream.concurrency, tls: await loadUpstreamTls(config) });
  const hub = new Hub(config.remote_run.heartbeat, config.remote_run.max_connections);

  let forwarder: Forwarder | null = null;
  // The node list synced from the upstream (see data/sync.ts); nodes_list_file, when set, wins.
  const nodesSync = config.nodes_sync.enabled
    ? new NodesSync({
        myId,
        fetch: async (etag) => {
          const res = await upstream.request({
            method: 'GET', path: NODES_LIST_PATH, headers: etag ? { 'if-none-match': etag } : {}, timeoutMs: Math.min(config.upstream.timeout, 30_000),
          });
          const body = await res.body.text();
          const tag = res.headers.etag;
          return { status: res.statusCode, etag: typeof tag === 'string' ? tag : null, body };
        },
        cacheFile: config.nodes_sync.cache_file || join(config.spool.directory, 'nodes-list.json'),
        intervalMs: config.nodes_sync.interval,
        missRefreshMs: config.nodes_sync.miss_refresh,
        log,
        onChange: () => {
          forwarder?.nodesChanged();
          dropUnlistedRelays();
          dropRevokedTokens();
          retainKeys();
        },
      })
    : null;
  /**
   * A forced renewal at the server shows in the synced list as `tokens-after`: connections opened
   * with a token issued before it end (`bye` token_expired: the agent or sub-relay renews by signed
   * request and comes back), and the token itself is refused from now on (tokensAfter below).
   */
  const dropRevokedTokens = () => {
    const list = nodesSync?.current;
    if (!list) return;
    for (const p of hub.all()) {
      if (p.iat !== undefined && p.iat < list.tokensAfter(p.id)) {
        log.info({ node: p.id }, 'remote-run connection ended: its token was revoked by a forced renewal');
        hub.end(p.id, 'token_expired');
      }
    }
  };
  /**
   * Sub-relays are trusted by token, checked without state; the synced list is where a revocation
   * shows (the server lists registered relays as such): a linked sub-relay it no longer names as a
   * relay is cut off with a `bye`, and relinking is refused (relayListed below).
   */
  const dropUnlistedRelays = () => {
    const list = nodesSync?.current;
    if (!list || !config.identity.require_relay_token) return;
    for (const p of hub.relays()) {
      if (list.isRelay(p.id) === false) {
        log.warn({ relay: p.id }, 'sub-relay no longer a registered relay upstream: link ended');
        hub.end(p.id, 'not_a_relay');
      }
    }
  };
  /**
   * The synced list names the key ids the server publishes: a key an admin deleted leaves the
   * JWKS copy at this sync, not when the copy ages out (identity.jwks_max_age).
   */
  let keyring: JwksCache | null = null;
  const retainKeys = () => {
    const kids = nodesSync?.keys;
    // Only a list the upstream confirmed in this run: the cached one read at start may predate a
    // key fetched since (a rotation), which it would drop while the upstream is down.
    if (kids && keyring && nodesSync!.confirmedAt > 0) void keyring.retain(kids);
  };
  await nodesSync?.load();
  /** What routing uses now: the file when configured, else the synced list, else none (forward all). */
  const routing = (): NodesList => (nodes.configured || !nodesSync?.current ? nodes : nodesSync.current);
  const metrics = new Metrics(
    {
      spool: {
        depth: () => spool.depth(),
        oldest: async () => Object.fromEntries(await Promise.all(SPOOL_KINDS.map(async (k) => [k, await spool.oldest(k)]))) as Record<SpoolKind, number | null>,
      },
      managedNodes: () => routing().neighbours().length,
      subNodes: () => routing().size,
      upstreamUp: () => (forwarder?.upstream.state === 'unknown' || !forwarder ? null : forwarder.upstream.state === 'up'),
      agentConnections: () => hub.size,
      spoolUsage: () => spool.usage,
      recycling: () => spool.recycling,
    },
    { processMetrics: hooks.processMetrics },
  );
  forwarder = new Forwarder({
    spool,
    upstream,
    nodes: routing,
    ...(nodesSync ? { sync: { list: nodesSync, inUse: () => !nodes.configured && nodesSync.current !== null, refuseUnknown: config.nodes_sync.refuse_unknown } } : {}),
    log,
    metrics,
    concurrency: config.upstream.concurrency,
    catchupIntervalMs: config.processing.catchup_interval,
    retryMinMs: config.processing.retry_min,
    retryMaxMs: config.processing.retry_max,
    ocsPairWaitMs: config.processing.ocs_pair_wait,
    probeIntervalMs: config.upstream.probe_interval,
    batch: { files: config.upstream.batch_files, bytes: config.upstream.batch_size, waitMs: config.upstream.batch_wait },
  });
  const fwd = forwarder;
  const remoteRun = new RemoteRun({
    hub,
    nodes: routing,
    myId,
    log,
    metrics,
    connectWaitMs: config.remote_run.connect_wait,
    maxDurationMs: config.remote_run.max_duration,
  });

  let app: ReturnType<typeof buildApp> | null = null;
  /** When an upload was last refused for lack of room: health reports it for a minute. */
  let lastFull = 0;

  const reload = async (): Promise<void> => {
    const fresh = hooks.reloadConfig ? hooks.reloadConfig() : config;
    const restartNeeded = (['general.listen', 'spool.directory', 'upstream.url'] as const).filter((k) => {
      const [s, f] = k.split('.') as [keyof RelaydConfig, string];
      return (fresh[s] as Record<string, unknown>)[f] !== (config[s] as Record<string, unknown>)[f];
    });
    if (restartNeeded.length > 0) log.warn({ keys: restartNeeded }, 'these changes take effect at the next restart');
    // Read everything first, then swap: a failed reload changes nothing.
    const newNodes = await NodesList.load(myId, fresh.general.nodes_list_file);
    const newToken = await loadAdminToken(fresh);
    const newTls = listenerTls ? await loadListenerTls(fresh) : null;
    const newUpstreamTls = await loadUpstreamTls(fresh);
    nodes = newNodes;
    adminToken = newToken;
    if (newTls && app) (app.server as unknown as HttpsServer).setSecureContext(newTls);
    upstream.reconfigure(newUpstreamTls);
    // Ask the upstream for its current list too (a failure keeps the one in hand).
    await nodesSync?.refresh();
    hooks.setLogLevel?.(fresh.log.level);
    log.info({ nodes: nodes.size, log_level: fresh.log.level }, 'configuration reloaded');
  };

  const status = async (): Promise<RelayStatus> => {
    let configuration: RelayStatus['configuration'] = { status: 'success' };
    try {
      if (hooks.reloadConfig) {
        const fresh = hooks.reloadConfig();
        await NodesList.load(myId, fresh.general.nodes_list_file);
        await loadListenerTls(fresh);
        await loadUpstreamTls(fresh);
      }
    } catch (err) {
      configuration = { status: 'error', details: isCapstanError(err) ? err.message : String(err) };
    }
    const incoming = await spool.depth();
    const usage = spool.usage;
    let free: number | undefined;
    try {
      const s = await statfs(config.spool.directory);
      free = Number(s.bavail) * Number(s.bsize);
    } catch {
      free = undefined;
    }
    const problems: string[] = [];
    if (free !== undefined && free < config.spool.min_free_space) problems.push(`file system has ${free} bytes free, below spool.min_free_space`);
    if (usage && usage.bytes >= usage.quota) problems.push('spool.max_size reached');
    if (problems.length === 0 && Date.now() - lastFull < 60_000) {
      problems.push(usage ? `a file did not fit in spool.max_size (${usage.bytes} of ${usage.quota} bytes used)` : 'the spool file system was full');
    }
    const up = fwd.upstream;
    return {
      configuration,
      spool: {
        status: problems.length ? 'error' : 'success',
        ...(problems.length ? { details: `uploads refused with 507: ${problems.join('; ')}` } : {}),
        incoming,
        pending: fwd.pending(),
        ...(usage ? { bytes: usage.bytes, quota: usage.quota } : {}),
        ...(free !== undefined ? { free_bytes: free } : {}),
        recycled: spool.recycling,
      },
      upstream: {
        status: up.state === 'down' ? 'error' : 'success',
        ...(up.lastError ? { details: up.lastError } : {}),
        url: config.upstream.url,
        state: up.state,
        ...(up.lastContact ? { last_contact: new Date(up.lastContact).toISOString() } : {}),
      },
      nodes_list: {
        status: 'success', configured: routing().configured, nodes: routing().size, ...(nodes.source ? { file: nodes.source } : {}),
        // Only once there is a synced list: an upstream that serves none changes nothing here.
        ...(nodesSync?.current ? { synced: nodesSync.status() } : {}),
      },
      remote_run: { connections: hub.size },
    };
  };

  const jwks = new JwksCache({
    fetch: async () => {
      // A few kB: a short timeout, so a hung upstream never holds a token check or close() long.
      const res = await upstream.request({ method: 'GET', path: '/.well-known/jwks.json', timeoutMs: Math.min(config.upstream.timeout, 10_000) });
      const body = Buffer.from(await res.body.arrayBuffer());
      if (res.statusCode !== 200) throw capstanError('ERR_UPSTREAM', `upstream answered ${res.statusCode} for its JWKS`);
      return body;
    },
    file: config.identity.jwks_cache_file || join(config.spool.directory, 'jwks.json'),
    minRefreshMs: config.identity.jwks_min_refresh,
    maxAgeMs: config.identity.jwks_max_age,
    log,
  });
  await jwks.init();
  keyring = jwks;
  retainKeys();

  const context: RelayContext = {
    config,
    log,
    spool,
    metrics,
    upstream,
    nodes: routing,
    knowsNode: async (id) => {
      if (routing().accepts(id)) return true;
      // A configured nodes_list_file is authoritative; only a synced list can be behind.
      if (nodes.configured || !nodesSync) return false;
      await nodesSync.refreshOnMiss()?.catch(() => false);
      return routing().accepts(id);
    },
    adminToken: () => adminToken,
    spooled: (kind, name) => fwd.notify(kind, name),
    written: (kind, name, data) => fwd.remember(kind, name, data),
    spoolFull: () => {
      lastFull = Date.now();
    },
    status,
    reload,
    remoteRun,
    identity: {
      jwks,
      verifier: nodeTokenVerifier(jwks, Math.floor(config.identity.clock_skew / 1000)),
      requireToken: config.identity.require_token,
      requireRelayToken: config.identity.require_relay_token,
      tokensAfter: (id) => nodesSync?.current?.tokensAfter(id) ?? 0,
      relayListed: async (id) => {
        if (!nodesSync?.current || nodesSync.current.isRelay(id) !== false) return true;
        // Registered a moment ago? Ask the upstream once before refusing (rate limited).
        await nodesSync.refreshOnMiss()?.catch(() => false);
        return nodesSync.current.isRelay(id) !== false;
      },
    },
  };
  // This relay's own identity, when it does what only a relay may do upstream: its key and
  // certificate (made at the first such start), and its relay token, renewed by signed request.
  const relayToken = needsRelayToken(config) ? await RelayToken.open({ config, upstream, log }) : null;
  const relayAuth = relayToken ? { auth: () => relayToken.authorization(), refused: () => relayToken.refused() } : {};
  if (relayToken) context.ownAuthorization = () => relayToken.authorization();
  app = buildApp(context, { ...(listenerTls ? { https: listenerTls } : {}), nodesList: () => nodesSync?.served ?? null, refreshNodesList: () => nodesSync?.refreshOnMiss() ?? null });
  // Sub-relays' provider calls go up like everything else; this relay hosts its own managers.
  providerForwardRoutes(app, upstream, config.upstream.timeout);
  const providers = config.providers.enabled
    ? providerHost({ upstream, relayId: myId, refreshMs: config.providers.refresh_interval, timeoutMs: config.upstream.timeout, log, ...relayAuth })
    : null;
  // Sub-relays' bootstrap calls go up too; this relay runs the bootstrap of its own managers' nodes.
  bootstrapForwardRoutes(app, upstream, config.upstream.timeout);
  const listen = parseListen(config.general.listen)!;
  await app.listen({ host: listen.host, port: listen.port });
  const addr = app.server.address() as AddressInfo;
  const bootstrap = config.bootstrap.enabled ? await relayBootstrapper(config, { upstream, myId, log, addr, tls: !!listenerTls, ...relayAuth }) : null;
  // Not awaited: a hung upstream must not hold the start; a file that needs the list waits for it.
  void nodesSync?.start();
  await fwd.start();

  const link = config.remote_run.link_upstream && config.remote_run.enabled
    ? new UpstreamLink({ upstreamUrl: config.upstream.url, myId, remoteRun, log, connect: () => upstream.connectOptions(), heartbeatMs: config.remote_run.heartbeat, ...relayAuth })
    : null;
  // Not awaited: an unreachable upstream, or a relay not registered yet, must not hold the start.
  void relayToken?.start();
  relayToken?.on('renewed', () => link?.refresh());
  link?.start();
  providers?.start();
  bootstrap?.start();

  // Retention: failed/ and stale partial uploads; expired shared files.
  const sweepTimer = await startSpoolCleanup(spool, {
    failedRetention: config.spool.failed_retention, tmpRetention: config.spool.tmp_retention, interval: config.spool.cleanup_interval, log,
  });
  const sharedFiles = config.shared_files.path ? new SharedFilesStore(config.shared_files.path) : null;
  const sharedTimer = sharedFiles
    ? setInterval(() => {
        sharedFiles.cleanup().then(
          (n) => n > 0 && log.info({ removed: n }, 'expired shared files removed'),
          (err: unknown) => log.warn({ err }, 'shared files clean-up failed'),
        );
      }, config.shared_files.cleanup_interval)
    : null;
  sharedTimer?.unref();
  if (sharedFiles) await sharedFiles.cleanup().catch((err: unknown) => log.warn({ err }, 'shared files clean-up failed'));

  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  const scheme = listenerTls ? 'https' : 'http';
  log.info({ listen: `${host}:${addr.port}`, tls: !!listenerTls, upstream: config.upstream.url, spool: config.spool.directory, nodes: nodes.configured ? nodes.size : 'all' }, 'relayd started');

  let closing: Promise<void> | null = null;
  return {
    url: `${scheme}://${host}:${addr.port}`,
    port: addr.port,
    processors: fwd.processors,
    context,
    reload,
    async statusLine() {
      const d = await spool.depth();
      return `spool ${d.reports} reports, ${d.inventories} inventories; upstream ${fwd.upstream.state}; ${hub.size} agents connected`;
    },
    close() {
      closing ??= (async () => {
        clearInterval(sweepTimer);
        if (sharedTimer) clearInterval(sharedTimer);
        // Stop accepting; uploads in flight finish their write (their 2xx means fsync'd). A client
        // that stalls past the grace period is cut off: its partial file never left tmp/.
        const force = setTimeout(() => app!.server.closeAllConnections(), config.processing.shutdown_grace);
        force.unref();
        // server.close() closes the connections idle at that moment only; a keep-alive connection
        // whose upload finishes afterwards would hold the exit until its idle timeout.
        const idle = setInterval(() => app!.server.closeIdleConnections(), 50);
        await app!.close();
        clearTimeout(force);
        clearInterval(idle);
        relayToken?.stop();
        await link?.stop();
        await providers?.stop();
        await bootstrap?.stop();
        nodesSync?.stop();
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

/** The bootstrap worker of a relay with bootstrap.enabled: its key opens the tasks sealed to it. */
async function relayBootstrapper(
  config: RelaydConfig,
  o: { upstream: Upstream; myId: string; log: Logger; addr: AddressInfo; tls: boolean; auth?: () => Promise<Record<string, string>>; refused?: () => void },
) {
  const { RelayBootstrapper } = await import('./bootstrap/worker.js');
  const key = await ensureRelayKey(config);
  // Agents reach this relay where it listens, unless that is every address (then: the job's relay_url).
  const wildcard = o.addr.address === '0.0.0.0' || o.addr.address === '::';
  const own = `${o.tls ? 'https' : 'http'}://${o.addr.family === 'IPv6' ? `[${o.addr.address}]` : o.addr.address}:${o.addr.port}`;
  const agentUrl = config.bootstrap.agent_url || (wildcard ? null : own);
  return new RelayBootstrapper({
    upstream: o.upstream, relayId: o.myId, log: o.log.child({ part: 'bootstrap' }),
    keyPem: async () => key.keyPem,
    pollMs: config.bootstrap.poll_interval,
    concurrency: config.bootstrap.concurrency,
    agentUrl: () => agentUrl,
    maxPackageBytes: config.bootstrap.max_package_size,
    cacheDir: join(config.spool.directory, 'bootstrap-packages'),
    timeoutMs: config.upstream.timeout,
    ...(o.auth && { auth: o.auth }),
    ...(o.refused && { refused: o.refused }),
  });
}
