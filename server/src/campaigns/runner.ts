/**
 * Moves campaigns: every `campaigns.tick_interval` (and at once when kicked) the due campaigns
 * (next_at passed) are read, advanced by the engine and saved — a save from a stale read (another
 * server process, a cancel) changes nothing and is looked at again at the next tick. The waves'
 * jobs are made through the job door (JobService-like `start`), so the jobs runner dispatches them.
 */
import type { Logger } from '@capstan/shared/log';
import type { JobRecord, Store } from '../store/store.js';
import { insertJob, notRunnable } from '../jobs/create.js';
import { advance, type CampaignJobs, type EngineSettings } from './engine.js';

export interface CampaignRunnerOptions {
  store: Store;
  log: Logger;
  tickMs: number;
  settings: EngineSettings;
  /** Tell the jobs runner a job is waiting. */
  kickJobs: () => void;
  now?: () => Date;
}

/** Campaigns advanced per tick at most (the rest at the next). */
const BATCH = 100;

/** Jobs as campaigns use them: upgrade jobs on the wave's nodes, output kept (the report reads it). */
export function campaignJobs(store: Store, kickJobs: () => void, now: () => Date = () => new Date()): CampaignJobs {
  return {
    async start(c, wave, nodes, timeoutMs) {
      // Checked again at each wave: a node refused, terminated or deleted since fails at once.
      const failed = new Map<string, { reason: string; message: string }>();
      for (const id of nodes) {
        const n = await store.getNode(id);
        const why = n ? notRunnable(n) : { reason: 'no_agent', message: 'the node is no longer in the registry' };
        if (why) failed.set(id, why);
      }
      const job: JobRecord = await insertJob(store, {
        name: `${c.name} (campaign ${c.id}, wave ${wave + 1})`.slice(0, 200), type: 'upgrade', nodes, node_selectors: [], filters: [], conditions: [],
        keep_output: true, timeout_ms: timeoutMs, upgrade: c.spec.upgrade, campaign_id: c.id,
      }, nodes, failed, now());
      kickJobs();
      return job.id;
    },
    async get(id) {
      const job = await store.jobs.getJob(id);
      return job ? { state: job.state, tasks: await store.jobs.listTasks(id) } : null;
    },
    async cancel(id) {
      const job = await store.jobs.getJob(id);
      if (job?.state === 'running') await store.jobs.cancelJob(id, now().toISOString());
    },
  };
}

export class CampaignRunner {
  private timer: NodeJS.Timeout | null = null;
  private busy = false;
  private again = false;
  private stopped = false;
  private readonly now: () => Date;
  readonly jobs: CampaignJobs;

  constructor(private readonly o: CampaignRunnerOptions) {
    this.now = o.now ?? (() => new Date());
    this.jobs = campaignJobs(o.store, o.kickJobs, this.now);
  }

  start(): void {
    this.timer = setInterval(() => this.kick(), this.o.tickMs);
    this.timer.unref();
    this.kick();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    while (this.busy) await new Promise((r) => setTimeout(r, 10));
  }

  kick(): void {
    if (this.stopped) return;
    if (this.busy) {
      this.again = true;
      return;
    }
    this.busy = true;
    void this.tick().catch((err: unknown) => this.o.log.warn({ err }, 'campaign tick failed (tried again at the next)')).finally(() => {
      this.busy = false;
      if (this.again) {
        this.again = false;
        this.kick();
      }
    });
  }

  /** Advance every due campaign once; returns how many were saved. */
  async tick(): Promise<number> {
    let saved = 0;
    const ids = await this.o.store.campaigns.due(this.now().toISOString(), BATCH);
    for (const id of ids) {
      if (this.stopped) break;
      const c = await this.o.store.campaigns.get(id);
      if (!c) continue;
      const next = await advance(c, this.now(), this.jobs, this.o.settings);
      if (await this.o.store.campaigns.save(next)) {
        saved++;
        if (next.state !== c.state) this.o.log.info({ campaign: id, from: c.state, to: next.state, message: next.message }, 'campaign state changed');
      }
    }
    return saved;
  }
}
