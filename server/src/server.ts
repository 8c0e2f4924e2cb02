/**
 * Wires capstan-server: store, domain, ingest, the runners beside it, the HTTP app, and the order
 * things start and stop in. `startServer` is what cli.ts runs; it receives config and a logger,
 * never argv. What each part does is in the modules it composes (compose/, domain.ts).
 */
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { parseListen } from '@capstan/shared/config';
import { makeDir } from '@capstan/shared/dir';
import type { Logger } from '@capstan/shared/log';
import type { SpoolKind } from '@capstan/shared/protocol';
import { loadListenerTls, type ListenerTls } from '@capstan/toolkit/http/tls';
import { startSpoolCleanup } from '@capstan/toolkit/spool/housekeeping';
import type { SpoolProcessor } from '@capstan/toolkit/spool/processor';
import { buildApp } from './api/app.js';
import { ensureAdminToken } from './api/auth.js';
import { authorizeNodeToken } from './api/routes/identity.js';
import { startConsole, type ConsoleParts } from './compose/console.js';
import { ingestDeps, ingestPipeline, openSpool, type IngestPipeline } from './compose/ingest.js';
import { notifications, type Notifications } from './compose/notify.js';
import { operations, type Operations } from './compose/operations.js';
import type { Dispatcher } from './notify/dispatch.js';
import type { ServerConfig } from './config.js';
import { composeDomain, type Domain } from './domain.js';
import { NodeIdentity } from './identity/service.js';
import { identitySettings } from './identity/settings.js';
import { reindexInventories } from './ingest/reindex.js';
import { ServerMetrics } from './metrics.js';
import { ensurePolicyKey, type PolicyKeyring } from './policy/key.js';
import type { Sweeper } from './registry/lifecycle.js';
import { complianceSettings } from './registry/compliance.js';
import { KeptSweeper } from './registry/kept-sweep.js';
import { openRegistry, openReplicaReads, type ReplicaReads } from './registry/open.js';
import { RelayHub } from './remote-run/relay-links.js';
import type { JobRunner } from './jobs/runner.js';
import type { Store } from './store/store.js';
import type { UnreadableValue } from './store/index.js';
import { VulnService } from './vulns/service.js';
import { vulnSettings } from './vulns/settings.js';
import { watchTemplates } from './policy/template-watch.js';
import { defaultRenderThreads } from './policy/render-pool.js';

export interface ServerHandle {
  url: string;
  port: number;
  store: Store;
  adminToken: string;
  /** Every admin API route as `METHOD /pattern` (access.ts's table must name each). */
  adminRoutes: readonly string[];
  processors: Record<SpoolKind, SpoolProcessor>;
  sweeper: Sweeper;
  metrics: ServerMetrics;
  identity: NodeIdentity;
  /** Jobs in flight and the relays linked for them. */
  jobs: JobRunner;
  /** The notification loop (absent: [notifications] enabled = false). */
  dispatcher: Dispatcher | null;
  /**
   * Graceful stop: no new connections or files, the files and the sweep batch in flight
   * finish, then the store closes.
   */
  close(): Promise<void>;
}

export async function startServer(config: ServerConfig, log: Logger): Promise<ServerHandle> {
  const dataDir = config.general.data_dir;
  await makeDir(dataDir, 0o750);
  const store = await openRegistry(
    config.database.url
      ? {
          databaseUrl: config.database.url,
          poolSize: config.database.pool_size,
          runBaseCacheBytes: config.database.run_base_cache,
          directiveCacheBytes: config.database.directive_cache,
          analyze: {
            intervalMs: config.database.analyze_interval,
            minRows: config.database.analyze_min_rows,
            growthPercent: config.database.analyze_growth_percent,
            onError: (message, err) => log.warn({ err }, message),
          },
          onIdleError: (err) => log.warn({ err }, 'database connection lost while idle'),
          onMaintenance: (message, err) => log.warn({ err }, message),
          onUnreadable: unreadableWarning(log),
        }
      : {
          sqlitePath: join(dataDir, 'capstan.db'),
          runBaseCacheBytes: config.database.run_base_cache,
          sqliteCheckpoint: { startBytes: config.database.sqlite_checkpoint_from, limitBytes: config.database.sqlite_wal_limit },
          onUnreadable: unreadableWarning(log),
        },
  );
  try {
    return await startOnStore(config, log, store);
  } catch (err) {
    await store.close().catch(() => undefined);
    throw err;
  }
}

/** A stored value that the store could not read, and what it did instead: said in the log. */
const unreadableWarning = (log: Logger) => (u: UnreadableValue) =>
  u.value === 'outcomes'
    ? log.warn({ node: u.node_id, reason: u.error }, "a node's stored run outcomes cannot be read: read as none (every component missing) until its next run")
    : log.warn({ node: u.node_id, day: u.day, base: u.base_id, reason: u.error },
      "a node-day's stored run base cannot be read: that day's next runs of the node are stored on their own, and those stored against it cannot be read");

/** Everything the server is made of, composed and not started yet. */
interface Parts {
  store: Store;
  tls: ListenerTls | null;
  adminToken: string;
  policyKey: PolicyKeyring;
  hub: RelayHub;
  domain: Domain;
  identity: NodeIdentity;
  metrics: ServerMetrics;
  ingest: IngestPipeline;
  ops: Operations;
  notify: Notifications;
  console: ConsoleParts | null;
  vulns: VulnService;
  /** Streaming replicas answering the fleet-wide reads ([database] replicas), if any. */
  replicas: ReplicaReads | null;
}

async function compose(config: ServerConfig, log: Logger, store: Store): Promise<Parts> {
  const dataDir = config.general.data_dir;
  // Read before anything is started: a bad certificate is a configuration error (exit 2).
  const tls = (await loadListenerTls(config.tls)) ?? null;
  const adminToken = await ensureAdminToken(dataDir);
  const consoleParts = config.console.enabled ? await startConsole(config, store, log, !!tls) : null;
  const policyKey = await ensurePolicyKey(dataDir);
  const spool = await openSpool(config);
  // Today's run storage exists before the first run arrives (Postgres day partitions).
  await store.prepareRunStorage(new Date());
  if (config.signatures.allow_sha1) log.warn('SHA-1 signatures are accepted on run logs, inventories and renewal requests ([signatures] allow_sha1)');
  // The one door for node changes (API, CLI, ingest, relay contacts, discovery, the sweep), each
  // recorded in the audit log with who acted; a relay's link ends when it may no longer hold one.
  const hub = new RelayHub(config.jobs.heartbeat);
  const domain = composeDomain({
    store, log, key: policyKey, links: hub, reviewRoles: config.policy.review_roles, sharedFolder: config.policy.shared_folder,
    renderThreads: config.policy.render_threads < 0 ? defaultRenderThreads() : config.policy.render_threads,
    touchWindowMs: config.policy.touch_window,
    writeBatches: config.database.url ? config.policy.write_batches : 1,
    events: { pollMs: config.events.poll_interval, maxWaitMs: config.events.max_wait, maxReaders: config.events.max_readers },
  });
  const metrics = new ServerMetrics({ depth: () => spool.depth(), counts: () => store.counts(), failed: () => spool.failedUsage });
  // Vulnerabilities: the index loads in the background; an inventory is matched once it is stored.
  const vulns = new VulnService({ store, log, settings: vulnSettings(config.vulnerabilities), dataDir });
  const onInventory = (nodeId: string, doc: Record<string, unknown>) => vulns.matchNode(nodeId, doc).then(() => undefined, (err: unknown) => {
    log.warn({ err, node: nodeId }, 'vulnerability matching of an inventory failed');
  });
  const ingest = ingestPipeline(config, log, { ...ingestDeps(config, store, domain.nodes), onInventory }, spool, metrics);
  // The keyring lives in the registry database, its private keys sealed with the secret file.
  const identity = await NodeIdentity.open({
    dataDir, secretFile: config.identity.secret_file, store, log, ...identitySettings(config.identity), allowSha1: config.signatures.allow_sha1,
    audit: domain.audit,
  });
  const ops = operations(config, log, store, domain, identity, hub, metrics, policyKey);
  // Events reach subscriptions from the outbox, beside the ingest.
  const notify = await notifications(config, log, store, domain, identity);
  const db = config.database;
  const replicas = db.replicas.length === 0 ? null : await openReplicaReads(store, {
    primaryUrl: db.url, urls: db.replicas, maxLagMs: db.replica_max_lag, checkMs: db.replica_check_interval, poolSize: db.replica_pool_size,
    onChange: (url, inUse, why) => (inUse ? log.info({ replica: url }, 'reading from replica') : log.warn({ replica: url, reason: why }, 'not reading from replica')),
    onIdleError: (err) => log.warn({ err }, 'replica connection lost while idle'),
    onUnreadable: unreadableWarning(log),
  });
  return { store, tls, adminToken, policyKey, hub, domain, identity, metrics, ingest, ops, notify, console: consoleParts, vulns, replicas };
}

function app(config: ServerConfig, log: Logger, p: Parts) {
  const { ingest, ops, hub, identity } = p;
  return buildApp({
    config, log, store: p.store, domain: p.domain, spool: ingest.spool, adminToken: p.adminToken, metrics: p.metrics, identity,
    ...(p.replicas && { reads: p.replicas.reads() }),
    ...(p.tls ? { https: p.tls } : {}),
    lifecycle: { policy: ops.policy, last: () => ops.sweeper.last },
    status: async () => ({
      spool: await ingest.spool.depth(), failed: ingest.spool.failedUsage, processed: { ...ingest.counters }, remote_run: { relays: hub.all().map((r) => r.id) },
      ...(p.replicas && { database: { replica_max_lag_ms: config.database.replica_max_lag, replicas: p.replicas.status() } }),
    }),
    ...ingest.app,
    // Policy downloads need a valid token of the node, unless turned off.
    policy: {
      key: p.policyKey, sharedFolder: config.policy.shared_folder, maxPlanBytes: config.policy.max_plan_size,
      ...(config.identity.require_token ? { authorizeNode: authorizeNodeToken(identity) } : {}),
    },
    jobs: { store: p.store, service: ops.jobService, liveOutput: (jobId, nodeId) => ops.jobs.liveOutput(jobId, nodeId) },
    campaigns: { service: ops.campaignService },
    bootstrap: { credentials: ops.credentials },
    ...(ops.bootstrap && { bootstrapRunner: ops.bootstrap }),
    remoteRun: { hub, runner: ops.jobs, log, nodeId: config.general.node_id, heartbeatMs: config.jobs.heartbeat },
    ...(p.console && { console: p.console }),
    subscriptions: p.notify.subscriptions,
    managers: { ...(ops.pollNow && { pollNow: ops.pollNow }) },
    vulns: p.vulns,
  });
}

async function startOnStore(config: ServerConfig, log: Logger, store: Store): Promise<ServerHandle> {
  const p = await compose(config, log, store);
  const { ingest, ops, domain, identity } = p;
  const server = app(config, log, p);
  const listen = parseListen(config.general.listen)!;
  await server.listen({ host: listen.host, port: listen.port }).catch(async (err: unknown) => {
    // The keyring file and the ingest workers are ours to close; the caller closes the store.
    identity.close();
    await ingest.stop();
    throw err;
  });
  const addr = server.server.address() as AddressInfo;
  await ingest.start();
  // Retention of failed/ (age; its size and count are bounded as files arrive) and of partial uploads.
  const spoolTimer = await startSpoolCleanup(ingest.spool, {
    failedRetention: config.spool.failed_retention, tmpRetention: config.spool.tmp_retention, interval: config.spool.cleanup_interval, log,
  });
  const background = startBackground(config, log, p);
  ops.start();
  p.notify.start();
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  log.info({ listen: `${host}:${addr.port}`, tls: !!p.tls, dataDir: config.general.data_dir, database: config.database.url ? 'postgresql' : 'sqlite' }, 'server started');
  let closing: Promise<void> | null = null;
  return {
    url: `${p.tls ? 'https' : 'http'}://${host}:${addr.port}`,
    port: addr.port, store, adminToken: p.adminToken, adminRoutes: server.adminRoutes, processors: ingest.processors,
    sweeper: ops.sweeper, metrics: p.metrics, identity, jobs: ops.jobs, dispatcher: p.notify.dispatcher,
    close() {
      closing ??= (async () => {
        clearInterval(spoolTimer);
        // The long polls answered below close their connections, as later answers do.
        server.drainConnections();
        // Linked relays hold connections the app's close would wait for: end them first.
        p.hub.close();
        // Event streams and long polls end now, or the app's close would wait for them.
        domain.events.close();
        await ops.stop();
        await p.notify.stop();
        await server.close();
        await background.stop();
        await ingest.stop();
        // After the processors: the last inventories may have touched nodes.
        await domain.generator.close();
        await p.replicas?.close();
        await store.close();
        identity.close();
      })();
      return closing;
    },
  };
}

/**
 * What runs in the background of a started server: the console's compliance history, indexing of
 * inventories stored by an older version, and the policy catch-up — at start (another server on
 * the same database, a crash mid-regeneration) and now and then (what no event announces:
 * status, state, providers); unchanged nodes cost a read, not a write.
 */
function startBackground(config: ServerConfig, log: Logger, p: Parts): { stop(): Promise<void> } {
  const { generator } = p.domain;
  const reindexer = reindexInventories(p.store, log, () => {
    generator.regenerateAll().catch((err: unknown) => log.warn({ err }, 'regenerating policies after indexing stored inventories failed'));
  });
  p.console?.history?.start();
  p.vulns.load().then(() => p.vulns.start(), (err: unknown) => log.warn({ err }, 'loading the vulnerability index failed'));
  const kept = new KeptSweeper({ store: p.store, settings: complianceSettings(config), intervalMs: config.compliance.kept_sweep_interval, step: config.compliance.kept_sweep_step, log });
  kept.start();
  const catchUp = generator.regenerateAll().then(
    (s) => log.info({ nodes: s.nodes, changed: s.changed, ms: Math.round(s.ms) }, 'policies checked'),
    (err: unknown) => log.warn({ err }, 'policy catch-up failed'),
  );
  const periodic = config.policy.regenerate_interval > 0 ? generator.every(config.policy.regenerate_interval) : null;
  const templates = config.policy.template_check_interval > 0 ? watchTemplates(generator, p.store, log, config.policy.template_check_interval) : null;
  return {
    async stop() {
      await p.console?.history?.stop();
      await p.vulns.stop();
      await kept.stop();
      await reindexer.stop();
      await catchUp;
      await periodic?.stop();
      await templates?.stop();
    },
  };
}
