/**
 * What the server runs beside ingest: the lifecycle sweep, the job runner (remote runs through
 * the relays' links), the bootstrap runner (agents installed over SSH), the discovery poller of
 * the managers it hosts, and the doors the API takes jobs and credentials through.
 */
import { capstanError } from '@capstan/shared/errors';
import { CampaignRunner } from '../campaigns/runner.js';
import { CampaignService } from '../campaigns/service.js';
import { join } from 'node:path';
import type { Logger } from '@capstan/shared/log';
import { AgentPackages } from '@capstan/toolkit/bootstrap/packages';
import { Poller } from '@capstan/toolkit/providers/index';
import { systemActor } from '../audit/actor.js';
import { BootstrapRunner } from '../bootstrap/runner.js';
import { CredentialService } from '../bootstrap/service.js';
import type { ServerConfig } from '../config.js';
import type { Domain } from '../domain.js';
import type { NodeIdentity } from '../identity/service.js';
import { JobRunner } from '../jobs/runner.js';
import { JobService, jobLimits } from '../jobs/service.js';
import type { ServerMetrics } from '../metrics.js';
import { recordToSpec } from '../providers/managers.js';
import { lifecyclePolicy, Sweeper, type LifecyclePolicy } from '../registry/lifecycle.js';
import type { RelayHub } from '../remote-run/relay-links.js';
import type { Store } from '../store/store.js';
import type { PolicyKeyring } from '../policy/key.js';
import type { VulnerabilityFix, VulnerabilityFixResolver } from '../campaigns/vulnerability.js';
import { fixPlan } from '../vulns/fix-plan.js';
import { filterGroupMembers } from '../vulns/views.js';

/** Polls this server makes itself act as `discovery`. */
const DISCOVERY = systemActor('discovery');

export interface Operations {
  policy: LifecyclePolicy;
  sweeper: Sweeper;
  jobs: JobRunner;
  bootstrap: BootstrapRunner | null;
  jobService: JobService;
  campaigns: CampaignRunner;
  campaignService: CampaignService;
  credentials: CredentialService;
  /** Poll a server-hosted manager now (absent: the server hosts no providers). */
  pollNow?: (id: string) => Promise<void>;
  start(): void;
  stop(): Promise<void>;
}

function bootstrapRunner(config: ServerConfig, store: Store, log: Logger, identity: NodeIdentity, policyKey?: PolicyKeyring): BootstrapRunner | null {
  if (!config.bootstrap.enabled) return null;
  const b = config.bootstrap;
  const dataDir = config.general.data_dir;
  return new BootstrapRunner({
    store, log, sealer: identity.keySealer,
    packages: new AgentPackages({
      dir: b.package_dir || join(dataDir, 'packages'),
      url: b.package_url,
      sha256: b.package_sha256,
      maxBytes: b.max_package_size,
      cacheDir: join(dataDir, 'packages', 'downloaded'),
    }),
    settings: b,
    sweepIntervalMs: config.jobs.sweep_interval,
    ...(b.package_url && { packageSource: { url: b.package_url, sha256: b.package_sha256.toLowerCase() } }),
    ...(policyKey && { policyKeyPem: () => policyKey.current().publicKeyPem }),
  });
}

export function operations(config: ServerConfig, log: Logger, store: Store, domain: Domain, identity: NodeIdentity, hub: RelayHub, metrics: ServerMetrics, policyKey?: PolicyKeyring): Operations {
  const policy = lifecyclePolicy(config);
  const sweeper = new Sweeper({ store, nodes: domain.nodes, policy, intervalMs: config.lifecycle.sweep_interval, log });
  sweeper.on('sweep', (r) => metrics.onSweep(r));
  // Jobs reach the nodes through the relays that link here (remote-run, outbound from them).
  const jobs = new JobRunner({
    store, hub, log,
    sweepIntervalMs: config.jobs.sweep_interval,
    retentionMs: config.jobs.retention,
    answerWaitMs: config.jobs.answer_wait,
    maxOutputBytes: config.jobs.max_output,
  });
  const bootstrap = bootstrapRunner(config, store, log, identity, policyKey);
  // Managers whose provider is `server` are polled here; each poll goes to the registry.
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
  const jobService = new JobService({
    store, audit: domain.audit,
    kick: { run: () => jobs.kick(), ...(bootstrap && { bootstrap: () => bootstrap.kick() }) },
    limits: jobLimits(config),
  });
  // Patch campaigns make upgrade jobs wave by wave, in their windows.
  const campaigns = new CampaignRunner({
    store, log, tickMs: config.campaigns.tick_interval, kickJobs: () => jobs.kick(),
    settings: { pollMs: config.campaigns.tick_interval, retryDelayMs: config.campaigns.retry_delay, maxJobMs: config.jobs.default_timeout },
  });
  const campaignService = new CampaignService({
    store, audit: domain.audit, jobs: campaigns.jobs, kick: () => campaigns.kick(), vulnerabilities: vulnerabilityFixes(store, domain),
    limits: { maxTargets: config.jobs.max_targets, defaultMaxAttempts: config.campaigns.max_attempts },
  });
  return {
    policy, sweeper, jobs, bootstrap, jobService, campaigns, campaignService,
    credentials: new CredentialService({ store, sealer: identity.keySealer, audit: domain.audit }),
    // A manager created a moment ago is not in the poller's list yet: refresh first.
    ...(providers && { pollNow: async (id: string) => { await providers.refresh(); await providers.pollNow(id); } }),
    start() {
      sweeper.start();
      jobs.start();
      campaigns.start();
      bootstrap?.start();
      providers?.start();
    },
    async stop() {
      await campaigns.stop();
      await jobs.stop();
      await bootstrap?.stop();
      await providers?.stop();
      await sweeper.stop();
    },
  };
}

/**
 * A campaign made from a vulnerability (`"vulnerability": "CVE-…"`): the installed packages its
 * fix upgrades, on the nodes still exposed (muted findings left out). The feed's fixed version is
 * a source version on Debian and Ubuntu, so it becomes the minimum only of a binary package named
 * as its source (openssl, not libssl3, whose own version may differ by a binNMU or an epoch); the
 * next inventory shows whether every finding closed. A vulnerability with no published fix for
 * any of its packages is refused: there is nothing to upgrade to.
 */
function vulnerabilityFixes(store: Store, domain: Domain): VulnerabilityFixResolver {
  return {
    async resolveVulnerabilityFix(id: string): Promise<VulnerabilityFix> {
      const plan = await fixPlan({ store, groupMembers: filterGroupMembers(store) }, id);
      const fixable = plan.packages.filter((p) => p.fixed !== null);
      if (fixable.length === 0) {
        throw capstanError('ERR_BAD_REQUEST', `${id}: no fixed version is published for ${plan.packages.map((p) => p.name).join(', ') || 'its packages'}, so there is nothing to upgrade to`);
      }
      const packages = new Map<string, string | undefined>();
      for (const p of fixable) {
        for (const installed of p.packages) packages.set(installed, installed === p.name ? p.fixed! : packages.get(installed));
      }
      return { packages: [...packages].map(([name, min]) => (min === undefined ? { name } : { name, min_version: min })), nodes: plan.nodes };
    },
  };
}
