/**
 * Bootstrap in the store, written once for both backends (store-sqlite.test.ts and
 * store-postgres.test.ts call it): credentials, pinned host keys, single-use enrol tokens, task
 * steps, and the dispatch split between relay jobs and bootstrap jobs. (Not a .test.ts: a helper.)
 */
import type { Test } from 'tap';
import type { SealedCredential } from '@capstan/server/store/index';
import { inventory, setup, type Backend } from '../server/store-suite.js';
import { jobInsert } from './jobs-store-suite.js';

const credential = (id: string, over: Partial<SealedCredential> = {}): SealedCredential => ({
  id, user: 'admin', port: 22, selectors: ['tag:env=prod'], fingerprint: 'SHA256:abc', has_password: false,
  created_at: '2024-05-01T10:00:00.000Z', sealed: 'v1.iv.tag.ct', ...over,
});

export function bootstrapStoreSuite(t: Test, backend: Backend): void {
  t.test('bootstrap: credentials are listed without their sealed secret; ids are unique', async (t) => {
    const { store } = await setup(t, backend);
    const created = await store.bootstrap.createCredential(credential('c1', { selectors: ['tag:env=prod', 'group:web'], has_password: true }));
    t.same(created, { id: 'c1', user: 'admin', port: 22, selectors: ['tag:env=prod', 'group:web'], fingerprint: 'SHA256:abc', has_password: true, created_at: '2024-05-01T10:00:00.000Z' });
    await t.rejects(store.bootstrap.createCredential(credential('c1')), { code: 'ERR_CONFLICT' });
    await store.bootstrap.createCredential(credential('c0', { fingerprint: null, port: 2222 }));
    const list = await store.bootstrap.listCredentials();
    t.same(list.map((c) => c.id), ['c0', 'c1']);
    t.notOk(JSON.stringify(list).includes('v1.iv'), 'no sealed secret in the list');
    t.equal((await store.bootstrap.getSealedCredential('c1'))?.sealed, 'v1.iv.tag.ct');
    t.equal(await store.bootstrap.getSealedCredential('nope\u0000'), null);
    t.equal(await store.bootstrap.deleteCredential('c1'), true);
    t.equal(await store.bootstrap.deleteCredential('c1'), false);
  });

  t.test('bootstrap: the first host key seen is pinned and stays until cleared', async (t) => {
    const { store } = await setup(t, backend);
    await store.upsertFromInventory(inventory('n1'));
    const first = { node_id: 'n1', algorithm: 'ssh-ed25519', fingerprint: 'SHA256:one', pinned_at: '2024-05-01T10:00:00.000Z', job_id: 'j1' };
    t.same(await store.bootstrap.pinHostKey(first), first);
    t.same(await store.bootstrap.pinHostKey({ ...first, fingerprint: 'SHA256:two', job_id: 'j2' }), first, 'a second key does not replace the pin');
    t.same(await store.bootstrap.getHostKey('n1'), first);
    t.equal(await store.bootstrap.clearHostKey('n1'), true);
    t.equal(await store.bootstrap.getHostKey('n1'), null);
    t.equal(await store.bootstrap.clearHostKey('n1'), false);
    await store.bootstrap.pinHostKey(first);
    t.equal(await store.deleteNode('n1'), true);
    t.equal(await store.bootstrap.getHostKey('n1'), null, 'a deleted node\'s pin goes with it');
  });

  t.test('bootstrap: an enrol token is used once, only before it expires', async (t) => {
    const { store } = await setup(t, backend);
    await store.bootstrap.putEnrolToken({ digest: 'd1', job_id: 'j1', node_id: 'n1', expires_at: '2024-05-01T11:00:00.000Z' });
    await store.bootstrap.putEnrolToken({ digest: 'd2', job_id: 'j1', node_id: 'n2', expires_at: '2024-05-01T11:00:00.000Z' });
    t.equal(await store.bootstrap.enrolledBy('j1', 'n1'), null);
    t.same(await store.bootstrap.useEnrolToken('d1', '2024-05-01T10:30:00.000Z', 'agent-1'), { job_id: 'j1', node_id: 'n1' });
    t.equal(await store.bootstrap.useEnrolToken('d1', '2024-05-01T10:31:00.000Z', 'agent-2'), null, 'single use');
    t.equal(await store.bootstrap.enrolledBy('j1', 'n1'), 'agent-1');
    t.equal(await store.bootstrap.useEnrolToken('d2', '2024-05-01T11:00:00.000Z', 'agent-3'), null, 'expired');
    t.equal(await store.bootstrap.useEnrolToken('unknown', '2024-05-01T10:00:00.000Z', 'agent-4'), null);
    t.equal(await store.bootstrap.deleteEnrolTokensBefore('2024-05-01T12:00:00.000Z', 10), 2);
  });

  t.test('bootstrap: relay dispatch and the bootstrap runner each see only their kind of pending task', async (t) => {
    const { store } = await setup(t, backend);
    await store.jobs.createJob(jobInsert('run1'), ['a']);
    const b = await store.jobs.createJob(jobInsert('boot1', { type: 'bootstrap', conditions: [], keep_output: false, bootstrap: { credential: null, relay_url: 'https://relay.example:3030' } }), ['x']);
    t.same(b.bootstrap, { credential: null, relay_url: 'https://relay.example:3030' }, 'the bootstrap spec is kept');
    t.same((await store.jobs.pendingWork(10)).map((w) => w.job.id), ['run1']);
    t.same((await store.jobs.pendingWork(10, 'bootstrap')).map((w) => [w.job.id, w.nodes]), [['boot1', ['x']]]);
  });

  t.test('bootstrap: a node whose manager a relay hosts is that relay\'s task, the others the server\'s', async (t) => {
    const { store } = await setup(t, backend);
    for (const n of ['x', 'y', 'z', 'w']) await store.upsertFromInventory(inventory(n));
    const at = '2024-05-01T10:00:00.000Z';
    const spec = { hosts: [] };
    await store.managers.createManager({ id: 'm-server', name: 'm-server', type: 'static', provider: 'server', spec }, at);
    await store.managers.createManager({ id: 'm-relay-b', name: 'b', type: 'static', provider: 'relay-b', spec }, at);
    await store.managers.createManager({ id: 'm-relay-a', name: 'a', type: 'static', provider: 'relay-a', spec }, at);
    await store.managers.linkNode('x', 'm-server', at);
    await store.managers.linkNode('y', 'm-relay-b', at);
    // Held by a server-hosted manager and two relays' managers: the smallest relay id runs it.
    for (const m of ['m-server', 'm-relay-b', 'm-relay-a']) await store.managers.linkNode('z', m, at);
    await store.jobs.createJob(jobInsert('boot1', { type: 'bootstrap', conditions: [], keep_output: false }), ['w', 'x', 'y', 'z']);
    const nodes = async (host?: string) => (await store.jobs.pendingWork(10, 'bootstrap', host)).flatMap((w) => w.nodes);
    t.same(await nodes(), ['w', 'x'], 'the server: no manager, or only server-hosted ones');
    t.same(await nodes('server'), ['w', 'x']);
    t.same(await nodes('relay-a'), ['z']);
    t.same(await nodes('relay-b'), ['y']);
    t.same(await nodes('relay-c'), []);
    t.same(await store.jobs.pendingWork(1, 'bootstrap', 'relay-b').then((w) => w.map((x) => x.nodes)), [['y']], 'the limit counts only the host\'s tasks');
  });

  t.test('bootstrap: a task records its step only while in progress', async (t) => {
    const { store } = await setup(t, backend);
    await store.jobs.createJob(jobInsert('b1', { type: 'bootstrap', conditions: [], keep_output: false }), ['x']);
    t.equal(await store.jobs.setTaskStep('b1', 'x', 'connect', 'connecting', '2024-05-01T10:00:01.000Z'), false, 'pending: not yet');
    t.same(await store.jobs.claimTasks('b1', ['x'], { at: '2024-05-01T10:00:01.000Z', relay: 'server', message: 'm' }), ['x']);
    await store.jobs.transition('b1', 'x', { to: 'in_progress', reason: 'started', at: '2024-05-01T10:00:02.000Z' });
    t.equal(await store.jobs.setTaskStep('b1', 'x', 'copy', 'copying', '2024-05-01T10:00:03.000Z'), true);
    t.match(await store.jobs.getTask('b1', 'x'), { state: 'in_progress', step: 'copy', message: 'copying' });
    await store.jobs.transition('b1', 'x', { to: 'failed', reason: 'install_failed', at: '2024-05-01T10:00:04.000Z', message: 'ERR_BOOTSTRAP_INSTALL: dpkg' });
    t.equal(await store.jobs.setTaskStep('b1', 'x', 'enrol', 'late', '2024-05-01T10:00:05.000Z'), false, 'final: never again');
    t.match(await store.jobs.getTask('b1', 'x'), { state: 'failed', reason: 'install_failed', step: 'copy' });
  });
}
