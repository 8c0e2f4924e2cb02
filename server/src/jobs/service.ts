/**
 * The door for jobs: creating one (its targets resolved at once) and cancelling one, each
 * recorded in the audit log with who acted. The runners (runner.ts, the bootstrap runner) move
 * the tasks afterwards, through the state machine (states.ts).
 */
import { capstanError } from '@capstan/shared/errors';
import type { JobRecord, Store } from '../store/store.js';
import type { Actor } from '../audit/actor.js';
import type { AuditLog } from '../audit/log.js';
import type { ServerConfig } from '../config.js';
import { createJob, type JobLimits, type JobRequest } from './create.js';
import { checkRelayUrl } from '../bootstrap/relay-url.js';

/** The limits of `[jobs]` and `[bootstrap]` a job request is checked against. */
export function jobLimits(config: Pick<ServerConfig, 'jobs' | 'bootstrap'>): JobLimits {
  return {
    defaultTimeoutMs: config.jobs.default_timeout, maxTargets: config.jobs.max_targets,
    bootstrapEnabled: config.bootstrap.enabled, bootstrapRelayUrl: config.bootstrap.relay_url,
    bootstrapAllowedRelayUrls: config.bootstrap.allowed_relay_urls,
  };
}

export interface JobServiceDeps {
  store: Store;
  audit?: AuditLog;
  limits: JobLimits;
  /** Told a job of its kind was made, so it is taken at once rather than at the next poll. */
  kick: { run(): void; bootstrap?: () => void };
  now?: () => Date;
}

export class JobService {
  private readonly now: () => Date;

  constructor(private readonly deps: JobServiceDeps) {
    this.now = deps.now ?? (() => new Date());
  }

  get limits(): JobLimits {
    return this.deps.limits;
  }

  async create(request: JobRequest, actor: Actor): Promise<JobRecord> {
    if (request.bootstrap) {
      const { bootstrapRelayUrl: defaultUrl, bootstrapAllowedRelayUrls: allowed } = this.deps.limits;
      await checkRelayUrl(this.deps.store, request.bootstrap.relay_url, { ...(defaultUrl !== undefined && { defaultUrl }), ...(allowed && { allowed }) }, actor);
    }
    const job = await createJob(this.deps.store, request, this.deps.limits, this.now());
    await this.deps.audit?.record(actor, { action: 'job.create', target: job.id, before: null, after: job });
    if (job.type === 'bootstrap') this.deps.kick.bootstrap?.();
    else this.deps.kick.run();
    return job;
  }

  async cancel(id: string, actor: Actor): Promise<JobRecord> {
    const before = await this.deps.store.jobs.getJob(id);
    const job = await this.deps.store.jobs.cancelJob(id, this.now().toISOString());
    if (!job) throw capstanError('ERR_JOB_UNKNOWN', `job ${id} is unknown`);
    await this.deps.audit?.record(actor, { action: 'job.cancel', target: id, before, after: job });
    return job;
  }
}
