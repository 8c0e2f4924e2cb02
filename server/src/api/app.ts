/**
 * capstan-server's HTTP app, built and not started: the agent-facing endpoints (so a relay's
 * upstream may be the server itself), /metrics, and the admin API behind the bearer token.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import type { BatchResult } from '@capstan/shared/batch';
import { isCapstanError } from '@capstan/shared/errors';
import type { Logger } from '@capstan/shared/log';
import type { SpoolKind } from '@capstan/shared/protocol';
import { installBodyPace, installCloseDrain, installErrorHandler, installJsonDepth, installRawBodies, listenerOptions, installUploadRoutes } from '@capstan/toolkit/http/app';
import type { BatchUpload } from '@capstan/toolkit/http/batch';
import { bodyPace } from '@capstan/toolkit/http/limits';
import type { ListenerTls } from '@capstan/toolkit/http/tls';
import { installVersionCheck } from '@capstan/toolkit/http/version';
import type { Spool } from '@capstan/toolkit/spool/spool';
import type { ServerConfig } from '../config.js';
import type { ServerMetrics } from '../metrics.js';
import type { Store } from '../reads.js';
import { adminAuthentication } from '../console/auth.js';
import { AggregateCache } from '../console/cache.js';
import type { ComplianceHistory } from '../console/history.js';
import { consolePublicRoutes, consoleReadRoutes } from '../console/routes.js';
import type { ConsoleSignIns } from '../console/signin.js';
import type { Asset } from '../console/static.js';
import { tokenResolver, type ResolveToken } from './auth.js';
import { checkAccess, installAudit } from './access.js';
import { AuthFailures, installAuthLimit } from './auth-limit.js';
import { adminRoutes } from './routes/admins.js';
import { checkAdminQuery, type Query } from './params.js';
import type { NodeIdentity } from '../identity/service.js';
import { relayAuthorizer } from '../identity/relay-auth.js';
import { RelayContacts } from '../registry/relay-contacts.js';
import type { Domain } from '../domain.js';
import { complianceRoutes } from './routes/compliance.js';
import { changeRoutes } from './routes/changes.js';
import { findingRoutes } from './routes/findings.js';
import { eventRoutes } from './routes/events.js';
import { subscriptionRoutes } from './routes/subscriptions.js';
import type { SubscriptionService } from '../notify/service.js';
import { complianceClock, complianceSettings } from '../registry/compliance.js';
import { jobRoutes, type JobRouteDeps } from './routes/jobs.js';
import { campaignRoutes, type CampaignRouteDeps } from './routes/campaigns.js';
import { bootstrapRoutes, type BootstrapRouteDeps } from './routes/bootstrap.js';
import { bootstrapRelayRoutes } from './routes/bootstrap-relay.js';
import type { BootstrapRunner } from '../bootstrap/runner.js';
import { remoteRunRoutes, type RemoteRunDeps } from './routes/remote-run.js';
import { identityAdminRoutes, identityPublicRoutes, inventoryTokenUploads } from './routes/identity.js';
import { lifecycleRoutes, type LifecycleView } from './routes/lifecycle.js';
import { nodeRoutes } from './routes/nodes.js';
import { claimRoutes } from './routes/claims.js';
import { managerAdminRoutes, managerRelayRoutes, type ManagerRouteDeps } from './routes/managers.js';
import { relayNodesRoutes } from './routes/relay-nodes.js';
import { policyAdminRoutes, policyAuthoringRoutes, policyMembershipRoutes, policyNodeRoutes, type PolicyRouteDeps } from './routes/policies.js';
import { changeRequestRoutes } from './routes/change-requests.js';
import { PlanBudget } from './plan-budget.js';
import { installReadBudget, ReadBudget } from './read-budget.js';
import { vulnRoutes } from './routes/vulns.js';
import type { VulnService } from '../vulns/service.js';
import { filterGroupMembers } from '../vulns/views.js';

export interface ServerAppDeps {
  config: ServerConfig;
  /** TLS for the listener (certificate, key, minVersion); absent → plain HTTP. */
  https?: ListenerTls;
  store: Store;
  /**
   * What the fleet-wide reads of the admin API and console (node lists, inventories, runs,
   * compliance, changes, findings, events) read: the store, or its replicas within a staleness
   * bound ([database] replicas). Absent: the store.
   */
  reads?: Store;
  spool: Spool;
  log: Logger;
  adminToken: string;
  /** Files waiting per kind and failed counts, for /api/1/system/status. */
  status: () => Promise<Record<string, unknown>>;
  /** An upload is durably spooled (the 2xx follows). */
  onAccepted?: (kind: SpoolKind, name: string) => void;
  /**
   * Run logs up to `keepBytes` are handed over in memory just before they appear in incoming/,
   * so that ingesting them needs no read (see AcceptOptions.onWritten).
   */
  runLogsInMemory?: { keepBytes: number; onWritten: (name: string, data: Buffer) => void };
  /** How the files of an upload batch (`POST /batch/<kind>`) are taken (ingest/batch.ts); absent: no batch route. */
  takeBatch?: (kind: SpoolKind, files: BatchUpload[]) => Promise<BatchResult[]>;
  /** Resolves true once the ingest is done with an uploaded file, false after `ms` (absent: never waited for). */
  ingested?: (kind: SpoolKind, name: string, ms: number) => Promise<boolean>;
  /** Prometheus metrics for GET /metrics (absent: no route). */
  metrics?: ServerMetrics;
  /** The lifecycle policy and last sweep, for GET /api/1/lifecycle. */
  lifecycle?: LifecycleView;
  /** Node identity tokens and the keyring (absent: no identity routes). */
  identity?: NodeIdentity;
  /**
   * The policy routes' settings (absent: no policy routes): the signing key, how a node's
   * download is authorized, the shared folder, the plan's size limit. The model, its
   * generation and the bundles are the domain's.
   */
  policy?: Omit<PolicyRouteDeps, 'service' | 'bundles' | 'reads'>;
  /** The clock compliance is read with (time states); the system clock when absent. */
  now?: () => Date;
  /** Jobs (absent: no job routes). */
  jobs?: JobRouteDeps;
  /** Patch campaigns (absent: no such routes). */
  campaigns?: CampaignRouteDeps;
  /** SSH credentials and pinned host keys for bootstrap jobs (absent: no such routes). */
  bootstrap?: Omit<BootstrapRouteDeps, 'store'>;
  /** Runs bootstrap tasks, its own and those relays claim (absent: [bootstrap] enabled = false). */
  bootstrapRunner?: BootstrapRunner;
  /** Managers: admin routes always; how server-hosted managers are polled. */
  managers?: Omit<ManagerRouteDeps, 'store' | 'service'>;
  /** The remote-run link relays hold to the server (absent: no such endpoints). */
  remoteRun?: RemoteRunDeps;
  /**
   * Who a bearer token (or the token a console sign-in was made with) belongs to. Absent: the
   * bootstrap admin's token and the named admins' (auth.ts tokenResolver).
   */
  resolveToken?: ResolveToken;
  /** The web console: sign-ins, its built files, compliance history (absent: no console, bearer tokens only). */
  console?: { signIns: ConsoleSignIns; assets: Map<string, Asset>; history: ComplianceHistory | null };
  /**
   * The domain over `store` (domain.ts): the one door for node changes with its effects, the
   * policy's, and the audit log they write.
   */
  domain: Domain;
  /** Subscriptions to the event stream (absent: no subscription routes; the command line has none). */
  subscriptions?: SubscriptionService;
  /** Vulnerabilities: feeds, findings, mutes (absent: no such routes). */
  vulns?: VulnService;
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The principal an admin token stands for (bootstrap or named admin), or null. */
    resolveToken: ResolveToken;
    /** Every admin API route as `METHOD /pattern` (each must be in access.ts's table). */
    adminRoutes: readonly string[];
    /** From now on every answer closes its connection (a stop begins). */
    drainConnections: () => void;
  }
}

export function buildApp(deps: ServerAppDeps): FastifyInstance {
  const app = Fastify({
    logger: false,
    // Header timeout and size, TLS, coded answers to the parser's and router's refusals.
    ...listenerOptions(deps.config.http, deps.https),
    bodyLimit: deps.config.limits.max_body_size,
  }) as unknown as FastifyInstance;
  installErrorHandler(app, deps.log);
  app.decorate('drainConnections', installCloseDrain(app));
  // Capstan agents and relays outside the supported version window are told which side to upgrade.
  installVersionCheck(app);
  installRawBodies(app);
  // JSON and form bodies read whole follow the same pace as uploads ([http] body_timeout, min_upload_rate).
  installBodyPace(app, bodyPace(deps.config.http));
  installJsonDepth(app, deps.config.limits.max_json_depth);
  uploads(app, deps);
  const policy = policyDeps(deps);
  const relayContacts = agentFacing(app, deps, policy);
  const resolveToken = deps.resolveToken ?? tokenResolver({ adminToken: deps.adminToken, admins: deps.store.admins, log: deps.log });
  app.decorate('resolveToken', resolveToken);
  const adminRouteKeys: string[] = [];
  app.decorate('adminRoutes', adminRouteKeys);
  // Before the routes that authenticate: an address guessing tokens is refused before it is heard.
  installAuthLimit(app, {
    failures: new AuthFailures({ limit: deps.config.limits.auth_failures, windowMs: deps.config.limits.auth_failure_window }),
    audit: deps.domain.audit, log: deps.log,
  });
  if (deps.console) consolePublicRoutes(app, { signIns: deps.console.signIns, resolveToken, assets: deps.console.assets, reviewRoles: deps.config.policy.review_roles });
  app.register(async (admin) => {
    admin.addHook('onRoute', (o) => {
      for (const m of [o.method].flat()) if (m !== 'HEAD') adminRouteKeys.push(`${m} ${o.url}`);
    });
    // Who is calling (a bearer token, or the console's sign-in cookie with its CSRF token on
    // writes), then may they (access.ts), then the query.
    admin.addHook('onRequest', adminAuthentication({ resolveToken, ...(deps.console && { signIns: deps.console.signIns }) }));
    admin.addHook('onRequest', checkAccess);
    admin.addHook('onRequest', async (req) => checkAdminQuery(req.method, req.routeOptions.url, req.query as Query));
    // Filters and exports at once, per caller and in all (read-budget.ts).
    installReadBudget(admin, new ReadBudget({ perCaller: deps.config.limits.expensive_reads_per_caller, total: deps.config.limits.expensive_reads_total }));
    installAudit(admin, { audit: deps.domain.audit });
    adminApi(admin, deps, policy);
  });
  app.addHook('onClose', async () => relayContacts.stop());
  return app;
}

/** The policy routes' deps, when this app serves policies (a key, and the domain's bundles). */
function policyDeps(deps: ServerAppDeps): PolicyRouteDeps | null {
  const bundles = deps.domain.bundles;
  const c = deps.config.policy;
  const planBudget = new PlanBudget({ timeLimitMs: c.plan_time_limit, perCaller: c.plan_concurrency, total: c.plan_concurrency_total, memoryBytes: c.plan_memory_limit });
  return deps.policy && bundles ? { planBudget, ...deps.policy, service: deps.domain.policy, bundles, reads: deps.store } : null;
}

/** Agents' and relays' uploads (one by one and in batches), with the refusals counted by code. */
function uploads(app: FastifyInstance, deps: ServerAppDeps): void {
  // Refused uploads by code: what anyone on the network is sending that the server turns away.
  const uploadMetrics = deps.metrics;
  if (uploadMetrics) {
    app.addHook('onError', async (req, _reply, err) => {
      const m = /^\/(reports|inventories|inventory-updates)\/:file$/.exec(req.routeOptions.url ?? '');
      if (m) uploadMetrics.onRefused(m[1] === 'reports' ? 'reports' : 'inventories', isCapstanError(err) ? err.code : 'ERR_INTERNAL');
    });
  }
  // An agent talking to the server itself may get its node token in the answer to its inventory.
  const tokens = deps.identity && inventoryTokenUploads(deps.identity, deps.config.limits.max_decompressed_size, deps.log,
    deps.ingested && { ingested: deps.ingested, waitMs: deps.config.enrollment.token_wait });
  const inMemory = deps.runLogsInMemory;
  const http = deps.config.http;
  installUploadRoutes(app, {
    spool: deps.spool,
    maxBytes: deps.config.limits.max_body_size,
    pace: bodyPace(http),
    maxPerClient: http.max_uploads_per_client,
    maxUploads: http.max_uploads,
    onAccepted: (kind, name) => deps.onAccepted?.(kind, name),
    ...tokens,
    keepBytes: (kind, req) => {
      if (kind === 'reports') return inMemory?.keepBytes ?? 0;
      const keep = tokens?.keepBytes;
      return typeof keep === 'function' ? keep(kind, req) : (keep ?? 0);
    },
    ...(inMemory && { onWritten: (kind: SpoolKind, name: string, data: Buffer) => (kind === 'reports' ? inMemory.onWritten(name, data) : undefined) }),
    ...(deps.takeBatch && {
      batch: {
        maxFiles: http.max_batch_files, maxBytes: http.max_batch_size, maxMemory: http.max_batch_memory, take: deps.takeBatch,
        ...(uploadMetrics && { onRefused: (kind: SpoolKind, code: string) => uploadMetrics.onRefused(kind, code) }),
      },
    }),
  });
}

/**
 * What agents and relays call besides uploads: /uuid, the accepted-nodes list relays route by,
 * identity (JWKS, renewal), /metrics, policies, remote-run links, the managers and bootstrap
 * tasks relays host. A relay sends no inventory and no run: its renewals, its requests and its
 * link are its contacts (RelayContacts), so that it is reachable while linked.
 */
function agentFacing(app: FastifyInstance, deps: ServerAppDeps, policy: PolicyRouteDeps | null): RelayContacts {
  const { identity, config } = deps;
  app.get('/uuid', async (_req, reply) => reply.type('text/plain').send(`${config.general.node_id}\n`));
  relayNodesRoutes(app, {
    store: deps.store,
    rootId: config.general.node_id,
    // Fresh (not the JWKS route's short-lived copy): a deletion by another server shows at once.
    ...(identity && { keys: async () => (await identity.jwks(true)).keys.map((k) => k.kid as string).sort() }),
  });
  const relayContacts = new RelayContacts({
    store: deps.domain.nodes,
    log: deps.log,
    unreachableAfterMs: config.lifecycle.run_interval * config.lifecycle.missed_runs,
  });
  if (identity) identityPublicRoutes(app, identity, relayContacts);
  const metrics = deps.metrics;
  // Unauthenticated, like the relay's: counts only, no node names.
  if (metrics) app.get('/metrics', async (_req, reply) => reply.type(metrics.contentType()).send(await metrics.text()));
  if (policy) policyNodeRoutes(app, policy);
  // What only a relay may do needs a relay's own token, unless identity.require_relay_token is off.
  const authorizeRelay = config.identity.require_relay_token ? relayAuthorizer(identity, deps.store, relayContacts) : undefined;
  if (deps.remoteRun) {
    remoteRunRoutes(app, { ...deps.remoteRun, ...(authorizeRelay && { authorizeRelay }) });
    const hub = deps.remoteRun.hub;
    // Only links let in with a relay token (they carry its `until`): without the check, the id in
    // the path is anyone's claim. One past its token's end is about to be ended by the hub.
    relayContacts.start(() => {
      const now = Date.now();
      return hub.all().filter((r) => r.until !== undefined && r.until > now).map((r) => r.id);
    });
  }
  // Relays fetch the managers they host and post what they discover (outbound from the relay)…
  managerRelayRoutes(app, deps.store, deps.domain.managers, authorizeRelay);
  // …and run the bootstrap of the nodes those managers hold (outbound from the relay too).
  bootstrapRelayRoutes(app, { ...(deps.bootstrapRunner && { runner: deps.bootstrapRunner }), ...(authorizeRelay && { authorizeRelay }) });
  return relayContacts;
}

/** The admin API's routes (behind authentication, the role check and the audit hook). */
function adminApi(admin: FastifyInstance, deps: ServerAppDeps, policy: PolicyRouteDeps | null): void {
  const { store, domain } = deps;
  // Fleet-wide reads (possibly from replicas); claims and every write go to the store.
  const reads = deps.reads ?? store;
  const settings = complianceSettings(deps.config);
  const now = deps.now ? { now: deps.now } : {};
  // Recent copies of fleet-wide compliance aggregates, for requests with max_age (the console's).
  const aggregates = new AggregateCache();
  adminRoutes(admin, { admins: store.admins, service: domain.admins });
  if (policy) {
    policyAdminRoutes(admin, policy);
    policyMembershipRoutes(admin, policy);
    policyAuthoringRoutes(admin, policy);
    changeRequestRoutes(admin, domain.reviews, policy.planBudget);
  }
  // The node list's compliance sort judges each node at the moment of the request.
  nodeRoutes(admin, reads, domain.nodes, deps.log, () => complianceClock(settings, (deps.now ?? (() => new Date()))()));
  claimRoutes(admin, store, domain.nodes);
  complianceRoutes(admin, { store: reads, settings, cache: aggregates, ...now });
  changeRoutes(admin, reads, aggregates);
  findingRoutes(admin, reads);
  if (deps.vulns) {
    vulnRoutes(admin, {
      store: deps.vulns.deps.store, service: deps.vulns, groupMembers: filterGroupMembers(deps.vulns.deps.store), ...now,
      clock: () => complianceClock(settings, (deps.now ?? (() => new Date()))()),
    });
  }
  eventRoutes(admin, domain.events);
  if (deps.subscriptions) subscriptionRoutes(admin, store, deps.subscriptions);
  lifecycleRoutes(admin, reads, deps.lifecycle, aggregates);
  if (deps.jobs) jobRoutes(admin, deps.jobs);
  if (deps.campaigns) campaignRoutes(admin, deps.campaigns);
  if (deps.bootstrap) bootstrapRoutes(admin, { store, ...deps.bootstrap });
  managerAdminRoutes(admin, { store, service: domain.managers, ...deps.managers });
  // A forced renewal ends the links the renewed relays hold: they reconnect with a new token.
  const links = deps.remoteRun?.hub;
  if (deps.identity) identityAdminRoutes(admin, deps.identity, links && ((ids) => {
    for (const r of links.all()) if (ids === 'all' || ids.includes(r.id)) links.end(r.id, 'token_revoked');
  }));
  admin.get('/api/1/system/status', async () => ({ data: await deps.status() }));
  consoleReadRoutes(admin, { store: reads, settings, history: deps.console?.history ?? null, cache: aggregates, ...now });
}
