/**
 * The door for campaigns: creating one (targets resolved and split into waves at once), and
 * cancelling one, each recorded in the audit log; the report. The runner (runner.ts) moves them.
 */
import { randomUUID } from 'node:crypto';
import { capstanError } from '@capstan/shared/errors';
import { parseUpgradeRequest } from '@capstan/shared/upgrade';
import type { Actor } from '../audit/actor.js';
import type { AuditLog } from '../audit/log.js';
import { resolveTargets } from '../jobs/create.js';
import type { CampaignNodeResult, CampaignRecord, CampaignState, Page, Store } from '../store/store.js';

export { CAMPAIGN_STATES } from '../store/campaigns/types.js';
export type { CampaignState } from '../store/campaigns/types.js';
import { cancelCampaign, type CampaignJobs } from './engine.js';
import { splitWaves, type CampaignLimits, type CampaignRequest } from './plan.js';
import { noVulnerabilityResolver, type VulnerabilityFixResolver } from './vulnerability.js';

export interface CampaignServiceDeps {
  store: Store;
  audit?: AuditLog;
  limits: CampaignLimits;
  jobs: CampaignJobs;
  /** Told a campaign was made or cancelled, so the runner looks at once. */
  kick: () => void;
  vulnerabilities?: VulnerabilityFixResolver;
  now?: () => Date;
}

export class CampaignService {
  private readonly now: () => Date;

  constructor(private readonly deps: CampaignServiceDeps) {
    this.now = deps.now ?? (() => new Date());
  }

  get limits(): CampaignLimits {
    return this.deps.limits;
  }

  async create(req: CampaignRequest, actor: Actor): Promise<CampaignRecord> {
    const spec = structuredClone(req.spec);
    if (spec.vulnerability !== undefined) {
      const fix = await (this.deps.vulnerabilities ?? noVulnerabilityResolver).resolveVulnerabilityFix(spec.vulnerability);
      if (spec.upgrade.packages.length === 0) spec.upgrade = parseUpgradeRequest({ ...spec.upgrade, packages: fix.packages });
      if (spec.nodes.length === 0 && spec.filters.length === 0) spec.nodes = fix.nodes;
    }
    const { targets, failed } = await resolveTargets(this.deps.store, { type: 'upgrade', nodes: spec.nodes, node_selectors: [], filters: spec.filters }, this.deps.limits);
    const at = this.now().toISOString();
    const runnable = [...targets].filter((n) => !failed.has(n));
    const waves = splitWaves(runnable, spec.canary);
    const windowOf = await this.windowGroups(spec);
    const result = (node_id: string, wave: number): CampaignNodeResult => ({
      node_id, wave, ...(spec.windows?.length && { window: windowOf(node_id) }), state: 'pending', attempts: 0, job_id: null, reason: null, message: null, exit_code: null, upgraded: [], unmet: [], reboot_required: false, updated_at: at,
    });
    const nodes = waves.flatMap((w, i) => w.map((n) => result(n, i)));
    for (const [id, why] of [...failed].sort(([a], [b]) => a.localeCompare(b))) nodes.push({ ...result(id, -1), state: 'skipped', reason: why.reason, message: why.message });
    const c: CampaignRecord = {
      id: randomUUID(), name: req.name, state: 'scheduled', message: waves.length === 0 ? 'no node can run the upgrade' : null, spec,
      waves: waves.map((w, index) => ({ index, nodes: w, state: 'pending', job_ids: [], job_id: null, retry_after: null, started_at: null, ended_at: null })),
      nodes, created_at: at, updated_at: at, next_at: at, version: 1,
    };
    const saved = await this.deps.store.campaigns.create(c);
    await this.deps.audit?.record(actor, { action: 'campaign.create', target: saved.id, before: null, after: { id: saved.id, name: saved.name, spec: saved.spec } });
    this.deps.kick();
    return saved;
  }

  /**
   * Which group's window each node takes: the first of `spec.windows` (in the order given) whose
   * group it is in, as the filter `group = <id>` counts members (registry groups and policy
   * groups alike); null for a node in none of them (the campaign's `window`).
   */
  private async windowGroups(spec: CampaignRequest['spec']): Promise<(node: string) => string | null> {
    const members: Array<[string, Set<string>]> = [];
    for (const { group } of spec.windows ?? []) members.push([group, new Set(await this.deps.store.listNodeIds([{ key: 'group', values: [group] }]))]);
    return (node) => members.find(([, m]) => m.has(node))?.[0] ?? null;
  }

  /** Newest first. */
  list(page: number, perPage: number, state?: CampaignState): Promise<Page<CampaignRecord>> {
    return this.deps.store.campaigns.list(page, perPage, state);
  }

  async get(id: string): Promise<CampaignRecord> {
    const c = await this.deps.store.campaigns.get(id);
    if (!c) throw capstanError('ERR_CAMPAIGN_UNKNOWN', `campaign ${id} is unknown`);
    return c;
  }

  async cancel(id: string, actor: Actor): Promise<CampaignRecord> {
    for (let attempt = 0; attempt < 5; attempt++) {
      const before = await this.get(id);
      if (before.state === 'cancelled' || before.state === 'finished' || before.state === 'stopped') {
        throw capstanError('ERR_CAMPAIGN_STATE', `campaign ${id} is ${before.state} already`);
      }
      const saved = await this.deps.store.campaigns.save(await cancelCampaign(before, this.now(), this.deps.jobs));
      if (!saved) continue; // the runner saved it meanwhile: read it again
      await this.deps.audit?.record(actor, { action: 'campaign.cancel', target: id, before: { state: before.state }, after: { state: saved.state } });
      return saved;
    }
    throw capstanError('ERR_CONFLICT', `campaign ${id} kept changing; try again`);
  }

  /** Per node: its result, and the output of its last attempt while its job is kept. */
  async report(id: string): Promise<Record<string, unknown>> {
    const c = await this.get(id);
    const count = (s: string) => c.nodes.filter((n) => n.state === s).length;
    const nodes = [];
    for (const n of c.nodes) {
      const task = n.job_id ? await this.deps.store.jobs.getTask(n.job_id, n.node_id) : null;
      nodes.push({ ...n, output: task?.output ?? null });
    }
    return {
      id: c.id, name: c.name, state: c.state, message: c.message,
      summary: {
        total: c.nodes.length, done: count('done'), failed: count('failed'), skipped: count('skipped'), cancelled: count('cancelled'),
        waiting: count('pending') + count('retry') + count('running'), reboot_required: c.nodes.filter((n) => n.reboot_required).length,
        packages_upgraded: c.nodes.reduce((k, n) => k + n.upgraded.length, 0),
      },
      waves: c.waves.map((w) => ({ index: w.index, state: w.state, nodes: w.nodes.length, job_ids: w.job_ids, started_at: w.started_at, ended_at: w.ended_at })),
      nodes,
    };
  }
}
