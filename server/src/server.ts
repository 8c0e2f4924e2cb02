/**
 * Wires capstan-server: store, spool, ingest processors, the lifecycle sweep, metrics and the
 * HTTP app. `startServer` is what cli.ts runs; it receives config and a logger, never argv.
 */
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { parseListen } from '@capstan/shared/config';
import { makeDir } from '@capstan/shared/dir';
import { capstanError } from '@capstan/shared/errors';
import type { Logger } from '@capstan/shared/log';
import { SPOOL_KINDS, type SpoolKind } from '@capstan/shared/protocol';
import { loadListenerTls } from '@capstan/toolkit/http/tls';
import { startSpoolCleanup } from '@capstan/toolkit/spool/housekeeping';
import { SpoolProcessor, type ProcessedEvent } from '@capstan/toolkit/spool/processor';
import { RecentBodies } from '@capstan/toolkit/spool/recent';
import { Spool } from '@capstan/toolkit/spool/spool';
import { buildApp } from './api/app.js';
import { reindexInventories } from './ingest/reindex.js';
import { Poller } from '@capstan/toolkit/providers/index';
import { recordToSpec } from './providers/managers.js';
import { ensureAdminToken } from './api/auth.js';
import { ComplianceHistory } from './console/history.js';
import { ConsoleSignIns, ensureConsoleSecret } from './console/signin.js';
import { CONSOLE_DIR, loadAssets } from './console/static.js';
import { complianceClock, complianceSettings } from './registry/compliance.js';
import type { ServerConfig } from './config.js';
import { authorizeNodeToken } from './api/routes/identity.js';
import { NodeIdentity } from './identity/service.js';
import { identitySettings } from './identity/settings.js';
import { ingestInventory } from './ingest/inventory.js';
import { handleOcsUpload } from './ingest/ocs-ingest.js';
import { JobRunner } from './jobs/runner.js';
import { JobService } from './jobs/service.js';
import { BootstrapRunner } from './bootstrap/runner.js';
import { CredentialService } from './bootstrap/service.js';
import { AgentPackages } from '@capstan/toolkit/bootstrap/packages';
import { RelayHub } from './remote-run/relay-links.js';
import { RunLogIngest, type IngestDeps } from './ingest/runlog.js';
import { batchTaker } from './ingest/batch.js';
import { ServerMetrics } from './metrics.js';
import { enrollmentRules } from './registry/enrollment.js';
import { lifecyclePolicy, Sweeper } from './registry/lifecycle.js';
import { openRegistry } from './registry/open.js';
import { composeDomain } from './domain.js';
import { systemActor } from './audit/actor.js';

/** Polls this server makes itself act as `discovery`. */
const DISCOVERY = systemActor('discovery');
import { ensurePolicyKey } from './policy/key.js';
import type { Store } from './store/store.js';

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
          onIdleError: (err) => log.warn({ err }, 'database connection lost while idle'),
          onMaintenance: (message, err) => log.warn({ err }, message),
        }
      : { sqlitePath: join(dataDir, 'capstan.db'), runBaseCacheBytes: config.database.run_base_cache },
  );
  try {
    return await startOnStore(config, log, store);
  } catch (err) {
    await store.close().catch(() => undefined);
    throw err;
  }
}

async function startOnStore(config: ServerConfig, log: Logger, store: Store): Promise<ServerHandle> {
  const dataDir = config.general.data_dir;
  // Read before anything is started: a bad certificate is a configuration error (exit 2).
  const listenerTls = await loadListenerTls(config.tls);
  const adminToken = await ensureAdminToken(dataDir);
  const consoleParts = config.console.enabled ? await startConsole(config, store, log, !!listenerTls) : null;
  const policyKey = await ensurePolicyKey(dataDir);
  const spool = new Spool({
    root: join(dataDir, 'spool'),
    maxFileBytes: config.limits.max_body_size,
    writerThreads: config.processing.writer_threads,
    recycleFiles: config.processing.recycle_files,
    recycleBytes: config.processing.recycle_size,
    minFreeBytes: config.spool.min_free_space,
    failedMaxFiles: config.spool.failed_max_files,
    failedMaxBytes: config.spool.failed_max_size,
  });
  await spool.init();
  // Today's run storage exists before the first run arrives (Postgres day partitions).
  await store.prepareRunStorage(new Date());

  // The one door for node changes (API, CLI, ingest, relay contacts, discovery, the sweep), each
  // recorded in the audit log with who acted; what follows a change is wired to it below.
  const relayHub = new RelayHub(config.jobs.heartbeat);
  const domain = composeDomain({ store, log, key: policyKey, links: relayHub, reviewRoles: config.policy.review_roles });
  const { nodes, generator } = domain;
  if (config.signatures.allow_sha1) log.warn('SHA-1 signatures are accepted on run logs, inventories and renewal requests ([signatures] allow_sha1)');
  const deps: IngestDeps = {
    store,
    nodes,
    limits: {
      maxDecompressedBytes: config.limits.max_decompressed_size,
      maxReports: config.limits.max_reports,
      maxLineBytes: config.limits.max_line_length,
      changes: {
        maxPerRun: config.changes.max_per_run,
        maxMessageChars: config.changes.max_message_length,
        maxDiffChars: config.changes.max_diff_length,
      },
      allowSha1: config.signatures.allow_sha1,
      maxClockSkewMs: config.limits.max_clock_skew,
      ocs: { maxBytes: config.limits.ocs_max_size, maxDepth: config.limits.ocs_max_depth, maxElements: config.limits.ocs_max_elements },
    },
    enrollment: enrollmentRules(config.enrollment),
  };
  // Run logs: CPU work on worker threads, inserts grouped several per transaction (ingest/runlog.ts).
  const runLogs = new RunLogIngest({
    ...deps,
    workers: config.processing.workers,
    workerHoldBytes: config.processing.worker_hold_size,
    batchSize: config.processing.batch_size,
    batchWindowMs: config.processing.batch_window,
    // PostgreSQL: a few batches at once, each on its own connection (the rest serve the API).
    parallelBatches: config.database.url ? Math.max(1, Math.min(4, config.database.pool_size - 1)) : 1,
  });
  // Run logs just uploaded, in memory until their ingest takes them (the file stays the truth).
  const recentRunLogs = new RecentBodies(16 * 1024 * 1024);
  const runLogWritten = (name: string, data: Buffer): void => {
    processors.reports.expect(name);
    recentRunLogs.put(name, data);
  };
  const metrics = new ServerMetrics({ depth: () => spool.depth(), counts: () => store.counts(), failed: () => spool.failedUsage });
  const counters: Record<string, number> = {};
  const processors = {} as Record<SpoolKind, SpoolProcessor>;
  for (const kind of SPOOL_KINDS) {
    const p = new SpoolProcessor({
      kind,
      spool,
      log,
      // A run log's handler waits for its batch's commit: enough of them in flight to fill one.
      concurrency: kind === 'reports' ? Math.max(config.processing.concurrency, runLogs.inFlightHint) : config.processing.concurrency,
      catchupIntervalMs: config.processing.catchup_interval,
      retryMinMs: config.processing.retry_min,
      retryMaxMs: config.processing.retry_max,
      handle: async (path, name) => {
        if (kind === 'reports') {
          const r = await runLogs.ingest(path, name, recentRunLogs.take(name));
          log.info({ file: name, runId: r.runId, duplicate: !r.inserted }, r.inserted ? 'run stored' : 'run already stored');
        } else {
          // A RUDDER agent's OCS inventory is verified with the `.sign` uploaded beside it.
          const node = await handleOcsUpload(spool, name, config.limits.ocs_pair_wait, (data) => processors.inventories.prompt(data),
            (ocsSignature) => ingestInventory(deps, path, name, { ocsSignature })) ?? await ingestInventory(deps, path, name);
          // Dynamic groups follow the inventory (and an auto-accepted node gets its policy now):
          // the registry's effects regenerate the node's policy.
          log.info({ file: name, nodeId: node.id, accepted: node.accepted }, 'inventory stored');
        }
      },
    });
    p.on('processed', (e: ProcessedEvent) => {
      const k = `${kind}_${e.outcome}`;
      counters[k] = (counters[k] ?? 0) + 1;
      metrics.onProcessed(e);
    });
    processors[kind] = p;
  }

  // The keyring lives in the registry database, its private keys sealed with the secret file.
  const identity = await NodeIdentity.open({
    dataDir, secretFile: config.identity.secret_file, store, log, ...identitySettings(config.identity), allowSha1: config.signatures.allow_sha1,
  });
  const policy = lifecyclePolicy(config);
  const sweeper = new Sweeper({ store, nodes, policy, intervalMs: config.lifecycle.sweep_interval, log });
  sweeper.on('sweep', (r) => metrics.onSweep(r));
  // Jobs reach the nodes through the relays that link here (remote-run, outbound from them).
  const jobs = new JobRunner({
    store, hub: relayHub, log,
    sweepIntervalMs: config.jobs.sweep_interval,
    retentionMs: config.jobs.retention,
    answerWaitMs: config.jobs.answer_wait,
    maxOutputBytes: config.jobs.max_output,
  });

  // Bootstrap jobs: agents installed over SSH from this server (docs/bootstrap.md).
  const bootstrap = config.bootstrap.enabled
    ? new BootstrapRunner({
      store, log, sealer: identity.keySealer,
      packages: new AgentPackages({
        dir: config.bootstrap.package_dir || join(dataDir, 'packages'),
        url: config.bootstrap.package_url,
        sha256: config.bootstrap.package_sha256,
        maxBytes: config.bootstrap.max_package_size,
        cacheDir: join(dataDir, 'packages', 'downloaded'),
      }),
      settings: config.bootstrap,
      sweepIntervalMs: config.jobs.sweep_interval,
      ...(config.bootstrap.package_url && { packageSource: { url: config.bootstrap.package_url, sha256: config.bootstrap.package_sha256.toLowerCase() } }),
    })
    : null;

  // Managers whose provider is `server` are polled here; each poll goes straight to the registry.
  const providers = config.providers.enabled
    ? new Poller({
      managers: async () => (await store.managers.listManagers('server')).map(recordToSpec),
      report: async (spec, outcome, at) => {
        const summary = await domain.managers.poll(spec.id, outcome, DISCOVERY, at);
        if (summary) log.debug({ manager: spec.id, ...summary }, 'discovery poll applied');
      },
      refreshMs: config.providers.refresh_interval,
      log,
    })
    : null;

  const app = buildApp({
    config,
    domain,
    ...(listenerTls ? { https: listenerTls } : {}),
    store,
    spool,
    log,
    adminToken,
    metrics,
    lifecycle: { policy, last: () => sweeper.last },
    identity,
    status: async () => ({ spool: await spool.depth(), failed: spool.failedUsage, processed: { ...counters }, remote_run: { relays: relayHub.all().map((r) => r.id) } }),
    // Taken at once rather than when inotify says so, and without reading the file back.
    onAccepted: (kind, name) => processors[kind].notify(name),
    runLogsInMemory: { keepBytes: 1024 * 1024, onWritten: runLogWritten },
    // Relays send their run logs up in batches, ingested from memory (ingest/batch.ts).
    takeBatch: batchTaker({
      spool, runLogs, log,
      maxInMemory: config.processing.max_in_memory,
      written: runLogWritten,
      spooled: (kind, name) => processors[kind].notify(name),
      processed: (e) => {
        const k = `${e.kind}_${e.outcome}`;
        counters[k] = (counters[k] ?? 0) + 1;
        metrics.onProcessed(e);
      },
    }),
    // Policy downloads need a valid token of the node, unless turned off.
    policy: { key: policyKey, sharedFolder: config.policy.shared_folder, maxPlanBytes: config.policy.max_plan_size, ...(config.identity.require_token ? { authorizeNode: authorizeNodeToken(identity) } : {}) },
    jobs: {
      store,
      liveOutput: (jobId, nodeId) => jobs.liveOutput(jobId, nodeId),
      service: new JobService({
        store, audit: domain.audit,
        kick: { run: () => jobs.kick(), ...(bootstrap && { bootstrap: () => bootstrap.kick() }) },
        limits: {
          defaultTimeoutMs: config.jobs.default_timeout, maxTargets: config.jobs.max_targets,
          bootstrapEnabled: config.bootstrap.enabled, bootstrapRelayUrl: config.bootstrap.relay_url,
        },
      }),
    },
    bootstrap: { credentials: new CredentialService({ store, sealer: identity.keySealer, audit: domain.audit }) },
    ...(bootstrap && { bootstrapRunner: bootstrap }),
    remoteRun: { hub: relayHub, runner: jobs, log, nodeId: config.general.node_id, heartbeatMs: config.jobs.heartbeat },
    ...(consoleParts && { console: consoleParts }),
    managers: {
      // A manager created a moment ago is not in the poller's list yet: refresh first.
      ...(providers && { pollNow: async (id: string) => { await providers.refresh(); await providers.pollNow(id); } }),
    },
  });
  const listen = parseListen(config.general.listen)!;
  await app.listen({ host: listen.host, port: listen.port }).catch((err: unknown) => {
    // The keyring file and the ingest workers are ours to close; the caller closes the store.
    identity.close();
    void runLogs.close();
    throw err;
  });
  const addr = app.server.address() as AddressInfo;
  for (const kind of SPOOL_KINDS) await processors[kind].start();
  // Retention of failed/ (age; its size and count are bounded as files arrive) and of partial uploads.
  const spoolTimer = await startSpoolCleanup(spool, {
    failedRetention: config.spool.failed_retention, tmpRetention: config.spool.tmp_retention, interval: config.spool.cleanup_interval, log,
  });
  sweeper.start();
  const reindexer = reindexInventories(store, log, () => {
    generator.regenerateAll().catch((err: unknown) => log.warn({ err }, 'regenerating policies after indexing stored inventories failed'));
  });
  consoleParts?.history?.start();
  jobs.start();
  bootstrap?.start();
  providers?.start();
  // Catch up with model or registry changes this process did not see (another server on the
  // same database, a crash mid-regeneration): unchanged nodes cost a read, not a write.
  const catchUp = generator.regenerateAll().then(
    (s) => log.info({ nodes: s.nodes, changed: s.changed, ms: Math.round(s.ms) }, 'policies checked'),
    (err: unknown) => log.warn({ err }, 'policy catch-up failed'),
  );
  // And again now and then: what no event announces (status, state, providers) moves nodes too.
  const periodicPolicies = config.policy.regenerate_interval > 0 ? generator.every(config.policy.regenerate_interval) : null;
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  log.info({ listen: `${host}:${addr.port}`, tls: !!listenerTls, dataDir, database: config.database.url ? 'postgresql' : 'sqlite' }, 'server started');

  let closing: Promise<void> | null = null;
  return {
    url: `${listenerTls ? 'https' : 'http'}://${host}:${addr.port}`,
    port: addr.port,
    store,
    adminToken,
    adminRoutes: app.adminRoutes,
    processors,
    sweeper,
    metrics,
    identity,
    jobs,
    close() {
      closing ??= (async () => {
        clearInterval(spoolTimer);
        // Linked relays hold connections app.close() would wait for: end them first.
        relayHub.close();
        await jobs.stop();
        await bootstrap?.stop();
        await providers?.stop();
        await app.close();
        await consoleParts?.history?.stop();
        await sweeper.stop();
        await reindexer.stop();
        await catchUp;
        await periodicPolicies?.stop();
        for (const kind of SPOOL_KINDS) await processors[kind].stop();
        await runLogs.close();
        // After the processors: the last inventories may have touched nodes.
        await generator.settled();
        await store.close();
        identity.close();
      })();
      return closing;
    },
  };
}

/**
 * The web console's parts: the sign-in secret (made at the first start), its built files, and
 * the compliance history its graph reads. A console that was not built answers `/` with how to
 * build it; the API is the same either way.
 */
async function startConsole(config: ServerConfig, store: Store, log: Logger, tls: boolean) {
  const dataDir = config.general.data_dir;
  const secret = await ensureConsoleSecret(config.console.secret_file || join(dataDir, 'console.secret')).catch((err: Error) => {
    throw capstanError('ERR_STARTUP', `console secret: ${err.message}`);
  });
  const signIns = new ConsoleSignIns({ secret, ttlMs: config.console.signin_ttl, secure: tls });
  const assets = await loadAssets(CONSOLE_DIR);
  if (!assets.has('/index.html')) log.warn({ dir: CONSOLE_DIR }, 'the web console is not built (npm run build): / answers 404');
  const settings = complianceSettings(config);
  const history = config.console.history_interval > 0
    ? new ComplianceHistory({
      file: join(dataDir, 'compliance-history.jsonl'),
      intervalMs: config.console.history_interval,
      retentionMs: config.console.history_retention,
      summary: () => store.complianceSummary([], complianceClock(settings)),
      log,
    })
    : null;
  await history?.load();
  return { signIns, assets, history };
}
