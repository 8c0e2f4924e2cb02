/**
 * Maintenance windows per group: the engine with a fake clock and fake jobs runs each node in its
 * group's window (Paris and New York nights, a default window for the rest), two windows' jobs at
 * once, a node offline retried in its own next window, the threshold across windows; the request
 * checks; and, on SQLite and PostgreSQL, which window each target takes at creation (registry and
 * policy groups, the first in the order given), kept through the store and the runner.
 */
import t, { type Test } from 'tap';
import { silentLogger } from '@capstan/shared/log';
import { advance, cancelCampaign, type CampaignJobs } from '@capstan/server/campaigns/engine';
import { MAX_GROUP_WINDOWS, parseCampaignRequest, splitWaves } from '@capstan/server/campaigns/plan';
import { CampaignRunner, campaignJobs } from '@capstan/server/campaigns/runner';
import { CampaignService } from '@capstan/server/campaigns/service';
import { groupWindowOption } from '@capstan/server/admin-cli/verbs/campaigns';
import type { CampaignRecord, CampaignSpec, MaintenanceWindow, TaskRecord } from '@capstan/server/store/index';
import { inventory, setup, type Backend } from '../server/store-suite.js';
import { setAcceptance, updateNode } from '../helpers/node-changes.js';
import { postgresBackend, sqliteBackend } from '../server/backends.js';
import { pgUnavailable } from '../server/pg.js';

const SETTINGS = { pollMs: 5000, retryDelayMs: 600_000, maxJobMs: 3600_000 };
const LIMITS = { maxTargets: 1000, defaultMaxAttempts: 3 };
const H = 3600_000;

type Outcome = { state: 'done' | 'failed' | 'aborted'; reason: string; exit_code?: number };

function fakeJobs() {
  const jobs = new Map<string, { nodes: string[]; timeoutMs: number; state: 'running' | 'finished' | 'cancelled'; tasks: TaskRecord[] }>();
  const port: CampaignJobs = {
    async start(_c, _wave, nodes, timeoutMs) {
      const id = `job-${jobs.size + 1}`;
      jobs.set(id, { nodes, timeoutMs, state: 'running', tasks: [] });
      return id;
    },
    async get(id) {
      const j = jobs.get(id);
      return j ? { state: j.state, tasks: j.tasks } : null;
    },
    async cancel(id) {
      jobs.get(id)!.state = 'cancelled';
    },
  };
  const end = (id: string, outcomes: Record<string, Outcome>) => {
    const j = jobs.get(id)!;
    j.state = 'finished';
    j.tasks = j.nodes.map((n) => ({
      job_id: id, node_id: n, state: outcomes[n]!.state, reason: outcomes[n]!.reason, message: null, relay: 'r1',
      exit_code: outcomes[n]!.exit_code ?? null, output: null, step: null, updated_at: '2026-01-01T00:00:00.000Z',
    }));
  };
  return { port, jobs, end };
}

const win = (days: MaintenanceWindow['days'], start: string, hours: number, tz: string): MaintenanceWindow => ({ days, start, duration_ms: hours * H, tz });
const DONE: Outcome = { state: 'done', reason: 'completed', exit_code: 0 };
const OFFLINE: Outcome = { state: 'failed', reason: 'offline' };
const BROKEN: Outcome = { state: 'failed', reason: 'exit_code', exit_code: 100 };

/** A campaign whose nodes already carry their window (the service decides it; see below). */
function campaign(nodes: Record<string, string | null>, spec: Partial<CampaignSpec>, at: string): CampaignRecord {
  const full: CampaignSpec = {
    nodes: Object.keys(nodes), filters: [], upgrade: { mode: 'packages', packages: [{ name: 'openssl' }], pre: [], post: [], reboot: 'never' },
    window: null, canary: null, failure_threshold: 0, max_attempts: 3, ...spec,
  };
  const waves = splitWaves(Object.keys(nodes), full.canary);
  return {
    id: 'c1', name: 'patch', state: 'scheduled', message: null, spec: full,
    waves: waves.map((w, index) => ({ index, nodes: w, state: 'pending', job_ids: [], job_id: null, retry_after: null, started_at: null, ended_at: null })),
    nodes: waves.flatMap((w, i) => w.map((n) => ({
      node_id: n, wave: i, window: nodes[n]!, state: 'pending' as const, attempts: 0, job_id: null, reason: null, message: null, exit_code: null, upgraded: [], unmet: [], reboot_required: false, updated_at: at,
    }))),
    created_at: at, updated_at: at, next_at: at, version: 1,
  };
}

const states = (c: CampaignRecord) => Object.fromEntries(c.nodes.map((n) => [n.node_id, n.state]));
const at = (s: string) => new Date(s);

// January 2026: Paris is UTC+1, New York UTC-5.
const WEB_EU = win(['sat'], '02:00', 2, 'Europe/Paris'); // Sat 01:00Z-03:00Z
const WEB_US = win(['sun'], '01:00', 2, 'America/New_York'); // Sun 06:00Z-08:00Z
const DEFAULT = win(['sun'], '06:30', 1, 'UTC'); // Sun 06:30Z-07:30Z

t.test('each node in its group\'s window; the default window for the rest; a retry in its own next window', async (t) => {
  const { port, jobs, end } = fakeJobs();
  const spec = { window: DEFAULT, windows: [{ group: 'web-eu', window: WEB_EU }, { group: 'web-us', window: WEB_US }], canary: { count: 1 }, failure_threshold: 50, max_attempts: 2 };
  const friday = at('2026-01-09T12:00:00.000Z');
  let c = await advance(campaign({ e1: 'web-eu', e2: 'web-eu', u1: 'web-us', x1: null }, spec, friday.toISOString()), friday, port, SETTINGS);
  t.match(c, { state: 'waiting_window', next_at: '2026-01-10T01:00:00.000Z', message: 'wave 1 waits for the window of group web-eu opening at 2026-01-10T01:00:00.000Z' },
    'the canary (e1) waits for 02:00 in Paris');
  t.equal(jobs.size, 0);

  c = await advance(c, at('2026-01-10T01:00:00.000Z'), port, SETTINGS);
  t.same([jobs.get('job-1')!.nodes, jobs.get('job-1')!.timeoutMs], [['e1'], 2 * H], 'the canary runs until Paris\'s window closes');
  end('job-1', { e1: DONE });
  c = await advance(c, at('2026-01-10T01:10:00.000Z'), port, SETTINGS);
  t.same([jobs.size, jobs.get('job-2')!.nodes, jobs.get('job-2')!.timeoutMs], [2, ['e2'], 110 * 60_000],
    'wave 2 starts at once, but only for the group whose window is open');
  t.match(c, { state: 'running' });
  t.same(states(c), { e1: 'done', e2: 'running', u1: 'pending', x1: 'pending' });

  end('job-2', { e2: OFFLINE });
  c = await advance(c, at('2026-01-10T01:20:00.000Z'), port, SETTINGS);
  t.match(c.nodes.find((n) => n.node_id === 'e2'), { state: 'retry', retry_after: '2026-01-10T03:00:00.000Z' }, 'not again before Paris\'s window closes');
  t.match(c, { state: 'waiting_window', next_at: '2026-01-11T06:00:00.000Z', message: /window of group web-us opening at 2026-01-11T06:00:00.000Z/ },
    'next: 01:00 Sunday in New York');
  c = await advance(c, at('2026-01-10T02:30:00.000Z'), port, SETTINGS);
  t.equal(jobs.size, 2, 'no second job in the window the node was offline in');

  c = await advance(c, at('2026-01-11T06:00:00.000Z'), port, SETTINGS);
  t.same([jobs.get('job-3')!.nodes, jobs.get('job-3')!.timeoutMs], [['u1'], 2 * H], 'New York\'s window opened');
  c = await advance(c, at('2026-01-11T06:30:00.000Z'), port, SETTINGS);
  t.same([jobs.get('job-4')!.nodes, jobs.get('job-4')!.timeoutMs], [['x1'], H], 'the default window opens while New York\'s job runs: both at once');
  t.match(c, { state: 'running', waves: [{ state: 'done' }, { state: 'running', job_ids: ['job-2', 'job-3', 'job-4'] }] });
  end('job-4', { x1: DONE });
  c = await advance(c, at('2026-01-11T06:40:00.000Z'), port, SETTINGS);
  t.same(states(c), { e1: 'done', e2: 'retry', u1: 'running', x1: 'done' }, 'one window\'s job read while another runs');
  t.equal(c.state, 'running');
  end('job-3', { u1: DONE });
  c = await advance(c, at('2026-01-11T07:00:00.000Z'), port, SETTINGS);
  t.match(c, { state: 'waiting_window', next_at: '2026-01-17T01:00:00.000Z' }, 'e2 waits for Paris\'s next Saturday');

  c = await advance(c, at('2026-01-17T01:00:00.000Z'), port, SETTINGS);
  t.same(jobs.get('job-5')!.nodes, ['e2']);
  t.match(c.nodes.find((n) => n.node_id === 'e2'), { state: 'running', attempts: 2, retry_after: null });
  end('job-5', { e2: DONE });
  c = await advance(c, at('2026-01-17T01:30:00.000Z'), port, SETTINGS);
  t.match(c, { state: 'finished', message: '4 of 4 nodes upgraded', next_at: null });
});

t.test('the threshold counts the whole wave across windows; a stop cancels the other window\'s job', async (t) => {
  const { port, jobs, end } = fakeJobs();
  // Paris Sat 02:00-05:00 (01:00Z-04:00Z); New York Fri 21:00 for 6h (Sat 02:00Z-08:00Z).
  const spec = { windows: [{ group: 'eu', window: win(['sat'], '02:00', 3, 'Europe/Paris') }, { group: 'us', window: win(['fri'], '21:00', 6, 'America/New_York') }], failure_threshold: 40 };
  const start = at('2026-01-10T00:00:00.000Z');
  let c = await advance(campaign({ a: 'eu', b: 'eu', c: 'us', d: null }, spec, start.toISOString()), start, port, SETTINGS);
  t.same(jobs.get('job-1')!.nodes, ['d'], 'without a default window the rest run at once');
  t.equal(jobs.get('job-1')!.timeoutMs, SETTINGS.maxJobMs);
  end('job-1', { d: DONE });
  c = await advance(c, at('2026-01-10T01:00:00.000Z'), port, SETTINGS);
  t.same(jobs.get('job-2')!.nodes, ['a', 'b']);
  c = await advance(c, at('2026-01-10T02:00:00.000Z'), port, SETTINGS);
  t.same(jobs.get('job-3')!.nodes, ['c'], 'New York\'s window opens while Paris\'s job runs');
  end('job-2', { a: BROKEN, b: DONE });
  c = await advance(c, at('2026-01-10T02:10:00.000Z'), port, SETTINGS);
  t.equal(c.state, 'running', '1 of 4 is not over 40%');
  t.equal(jobs.get('job-3')!.state, 'running');

  const j2 = fakeJobs();
  let d = await advance(campaign({ a: 'eu', b: 'eu', c: 'us', d: 'us' }, spec, start.toISOString()), at('2026-01-10T02:00:00.000Z'), j2.port, SETTINGS);
  t.same([...j2.jobs.values()].map((j) => j.nodes), [['a', 'b'], ['c', 'd']], 'both windows open: a job each');
  j2.end('job-1', { a: BROKEN, b: BROKEN });
  d = await advance(d, at('2026-01-10T02:10:00.000Z'), j2.port, SETTINGS);
  t.match(d, { state: 'stopped', message: 'wave 1: 2 of 4 nodes failed, over the threshold of 40%', next_at: null });
  t.equal(j2.jobs.get('job-2')!.state, 'cancelled', 'the other window\'s job is cancelled');
  t.same(states(d), { a: 'failed', b: 'failed', c: 'cancelled', d: 'cancelled' });

  const j3 = fakeJobs();
  const e = await advance(campaign({ a: 'eu', c: 'us' }, spec, start.toISOString()), at('2026-01-10T02:00:00.000Z'), j3.port, SETTINGS);
  const x = await cancelCampaign(e, at('2026-01-10T02:01:00.000Z'), j3.port);
  t.same([...j3.jobs.values()].map((j) => j.state), ['cancelled', 'cancelled'], 'cancel cancels every window\'s job');
  t.same(states(x), { a: 'cancelled', c: 'cancelled' });
});

t.test('a campaign stored before windows per group runs as before (no window key on its nodes)', async (t) => {
  const { port, jobs, end } = fakeJobs();
  const c0 = campaign({ a: null, b: null }, { window: WEB_EU }, '2026-01-09T00:00:00.000Z');
  for (const n of c0.nodes) delete n.window;
  let c = await advance(c0, at('2026-01-10T01:00:00.000Z'), port, SETTINGS);
  end('job-1', { a: DONE, b: OFFLINE });
  c = await advance(c, at('2026-01-10T01:30:00.000Z'), port, SETTINGS);
  // A retry recorded the old way: on the wave only.
  const legacy = structuredClone(c);
  for (const n of legacy.nodes) delete n.retry_after;
  legacy.waves[0]!.retry_after = '2026-01-10T03:00:00.000Z';
  c = await advance(legacy, at('2026-01-10T02:00:00.000Z'), port, SETTINGS);
  t.match(c, { state: 'waiting_window', next_at: '2026-01-17T01:00:00.000Z' });
  c = await advance(c, at('2026-01-17T01:00:00.000Z'), port, SETTINGS);
  t.same(jobs.get('job-2')!.nodes, ['b']);

  // A node holding a group the spec does not name (a document edited by hand) runs in the campaign's window.
  const j2 = fakeJobs();
  const odd = await advance(campaign({ a: 'gone', b: null }, { window: WEB_EU }, '2026-01-09T00:00:00.000Z'), at('2026-01-10T01:00:00.000Z'), j2.port, SETTINGS);
  t.same([...j2.jobs.values()].map((j) => j.nodes), [['b'], ['a']], 'not left waiting forever');
  t.equal(odd.state, 'running');
});

t.test('the request: windows per group checked at the door', async (t) => {
  const ok = parseCampaignRequest({
    name: 'p', upgrade: 'security', window: { days: ['sun'], start: '03:00', duration: '1h' },
    windows: [{ group: 'web-eu', days: ['sat'], start: '02:00', duration: '2h', tz: 'Europe/Paris' }, { group: 'web-us', days: ['sun'], start: '01:00', duration: '2h', tz: 'America/New_York' }],
  }, LIMITS);
  t.same(ok.spec.windows, [
    { group: 'web-eu', window: { days: ['sat'], start: '02:00', duration_ms: 2 * H, tz: 'Europe/Paris' } },
    { group: 'web-us', window: { days: ['sun'], start: '01:00', duration_ms: 2 * H, tz: 'America/New_York' } },
  ]);
  t.same(ok.spec.window, { days: ['sun'], start: '03:00', duration_ms: H, tz: 'UTC' });
  t.notOk('windows' in parseCampaignRequest({ name: 'p', upgrade: 'all' }, LIMITS).spec, 'none asked: none kept');
  const w = { days: ['sat'], start: '02:00', duration: '2h' };
  for (const [what, windows, message] of [
    ['not a list', { group: 'a', ...w }, /windows must be a list/],
    ['too many', Array.from({ length: MAX_GROUP_WINDOWS + 1 }, (_, i) => ({ group: `g${i}`, ...w })), /at most 50/],
    ['no group', [w], /windows\[0\]\.group/],
    ['a group twice', [{ group: 'a', ...w }, { group: 'a', ...w }], /windows\[1\]: group a has a window already/],
    ['a bad zone', [{ group: 'a', ...w, tz: 'Mars/Olympus' }], /windows\[0\]\.tz/],
    ['an unknown field', [{ group: 'a', ...w, priority: 1 }], /windows\[0\] has unknown fields: priority/],
    ['a control character', [{ group: 'a\u0000', ...w }], /windows\[0\]\.group/],
  ] as const) {
    t.throws(() => parseCampaignRequest({ name: 'p', upgrade: 'all', windows }, LIMITS), { code: 'ERR_BAD_REQUEST', message }, `refused: ${what}`);
  }
});

t.test('the command line: --group-window GROUP=DAYS HH:MM DURATION [TZ], repeatable, in order', async (t) => {
  const two = groupWindowOption('web-us=sun 01:00 2h America/New_York', groupWindowOption('web-eu=sat,sun 02:00 2h Europe/Paris'));
  t.same(two, [
    { group: 'web-eu', days: ['sat', 'sun'], start: '02:00', duration: '2h', tz: 'Europe/Paris' },
    { group: 'web-us', days: ['sun'], start: '01:00', duration: '2h', tz: 'America/New_York' },
  ]);
  t.same(parseCampaignRequest({ name: 'p', upgrade: 'all', windows: two }, LIMITS).spec.windows!.map((w) => [w.group, w.window.tz]), [['web-eu', 'Europe/Paris'], ['web-us', 'America/New_York']], 'what the API takes');
  t.throws(() => groupWindowOption('sat 02:00 2h'), /--group-window is "GROUP=DAYS/);
  t.throws(() => groupWindowOption('web=saturday at two'), /--window is "DAYS/);
});

function suite(t: Test, backend: Backend): void {
  t.test('each target takes the window of its first group in the order given; the runner keeps it', async (t) => {
    const { store } = await setup(t, backend);
    const AT = '2026-01-09T12:00:00.000Z';
    for (const id of ['n1', 'n2', 'n3', 'n4']) {
      await store.upsertFromInventory(inventory(id, { received_at: '2026-01-09T08:00:00Z' }));
      await setAcceptance(store, id, 'accepted', '2026-01-09T08:00:00Z');
    }
    // n1: registry groups web-eu and web-us; n2: web-us; n3: the policy group "canaries" (static); n4: none.
    await updateNode(store, 'n1', { groups: ['web-us', 'web-eu'] }, AT);
    await updateNode(store, 'n2', { groups: ['web-us'] }, AT);
    await store.putPolicyObject('group', 'canaries', { id: 'canaries', name: 'canaries', nodes: ['n3', 'n1'] }, AT);
    let now = new Date(AT);
    const service = new CampaignService({ store, limits: LIMITS, jobs: campaignJobs(store, () => undefined, () => now), kick: () => undefined, now: () => now });
    const admin = { kind: 'admin' as const, name: 'alice' };
    const req = (order: string[]) => parseCampaignRequest({
      name: 'p', nodes: ['n1', 'n2', 'n3', 'n4'], upgrade: 'security', window: { days: ['sun'], start: '06:30', duration: '1h' },
      windows: order.map((group) => ({ group, ...{ 'web-eu': { days: ['sat'], start: '02:00', duration: '2h', tz: 'Europe/Paris' }, 'web-us': { days: ['sun'], start: '01:00', duration: '2h', tz: 'America/New_York' }, canaries: { days: ['fri'], start: '13:00', duration: '1h', tz: 'Asia/Tokyo' } }[group] })),
    }, LIMITS);
    const windows = (c: CampaignRecord) => Object.fromEntries(c.nodes.map((n) => [n.node_id, n.window]));
    const first = await service.create(req(['web-eu', 'web-us', 'canaries']), admin);
    t.same(windows(first), { n1: 'web-eu', n2: 'web-us', n3: 'canaries', n4: null });
    const second = await service.create(req(['canaries', 'web-us', 'web-eu']), admin);
    t.same(windows(second), { n1: 'canaries', n2: 'web-us', n3: 'canaries', n4: null }, 'the order given decides for a node in several');
    t.same((await store.campaigns.get(first.id))!.spec.windows!.map((w) => w.group), ['web-eu', 'web-us', 'canaries'], 'kept by the store');

    // The runner on the real jobs tables: Friday 13:00 in Tokyo is 04:00Z, Paris's Saturday 02:00 is 01:00Z.
    await store.campaigns.save({ ...second, state: 'cancelled', next_at: null });
    const runner = new CampaignRunner({ store, log: silentLogger, tickMs: 60_000, settings: SETTINGS, kickJobs: () => undefined, now: () => now });
    t.equal(await runner.tick(), 1);
    t.match(await store.campaigns.get(first.id), { state: 'waiting_window', next_at: '2026-01-10T01:00:00.000Z' }, 'Friday 13:00 Tokyo has passed: Paris opens first');
    now = new Date('2026-01-10T01:00:00.000Z');
    await runner.tick();
    const running = (await store.campaigns.get(first.id))!;
    t.match(running, { state: 'running' });
    const job = await store.jobs.getJob(running.waves[0]!.job_id!);
    t.match(job, { type: 'upgrade', nodes: ['n1'], timeout_ms: 2 * H, campaign_id: first.id });
    t.same(running.nodes.filter((n) => n.state === 'running').map((n) => n.node_id), ['n1']);
    t.match(await service.report(first.id), { nodes: [{ node_id: 'n1', window: 'web-eu', state: 'running' }, { node_id: 'n2', window: 'web-us', state: 'pending' }] });
  });
}

t.test('SQLite', async (t) => suite(t, sqliteBackend));
const why = await pgUnavailable();
t.test('PostgreSQL', { skip: why ?? false }, async (t) => suite(t, postgresBackend()));
