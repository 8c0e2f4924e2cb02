/**
 * Jobs in the store, written once for both backends: store-sqlite.test.ts and
 * store-postgres.test.ts call `jobsStoreSuite` with their Backend. (Not a .test.ts: a helper.)
 */
import type { Test } from 'tap';
import type { JobInsert, Store } from '@capstan/server/store/index';
import { setup, type Backend } from '../server/store-suite.js';

export function jobInsert(id: string, over: Partial<JobInsert> = {}): JobInsert {
  return {
    id, name: `job ${id}`, type: 'run', nodes: ['a', 'b'], node_selectors: [{ manager_id: 'm1', filters: [{ key: 'region', values: ['eu-*'] }] }],
    conditions: ['c1'], keep_output: true, timeout_ms: 60_000,
    created_at: '2024-05-01T10:00:00.000Z', deadline_at: '2024-05-01T10:01:00.000Z',
    ...over,
  };
}

const at = (s: number) => new Date(Date.parse('2024-05-01T10:00:00.000Z') + s * 1000).toISOString();

async function states(store: Store, jobId: string): Promise<Record<string, string>> {
  return Object.fromEntries((await store.jobs.listTasks(jobId)).map((t) => [t.node_id, `${t.state}/${t.reason}`]));
}

export function jobsStoreSuite(t: Test, backend: Backend): void {
  t.test('jobs: a job is created with one pending task per node, deduplicated, and kept as asked', async (t) => {
    const { store } = await setup(t, backend);
    const job = await store.jobs.createJob(jobInsert('j1'), ['a', 'b', 'a']);
    t.match(job, {
      id: 'j1', name: 'job j1', type: 'run', state: 'running', nodes: ['a', 'b'], conditions: ['c1'], keep_output: true, timeout_ms: 60_000,
      node_selectors: [{ manager_id: 'm1', filters: [{ key: 'region', values: ['eu-*'] }] }],
      created_at: '2024-05-01T10:00:00.000Z', deadline_at: '2024-05-01T10:01:00.000Z', finished_at: null,
      progress: { total: 2, pending: 2, scheduled: 0, in_progress: 0, done: 0, failed: 0, aborted: 0 },
    });
    t.same(await states(store, 'j1'), { a: 'pending/created', b: 'pending/created' });
    t.same(await store.jobs.taskHistory('j1', 'a'), [{ at: at(0), from: null, to: 'pending', reason: 'created', message: null }]);
    t.equal(await store.jobs.getJob('nope'), null);
    t.equal(await store.jobs.getTask('j1', 'zz'), null);
  });

  t.test('jobs: nodes that cannot run are failed with their reason in the creating transaction', async (t) => {
    const { store } = await setup(t, backend);
    const failed = new Map([['b', { reason: 'not_accepted', message: 'the node is pending' }], ['c', { reason: 'no_agent', message: 'no agent' }]]);
    const job = await store.jobs.createJob(jobInsert('j1'), ['a', 'b', 'c'], failed);
    t.match(job, { state: 'running', progress: { total: 3, pending: 1, failed: 2 } });
    t.same(await states(store, 'j1'), { a: 'pending/created', b: 'failed/not_accepted', c: 'failed/no_agent' });
    t.same((await store.jobs.taskHistory('j1', 'b')).map((h) => `${h.from}>${h.to}:${h.reason}:${h.message}`), ['null>pending:created:null', 'pending>failed:not_accepted:the node is pending']);
    const all = await store.jobs.createJob(jobInsert('j2'), ['b'], failed);
    t.match(all, { state: 'finished', finished_at: '2024-05-01T10:00:00.000Z', progress: { failed: 1 } }, 'a job with nothing to run is finished at once');
    await t.rejects(store.jobs.createJob(jobInsert('j3'), ['x'], new Map([['x', { reason: 'completed', message: '' }]])), { code: 'ERR_JOB_TRANSITION' });
    t.equal(await store.jobs.getJob('j3'), null, 'a refused creation writes nothing');
  });

  t.test('jobs: transitions follow the table, record reason and time, and finish the job with its last task', async (t) => {
    const { store } = await setup(t, backend);
    await store.jobs.createJob(jobInsert('j1'), ['a', 'b']);
    const s = await store.jobs.transition('j1', 'a', { to: 'scheduled', reason: 'dispatched', at: at(1), relay: 'r1' });
    t.match(s, { state: 'scheduled', reason: 'dispatched', relay: 'r1', updated_at: at(1) });
    await t.rejects(store.jobs.transition('j1', 'a', { to: 'done', reason: 'completed', at: at(2) }), { code: 'ERR_JOB_TRANSITION' }, 'scheduled → done refused');
    await t.rejects(store.jobs.transition('j1', 'a', { to: 'in_progress', reason: 'completed', at: at(2) }), { code: 'ERR_JOB_TRANSITION' }, 'a reason of another state refused');
    t.match(await store.jobs.getTask('j1', 'a'), { state: 'scheduled', reason: 'dispatched' }, 'a refused transition changes nothing');
    t.equal(await store.jobs.transition('j1', 'a', { to: 'scheduled', reason: 'dispatched', at: at(2), expect: ['pending'] }), null, 'a claim of a task no longer pending answers null');
    await store.jobs.transition('j1', 'a', { to: 'in_progress', reason: 'started', at: at(3) });
    const done = await store.jobs.transition('j1', 'a', { to: 'done', reason: 'completed', at: at(4), exit_code: 0, output: 'line 1\nline 2', message: 'exit 0' });
    t.match(done, { state: 'done', exit_code: 0, output: 'line 1\nline 2', relay: 'r1', message: 'exit 0' });
    t.match(await store.jobs.getJob('j1'), { state: 'running', finished_at: null, progress: { done: 1, pending: 1 } });
    await store.jobs.transition('j1', 'b', { to: 'failed', reason: 'not_accepted', at: at(5), message: 'the node is pending' });
    t.match(await store.jobs.getJob('j1'), { state: 'finished', finished_at: at(5), progress: { total: 2, done: 1, failed: 1 } });
    await t.rejects(store.jobs.transition('j1', 'b', { to: 'aborted', reason: 'cancelled', at: at(6) }), { code: 'ERR_JOB_TRANSITION' }, 'nothing leaves a final state');
    t.same((await store.jobs.taskHistory('j1', 'a')).map((h) => [h.at, h.from, h.to, h.reason]), [
      [at(0), null, 'pending', 'created'], [at(1), 'pending', 'scheduled', 'dispatched'], [at(3), 'scheduled', 'in_progress', 'started'], [at(4), 'in_progress', 'done', 'completed'],
    ]);
  });

  t.test('jobs: cancel aborts the non-final tasks only and marks the job cancelled', async (t) => {
    const { store } = await setup(t, backend);
    await store.jobs.createJob(jobInsert('j1'), ['a', 'b', 'c']);
    await store.jobs.transition('j1', 'a', { to: 'failed', reason: 'no_agent', at: at(1) });
    await store.jobs.transition('j1', 'b', { to: 'scheduled', reason: 'dispatched', at: at(1) });
    const job = await store.jobs.cancelJob('j1', at(2));
    t.match(job, { state: 'cancelled', finished_at: at(2), progress: { failed: 1, aborted: 2 } });
    t.same(await states(store, 'j1'), { a: 'failed/no_agent', b: 'aborted/cancelled', c: 'aborted/cancelled' });
    t.match(await store.jobs.cancelJob('j1', at(3)), { state: 'cancelled', finished_at: at(2) }, 'a second cancel changes nothing');
    t.equal(await store.jobs.cancelJob('nope', at(3)), null);
    t.equal(await store.jobs.transition('j1', 'b', { to: 'in_progress', reason: 'started', at: at(4), expect: ['scheduled'] }), null, 'a late event finds the task aborted');
  });

  t.test('jobs: tasks past their job deadline are aborted whatever their state, others are not', async (t) => {
    const { store } = await setup(t, backend);
    await store.jobs.createJob(jobInsert('old', { deadline_at: at(60) }), ['a', 'b', 'c']);
    await store.jobs.createJob(jobInsert('new', { deadline_at: at(600) }), ['a']);
    await store.jobs.transition('old', 'a', { to: 'scheduled', reason: 'dispatched', at: at(1) });
    await store.jobs.transition('old', 'b', { to: 'scheduled', reason: 'dispatched', at: at(1) });
    await store.jobs.transition('old', 'b', { to: 'in_progress', reason: 'started', at: at(2) });
    t.equal(await store.jobs.expireTasks(at(59), 100), 0, 'nothing before the deadline');
    t.equal(await store.jobs.expireTasks(at(60), 100), 3);
    t.same(await states(store, 'old'), { a: 'aborted/timeout', b: 'aborted/timeout', c: 'aborted/timeout' });
    t.match(await store.jobs.getJob('old'), { state: 'finished', finished_at: at(60) });
    t.same(await states(store, 'new'), { a: 'pending/created' });
    t.equal(await store.jobs.expireTasks(at(61), 100), 0);
  });

  t.test('jobs: a claim schedules only the tasks still pending, once, with their transition', async (t) => {
    const { store } = await setup(t, backend);
    await store.jobs.createJob(jobInsert('j1'), ['a', 'b', 'c']);
    await store.jobs.transition('j1', 'c', { to: 'failed', reason: 'no_agent', at: at(1) });
    const c = { at: at(2), relay: 'r1,r2', message: 'handed to relay r1, r2' };
    t.same((await store.jobs.claimTasks('j1', ['a', 'b', 'c', 'zz'], c)).sort(), ['a', 'b']);
    t.same(await store.jobs.claimTasks('j1', ['a', 'b'], c), [], 'a second claim takes nothing');
    t.match(await store.jobs.getTask('j1', 'a'), { state: 'scheduled', reason: 'dispatched', relay: 'r1,r2', message: 'handed to relay r1, r2', updated_at: at(2) });
    t.same((await store.jobs.taskHistory('j1', 'b')).map((h) => `${h.from}>${h.to}:${h.reason}`), ['null>pending:created', 'pending>scheduled:dispatched']);
    const [x, y] = await Promise.all([store.jobs.claimTasks('j1', ['a'], c), store.jobs.claimTasks('j1', ['a'], c)]);
    t.same([...x!, ...y!], [], 'racing claims on scheduled tasks take nothing');
    await store.jobs.createJob(jobInsert('j2'), ['n']);
    const [p, q] = await Promise.all([store.jobs.claimTasks('j2', ['n'], c), store.jobs.claimTasks('j2', ['n'], c)]);
    t.same([...p!, ...q!], ['n'], 'of two racing claims, exactly one takes the task');
  });

  t.test('jobs: pending work lists the pending tasks of running jobs, oldest job first', async (t) => {
    const { store } = await setup(t, backend);
    await store.jobs.createJob(jobInsert('j2', { created_at: at(10) }), ['x', 'y']);
    await store.jobs.createJob(jobInsert('j1', { created_at: at(0) }), ['a', 'b']);
    await store.jobs.createJob(jobInsert('j3', { created_at: at(20) }), ['z']);
    await store.jobs.transition('j2', 'x', { to: 'scheduled', reason: 'dispatched', at: at(11) });
    await store.jobs.cancelJob('j3', at(21));
    const work = await store.jobs.pendingWork(100);
    t.same(work.map((w) => [w.job.id, w.nodes]), [['j1', ['a', 'b']], ['j2', ['y']]]);
    t.same((await store.jobs.pendingWork(1)).map((w) => [w.job.id, w.nodes]), [['j1', ['a']]], 'bounded');
  });

  t.test('jobs: retention deletes ended jobs older than the cut-off, with their tasks, never running ones', async (t) => {
    const { store } = await setup(t, backend);
    await store.jobs.createJob(jobInsert('ended-early'), ['a']);
    await store.jobs.createJob(jobInsert('ended-late'), ['a']);
    await store.jobs.createJob(jobInsert('running', { created_at: at(-1000) }), ['a']);
    await store.jobs.cancelJob('ended-early', at(10));
    await store.jobs.transition('ended-late', 'a', { to: 'failed', reason: 'no_agent', at: at(100) });
    t.equal(await store.jobs.deleteJobsBefore(at(50), 100), 1);
    t.equal(await store.jobs.getJob('ended-early'), null);
    t.same(await store.jobs.listTasks('ended-early'), []);
    t.same(await store.jobs.taskHistory('ended-early', 'a'), []);
    t.ok(await store.jobs.getJob('ended-late'));
    t.equal(await store.jobs.deleteJobsBefore(at(1000), 100), 1);
    t.match(await store.jobs.getJob('running'), { state: 'running' }, 'a running job is never deleted');
  });

  t.test('jobs: the list is newest first, paged, filterable by state', async (t) => {
    const { store } = await setup(t, backend);
    for (let i = 0; i < 5; i++) await store.jobs.createJob(jobInsert(`j${i}`, { created_at: at(i) }), ['a']);
    await store.jobs.cancelJob('j1', at(10));
    const p1 = await store.jobs.listJobs(1, 2);
    t.equal(p1.total, 5);
    t.same(p1.data.map((j) => j.id), ['j4', 'j3']);
    t.same((await store.jobs.listJobs(3, 2)).data.map((j) => j.id), ['j0']);
    t.same((await store.jobs.listJobs(1, 10, 'cancelled')).data.map((j) => j.id), ['j1']);
    t.equal((await store.jobs.listJobs(1, 10, 'running')).total, 4);
  });
}
