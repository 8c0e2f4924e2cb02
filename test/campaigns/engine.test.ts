/**
 * The campaign engine with a fake clock and fake jobs: the canary wave first and the rest after
 * it, a failure over the threshold stopping the campaign (the waves after it cancelled, no job
 * made for them), a node offline in one window retried in the next one only, and the request
 * checks and wave split it starts from.
 */
import t from 'tap';
import { advance, cancelCampaign, type CampaignJobs } from '@capstan/server/campaigns/engine';
import { overThreshold, parseCampaignRequest, splitWaves } from '@capstan/server/campaigns/plan';
import type { CampaignRecord, CampaignSpec, TaskRecord } from '@capstan/server/store/index';

const SETTINGS = { pollMs: 5000, retryDelayMs: 600_000, maxJobMs: 3600_000 };
const LIMITS = { maxTargets: 1000, defaultMaxAttempts: 3 };

type Outcome = { state: 'done' | 'failed' | 'aborted'; reason: string; exit_code?: number; output?: string };

/** Jobs that end when the test says, with the outcomes it says. */
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
      exit_code: outcomes[n]!.exit_code ?? null, output: outcomes[n]!.output ?? null, step: null, updated_at: '2026-01-01T00:00:00.000Z',
    }));
  };
  return { port, jobs, end };
}

function campaign(nodes: string[], spec: Partial<CampaignSpec>, at: string): CampaignRecord {
  const full: CampaignSpec = {
    nodes, filters: [], upgrade: { mode: 'packages', packages: [{ name: 'openssl' }], pre: [], post: [], reboot: 'never' },
    window: null, canary: null, failure_threshold: 0, max_attempts: 3, ...spec,
  };
  const waves = splitWaves(nodes, full.canary);
  return {
    id: 'c1', name: 'patch', state: 'scheduled', message: null, spec: full,
    waves: waves.map((w, index) => ({ index, nodes: w, state: 'pending', job_ids: [], job_id: null, retry_after: null, started_at: null, ended_at: null })),
    nodes: waves.flatMap((w, i) => w.map((n) => ({
      node_id: n, wave: i, state: 'pending' as const, attempts: 0, job_id: null, reason: null, message: null, exit_code: null, upgraded: [], unmet: [], reboot_required: false, updated_at: at,
    }))),
    created_at: at, updated_at: at, next_at: at, version: 1,
  };
}

const done = (from: string, to: string): Outcome => ({
  state: 'done', reason: 'completed', exit_code: 0,
  output: `$ apt-get install\nupgrade-result ${JSON.stringify({ upgraded: [{ name: 'openssl', from, to }], unmet: [], steps: [], reboot_required: true, rebooted: false, exit_code: 0 })}\ninventory sent`,
});
const states = (c: CampaignRecord) => Object.fromEntries(c.nodes.map((n) => [n.node_id, n.state]));

t.test('the canary wave first, the rest once it is done; results read from the output', async (t) => {
  const { port, jobs, end } = fakeJobs();
  const now = new Date('2026-01-10T10:00:00.000Z');
  let c = await advance(campaign(['n3', 'n1', 'n2', 'n4'], { canary: { count: 1 } }, now.toISOString()), now, port, SETTINGS);
  t.equal(c.state, 'running');
  t.same([...jobs.values()].map((j) => j.nodes), [['n1']], 'one job, on the canary (first node by id)');
  t.equal(jobs.get('job-1')!.timeoutMs, SETTINGS.maxJobMs, 'without a window the job gets the longest timeout');
  t.equal(c.next_at, '2026-01-10T10:00:05.000Z', 'looked at again after the poll interval');
  c = await advance(c, new Date('2026-01-10T10:00:05.000Z'), port, SETTINGS);
  t.equal(jobs.size, 1, 'nothing more while the canary runs');
  end('job-1', { n1: done('3.0.1', '3.0.2') });
  c = await advance(c, new Date('2026-01-10T10:00:10.000Z'), port, SETTINGS);
  t.same(jobs.get('job-2')!.nodes, ['n2', 'n3', 'n4'], 'the second wave starts at once');
  t.match(c.nodes.find((n) => n.node_id === 'n1'), { state: 'done', attempts: 1, exit_code: 0, job_id: 'job-1', reboot_required: true, upgraded: [{ name: 'openssl', from: '3.0.1', to: '3.0.2' }] });
  end('job-2', { n2: done('3.0.1', '3.0.2'), n3: done('3.0.0', '3.0.2'), n4: done('3.0.1', '3.0.2') });
  c = await advance(c, new Date('2026-01-10T10:00:15.000Z'), port, SETTINGS);
  t.match(c, { state: 'finished', next_at: null, message: '4 of 4 nodes upgraded' });
  t.same(c.waves.map((w) => [w.state, w.job_ids]), [['done', ['job-1']], ['done', ['job-2']]]);
  t.same(await advance(c, new Date('2026-01-10T11:00:00.000Z'), port, SETTINGS).then((x) => [x.state, x.next_at]), ['finished', null], 'final stays final');
});

t.test('a failed canary over the threshold stops the campaign and cancels the rest', async (t) => {
  const { port, jobs, end } = fakeJobs();
  const now = new Date('2026-01-10T10:00:00.000Z');
  let c = await advance(campaign(['a', 'b', 'c', 'd', 'e'], { canary: { percent: 40 } }, now.toISOString()), now, port, SETTINGS);
  t.same(jobs.get('job-1')!.nodes, ['a', 'b'], '40% of 5');
  end('job-1', { a: done('1', '2'), b: { state: 'failed', reason: 'exit_code', exit_code: 100 } });
  c = await advance(c, new Date('2026-01-10T10:01:00.000Z'), port, SETTINGS);
  t.match(c, { state: 'stopped', next_at: null, message: 'wave 1: 1 of 2 nodes failed, over the threshold of 0%' });
  t.same(states(c), { a: 'done', b: 'failed', c: 'cancelled', d: 'cancelled', e: 'cancelled' });
  t.same(c.waves.map((w) => w.state), ['stopped', 'cancelled']);
  t.equal(jobs.size, 1, 'no job for the cancelled wave');

  // A threshold of 50%: one failure of two is not over it, two of three are.
  const j2 = fakeJobs();
  let d = await advance(campaign(['a', 'b', 'c', 'd', 'e'], { canary: { count: 2 }, failure_threshold: 50 }, now.toISOString()), now, j2.port, SETTINGS);
  j2.end('job-1', { a: done('1', '2'), b: { state: 'failed', reason: 'agent_error' } });
  d = await advance(d, new Date('2026-01-10T10:01:00.000Z'), j2.port, SETTINGS);
  t.equal(d.state, 'running', '1 of 2 is not over 50%');
  j2.end('job-2', { c: { state: 'failed', reason: 'exit_code', exit_code: 1 }, d: { state: 'failed', reason: 'exit_code', exit_code: 1 }, e: done('1', '2') });
  d = await advance(d, new Date('2026-01-10T10:02:00.000Z'), j2.port, SETTINGS);
  t.match(d, { state: 'stopped', message: /wave 2: 2 of 3 nodes failed/ });
});

t.test('a node offline in a window is retried in the next window, not before', async (t) => {
  const { port, jobs, end } = fakeJobs();
  // Saturdays 02:00 for 3h, Paris; Saturday 10 January 2026 02:30 local = 01:30Z.
  const window = { days: ['sat' as const], start: '02:00', duration_ms: 3 * 3600_000, tz: 'Europe/Paris' };
  const early = new Date('2026-01-09T12:00:00.000Z');
  let c = await advance(campaign(['a', 'b'], { window, failure_threshold: 50, max_attempts: 2 }, early.toISOString()), early, port, SETTINGS);
  t.match(c, { state: 'waiting_window', next_at: '2026-01-10T01:00:00.000Z' }, 'created outside its window: waits for it');
  t.equal(jobs.size, 0);
  const in1 = new Date('2026-01-10T01:30:00.000Z');
  c = await advance(c, in1, port, SETTINGS);
  t.equal(jobs.get('job-1')!.timeoutMs, 2.5 * 3600_000, 'the job ends with the window');
  end('job-1', { a: done('1', '2'), b: { state: 'failed', reason: 'offline' } });
  c = await advance(c, new Date('2026-01-10T02:00:00.000Z'), port, SETTINGS);
  t.match(c, { state: 'waiting_window', next_at: '2026-01-17T01:00:00.000Z' }, 'the retry waits for next Saturday although this window is open');
  t.same(states(c), { a: 'done', b: 'retry' });
  c = await advance(c, new Date('2026-01-10T03:59:00.000Z'), port, SETTINGS);
  t.equal(jobs.size, 1, 'no second job in the same window');
  c = await advance(c, new Date('2026-01-17T01:00:00.000Z'), port, SETTINGS);
  t.same(jobs.get('job-2')!.nodes, ['b'], 'only the node to retry, in the next window');
  t.match(c.nodes.find((n) => n.node_id === 'b'), { state: 'running', attempts: 2 });
  // The window ends with the task still pending: the sweep aborts it (timeout); attempts are used up.
  end('job-2', { b: { state: 'aborted', reason: 'timeout' } });
  c = await advance(c, new Date('2026-01-17T04:00:05.000Z'), port, SETTINGS);
  t.match(c, { state: 'finished', message: '1 of 2 nodes upgraded' }, '1 failure of 2 is not over 50%');
  t.match(c.nodes.find((n) => n.node_id === 'b'), { state: 'failed', reason: 'timeout', attempts: 2 });
});

t.test('cancel cancels the running job and every node not final', async (t) => {
  const { port, jobs } = fakeJobs();
  const now = new Date('2026-01-10T10:00:00.000Z');
  const c = await advance(campaign(['a', 'b', 'c'], { canary: { count: 1 } }, now.toISOString()), now, port, SETTINGS);
  const x = await cancelCampaign(c, new Date('2026-01-10T10:00:01.000Z'), port);
  t.match(x, { state: 'cancelled', next_at: null });
  t.equal(jobs.get('job-1')!.state, 'cancelled');
  t.same(states(x), { a: 'cancelled', b: 'cancelled', c: 'cancelled' });
  t.same(x.waves.map((w) => w.state), ['cancelled', 'cancelled']);
});

t.test('waves, threshold and the request checks', async (t) => {
  t.same(splitWaves(['c', 'a', 'b', 'a'], null), [['a', 'b', 'c']]);
  t.same(splitWaves(['c', 'a', 'b'], { count: 3 }), [['a', 'b', 'c']], 'a canary of all is one wave');
  t.same(splitWaves(Array.from({ length: 25 }, (_, i) => `n${String(i).padStart(2, '0')}`), { percent: 10 }).map((w) => w.length), [3, 22], '10% of 25 rounds up');
  t.same(splitWaves(['a', 'b'], { percent: 1 }).map((w) => w.length), [1, 1], 'at least one node');
  t.same(splitWaves([], { count: 1 }), []);
  t.equal(overThreshold(0, 3, 0), false);
  t.equal(overThreshold(1, 3, 0), true);
  t.equal(overThreshold(1, 2, 50), false);
  t.equal(overThreshold(2, 3, 50), true);

  const ok = parseCampaignRequest({
    name: ' patch openssl ', q: 'package:openssl < 3.0.2', packages: ['openssl>=3.0.2', { name: 'libssl3', min_version: '3.0.2' }],
    window: { days: ['sat', 'sun'], start: '02:00', duration: '3h', tz: 'Europe/Paris' }, canary: '10%', failure_threshold: '20%', pre: ['systemctl stop app'], reboot: 'if-needed',
  }, LIMITS);
  t.match(ok, {
    name: 'patch openssl',
    spec: {
      nodes: [], filters: [{ key: 'q', values: ['package:openssl < 3.0.2'] }], canary: { percent: 10 }, failure_threshold: 20, max_attempts: 3,
      upgrade: { mode: 'packages', packages: [{ name: 'openssl', min_version: '3.0.2' }, { name: 'libssl3', min_version: '3.0.2' }], pre: ['systemctl stop app'], post: [], reboot: 'if-needed' },
      window: { tz: 'Europe/Paris', duration_ms: 3 * 3600_000 },
    },
  });
  t.match(parseCampaignRequest({ name: 's', nodes: ['a'], upgrade: 'security', canary: 2 }, LIMITS).spec, { upgrade: { mode: 'security', packages: [] }, canary: { count: 2 }, window: null });
  t.match(parseCampaignRequest({ name: 'v', vulnerability: 'CVE-2024-3094' }, LIMITS).spec, { vulnerability: 'CVE-2024-3094', upgrade: { mode: 'packages', packages: [] } }, 'packages come from the resolver');
  t.throws(() => parseCampaignRequest({ name: 'x', upgrade: 'all', q: 'package:openssl <' }, LIMITS), { code: 'ERR_FILTER_SYNTAX' }, 'an expression that does not parse');
  for (const [what, body] of [
    ['nothing to upgrade', { name: 'x', nodes: ['a'] }], ['an unknown mode', { name: 'x', upgrade: 'everything' }],
    ['packages with security', { name: 'x', upgrade: 'security', packages: ['a'] }], ['a bad package', { name: 'x', packages: ['-rf'] }],
    ['a bad canary', { name: 'x', upgrade: 'all', canary: 0 }], ['a bad canary', { name: 'x', upgrade: 'all', canary: '120%' }],
    ['a bad threshold', { name: 'x', upgrade: 'all', failure_threshold: 'half' }], ['an unknown field', { name: 'x', upgrade: 'all', waves: 3 }],
    ['a bad reboot', { name: 'x', upgrade: 'all', reboot: 'always' }], ['no name', { upgrade: 'all' }], ['a bad node', { name: 'x', upgrade: 'all', nodes: ['a b'] }],
    ['a bad vulnerability', { name: 'x', vulnerability: 'not an id!' }], ['an unknown filter key', { name: 'x', upgrade: 'all', filters: [{ key: 'colour', values: ['red'] }] }], ['a long command', { name: 'x', upgrade: 'all', pre: ['x'.repeat(5000)] }],
  ] as const) {
    t.throws(() => parseCampaignRequest(body, LIMITS), { code: 'ERR_BAD_REQUEST' }, `refused: ${what}`);
  }
});
