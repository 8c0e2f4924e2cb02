/**
 * Campaigns in the store, on SQLite and on PostgreSQL (its half skipped with the reason when no
 * server answers; required in CI): create, read, list, optimistic saves (a stale save changes
 * nothing), the runner's due scan — and a campaign driven by the runner against the real jobs
 * tables: its wave becomes an `upgrade` job carrying the request, and its end finishes it; a
 * campaign made from a vulnerability takes its packages and nodes from the resolver it is given.
 */
import t, { type Test } from 'tap';
import { silentLogger } from '@capstan/shared/log';
import { CampaignRunner, campaignJobs } from '@capstan/server/campaigns/runner';
import { CampaignService } from '@capstan/server/campaigns/service';
import { parseCampaignRequest } from '@capstan/server/campaigns/plan';
import type { CampaignRecord, Store } from '@capstan/server/store/index';
import { inventory, setup, type Backend } from '../server/store-suite.js';
import { setAcceptance } from '../helpers/node-changes.js';
import { postgresBackend, sqliteBackend } from '../server/backends.js';
import { pgUnavailable } from '../server/pg.js';

const AT = '2026-01-10T10:00:00.000Z';

function record(id: string, over: Partial<CampaignRecord> = {}): CampaignRecord {
  return {
    id, name: `campaign ${id}`, state: 'scheduled', message: null,
    spec: {
      nodes: ['n1', 'n2'], filters: [{ key: 'q', values: ['package:openssl < 3'] } as never],
      upgrade: { mode: 'packages', packages: [{ name: 'openssl', min_version: '3.0.2' }], pre: [], post: ['true'], reboot: 'if-needed' },
      window: null, canary: null, failure_threshold: 0, max_attempts: 3,
    },
    waves: [{ index: 0, nodes: ['n1', 'n2'], state: 'pending', job_ids: [], job_id: null, retry_after: null, started_at: null, ended_at: null }],
    nodes: ['n1', 'n2'].map((n) => ({
      node_id: n, wave: 0, state: 'pending' as const, attempts: 0, job_id: null, reason: null, message: null, exit_code: null, upgraded: [], unmet: [], reboot_required: false, updated_at: AT,
    })),
    created_at: AT, updated_at: AT, next_at: AT, version: 1, ...over,
  };
}

function suite(t: Test, backend: Backend): void {
  t.test('create, get, list newest first, by state', async (t) => {
    const { store } = await setup(t, backend);
    const a = await store.campaigns.create(record('a'));
    t.same(a, record('a'), 'read back as written');
    await store.campaigns.create(record('b', { created_at: '2026-01-10T11:00:00.000Z', state: 'finished', next_at: null }));
    t.equal(await store.campaigns.get('nope'), null);
    t.equal(await store.campaigns.get('a\u0000'), null, 'a NUL in an id is no campaign');
    const all = await store.campaigns.list(1, 10);
    t.same([all.total, all.data.map((c) => c.id)], [2, ['b', 'a']]);
    t.same((await store.campaigns.list(1, 10, 'finished')).data.map((c) => c.id), ['b']);
    t.same((await store.campaigns.list(2, 1)).data.map((c) => c.id), ['a'], 'paged');
    await t.rejects(store.campaigns.create(record('a')), 'an id is taken once');
  });

  t.test('saves are optimistic: a save from a stale read changes nothing', async (t) => {
    const { store } = await setup(t, backend);
    const a = await store.campaigns.create(record('a'));
    const saved = await store.campaigns.save({ ...a, state: 'running', message: 'wave 1', updated_at: '2026-01-10T10:00:05.000Z', next_at: '2026-01-10T10:00:10.000Z' });
    t.match(saved, { state: 'running', message: 'wave 1', version: 2, next_at: '2026-01-10T10:00:10.000Z' });
    t.equal(await store.campaigns.save({ ...a, state: 'cancelled' }), null, 'version 1 is stale');
    t.match(await store.campaigns.get('a'), { state: 'running', version: 2 });
  });

  t.test('due: active campaigns whose time came, soonest first', async (t) => {
    const { store } = await setup(t, backend);
    await store.campaigns.create(record('late', { next_at: '2026-01-10T10:05:00.000Z' }));
    await store.campaigns.create(record('soon', { next_at: '2026-01-10T09:00:00.000Z', state: 'waiting_window' }));
    await store.campaigns.create(record('now', { next_at: AT, state: 'running' }));
    await store.campaigns.create(record('over', { next_at: AT, state: 'stopped' }));
    t.same(await store.campaigns.due(AT, 10), ['soon', 'now']);
    t.same(await store.campaigns.due(AT, 1), ['soon'], 'bounded');
    t.same(await store.campaigns.due('2026-01-10T11:00:00.000Z', 10), ['soon', 'now', 'late']);
  });

  t.test('the runner makes the wave an upgrade job, and finishes the campaign with it', async (t) => {
    const { store } = await setup(t, backend);
    // Two nodes that can run: an inventory each (an agent), accepted.
    for (const id of ['n1', 'n2']) {
      await store.upsertFromInventory(inventory(id, { received_at: '2024-05-01T08:00:00Z' }));
      await setAcceptance(store, id, 'accepted', '2024-05-01T08:00:00Z');
    }
    let now = new Date(AT);
    let kicked = 0;
    const runner = new CampaignRunner({
      store, log: silentLogger, tickMs: 60_000, settings: { pollMs: 5000, retryDelayMs: 60_000, maxJobMs: 3600_000 }, kickJobs: () => kicked++, now: () => now,
    });
    await store.campaigns.create(record('c1'));
    t.equal(await runner.tick(), 1);
    const c = (await store.campaigns.get('c1'))!;
    t.match(c, { state: 'running', version: 2, next_at: '2026-01-10T10:00:05.000Z' });
    const jobId = c.waves[0]!.job_id!;
    t.equal(kicked, 1, 'the jobs runner was told');
    const job = await store.jobs.getJob(jobId);
    t.match(job, {
      type: 'upgrade', state: 'running', keep_output: true, nodes: ['n1', 'n2'], campaign_id: 'c1', timeout_ms: 3600_000,
      upgrade: { mode: 'packages', packages: [{ name: 'openssl', min_version: '3.0.2' }], post: ['true'], reboot: 'if-needed' },
      progress: { total: 2, pending: 2 },
    });
    // A wave's nodes are checked again when its job is made: one gone from the registry fails at once.
    const gone = await runner.jobs.start(record('c2', { spec: { ...record('c2').spec, nodes: ['ghost'] } }), 0, ['ghost'], 60_000);
    t.match(await store.jobs.getTask(gone, 'ghost'), { state: 'failed', reason: 'no_agent', message: 'the node is no longer in the registry' });
    t.equal(await runner.tick(), 0, 'not due before its poll time');
    now = new Date('2026-01-10T10:00:05.000Z');
    t.equal(await runner.tick(), 1, 'looked at: its job still runs');
    const result = { upgraded: [{ name: 'openssl', from: '3.0.1', to: '3.0.2' }], unmet: [], steps: [], reboot_required: false, rebooted: false, exit_code: 0 };
    for (const n of ['n1', 'n2']) {
      await store.jobs.transition(jobId, n, { to: 'scheduled', reason: 'dispatched', at: AT, relay: 'r1' });
      await store.jobs.transition(jobId, n, { to: 'in_progress', reason: 'started', at: AT });
      if (n === 'n1') await store.jobs.transition(jobId, n, { to: 'done', reason: 'completed', at: AT, exit_code: 0, output: `upgrade-result ${JSON.stringify(result)}` });
      else await store.jobs.transition(jobId, n, { to: 'failed', reason: 'exit_code', at: AT, exit_code: 100, output: 'E: broken' });
    }
    now = new Date('2026-01-10T10:00:10.000Z');
    await runner.tick();
    const end = (await store.campaigns.get('c1'))!;
    t.match(end, { state: 'stopped', next_at: null, message: /1 of 2 nodes failed/ });
    t.match(end.nodes, [
      { node_id: 'n1', state: 'done', exit_code: 0, upgraded: [{ name: 'openssl', from: '3.0.1', to: '3.0.2' }] },
      { node_id: 'n2', state: 'failed', reason: 'exit_code', exit_code: 100 },
    ]);
    t.equal(await runner.tick(), 0, 'a final campaign is never due');
  });

  t.test('a campaign from a vulnerability: the resolver says which packages and nodes; none wired is a coded error', async (t) => {
    const { store } = await setup(t, backend);
    for (const id of ['v2', 'v1']) await store.createNode({ id, hostname: `${id}.example.com` });
    const limits = { maxTargets: 100, defaultMaxAttempts: 3 };
    const admin = { kind: 'admin' as const, name: 'alice' };
    const asked: string[] = [];
    const service = new CampaignService({
      store, limits, jobs: campaignJobs(store, () => undefined), kick: () => undefined,
      vulnerabilities: {
        async resolveVulnerabilityFix(id) {
          asked.push(id);
          return { packages: [{ name: 'xz-utils', min_version: '5.6.1+really5.4.5-1' }], nodes: ['v2', 'v1'] };
        },
      },
    });
    const c = await service.create(parseCampaignRequest({ name: 'xz', vulnerability: 'CVE-2024-3094', reboot: 'if-needed', canary: 1 }, limits), admin);
    t.same(asked, ['CVE-2024-3094']);
    t.match(c.spec, {
      vulnerability: 'CVE-2024-3094', nodes: ['v2', 'v1'],
      upgrade: { mode: 'packages', packages: [{ name: 'xz-utils', min_version: '5.6.1+really5.4.5-1' }], pre: [], post: [], reboot: 'if-needed' },
    });
    // Nodes an admin added by hand have no agent: listed skipped with the reason, in no wave.
    t.match(c, { state: 'scheduled', message: 'no node can run the upgrade', waves: [] });
    t.match(c.nodes, [{ node_id: 'v1', wave: -1, state: 'skipped', reason: /no_agent|not_accepted/ }, { node_id: 'v2', state: 'skipped' }]);
    t.match(await service.report(c.id), { summary: { total: 2, skipped: 2, done: 0 } });
    const bare = new CampaignService({ store, limits, jobs: campaignJobs(store, () => undefined), kick: () => undefined });
    await t.rejects(bare.create(parseCampaignRequest({ name: 'xz', vulnerability: 'CVE-2024-3094' }, limits), admin), { code: 'ERR_CAMPAIGN_VULNERABILITY_UNAVAILABLE' });
    await t.rejects(service.get('nope'), { code: 'ERR_CAMPAIGN_UNKNOWN' });
  });
}

t.test('SQLite', async (t) => suite(t, sqliteBackend));
const why = await pgUnavailable();
t.test('PostgreSQL', { skip: why ?? false }, async (t) => suite(t, postgresBackend()));
