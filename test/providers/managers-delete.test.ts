/**
 * Deleting a manager (server/src/providers/managers.ts) against a real store: the choice is asked
 * only for the nodes no other manager holds, and whatever it is, a node another manager also holds
 * just loses the link. Also: a host two static lists name is one node linked to both.
 */
import t, { type Test } from 'tap';
import { checkManager, discover } from '@capstan/toolkit/providers/index';
import { applyPoll, deleteManager, parseNodesChoice, specToStored } from '@capstan/server/providers/managers';
import type { Store } from '@capstan/server/store/index';
import { sqliteBackend } from './backends.js';
import { registryOn, TEST_ADMIN } from '../helpers/node-changes.js';
import { systemActor } from '@capstan/server/audit/actor';

const DISCOVERY = systemActor('discovery');

const AT = new Date('2026-01-01T10:00:00Z');

async function setup(t: Test) {
  const store = await sqliteBackend(t);
  const add = async (id: string, hosts: string[]) => {
    const s = checkManager({ id, type: 'static', config: { hosts, region: 'lab' } });
    await store.managers.createManager({ id: s.id, name: s.name, type: s.type, provider: s.provider, spec: specToStored(s) }, AT.toISOString());
    await applyPoll(store, registryOn(store), id, { instances: await discover(s) }, AT, DISCOVERY);
  };
  await add('a', ['shared', 'only-a', 'gone-a']);
  await add('b', ['shared', 'only-b']);
  // An instance of `a` terminated since (terminated is final: no state choice moves it).
  await store.managers.applyDiscovery('a', [
    { source_id: 'shared', region: 'lab', account_id: 'static', hostname: 'shared', address: 'shared', state: 'running', tags: {} },
    { source_id: 'only-a', region: 'lab', account_id: 'static', hostname: 'only-a', address: 'only-a', state: 'running', tags: {} },
    { source_id: 'gone-a', region: 'lab', account_id: 'static', hostname: 'gone-a', address: 'gone-a', state: 'terminated', tags: {} },
  ], AT.toISOString());
  return store;
}

const rows = async (store: Store) => Object.fromEntries((await store.listNodes({ page: 1, per_page: 50, sort: 'hostname' })).data
  .map((n) => [n.hostname, { state: n.state, managers: n.managers }]));

t.test('a host two static lists name is one node linked to both', async (t) => {
  const store = await setup(t);
  t.same(await rows(store), {
    'gone-a': { state: 'terminated', managers: ['a'] },
    'only-a': { state: 'running', managers: ['a'] },
    'only-b': { state: 'running', managers: ['b'] },
    shared: { state: 'running', managers: ['a', 'b'] },
  });
});

t.test('no choice: refused with the count, nothing deleted', async (t) => {
  const store = await setup(t);
  await t.rejects(deleteManager(store, registryOn(store), 'a', null, AT, TEST_ADMIN), { code: 'ERR_MANAGER_NODES_CHOICE', details: { nodes: 2 } });
  t.ok(await store.managers.getManager('a'));
  t.equal(Object.keys(await rows(store)).length, 4);
  await t.rejects(deleteManager(store, registryOn(store), 'ghost', { kind: 'keep' }, AT, TEST_ADMIN), { code: 'ERR_MANAGER_UNKNOWN' });
});

t.test('keep: the nodes stay, unmanaged; the shared node keeps its other manager', async (t) => {
  const store = await setup(t);
  t.same(await deleteManager(store, registryOn(store), 'a', parseNodesChoice('keep'), AT, TEST_ADMIN), { nodes: 2, choice: 'keep', skipped: [] });
  t.same(await rows(store), {
    'gone-a': { state: 'terminated', managers: [] },
    'only-a': { state: 'running', managers: [] },
    'only-b': { state: 'running', managers: ['b'] },
    shared: { state: 'running', managers: ['b'] },
  });
});

t.test('delete: only the nodes no other manager holds are deleted', async (t) => {
  const store = await setup(t);
  t.same(await deleteManager(store, registryOn(store), 'a', parseNodesChoice('delete'), AT, TEST_ADMIN), { nodes: 2, choice: 'delete', skipped: [] });
  t.same(await rows(store), {
    'only-b': { state: 'running', managers: ['b'] },
    shared: { state: 'running', managers: ['b'] },
  });
});

t.test('state: set on the exclusive nodes, terminated ones skipped and named, the shared node untouched', async (t) => {
  const store = await setup(t);
  const gone = (await store.listNodes({ page: 1, per_page: 10, filters: [{ key: 'hostname', values: ['gone-a'] }] })).data[0]!;
  t.same(await deleteManager(store, registryOn(store), 'a', parseNodesChoice('state:retired'), AT, TEST_ADMIN), { nodes: 2, choice: 'state', skipped: [gone.id] });
  t.same(await rows(store), {
    'gone-a': { state: 'terminated', managers: [] },
    'only-a': { state: 'retired', managers: [] },
    'only-b': { state: 'running', managers: ['b'] },
    shared: { state: 'running', managers: ['b'] },
  });
  const history = (await store.getHistory((await store.listNodes({ page: 1, per_page: 1, filters: [{ key: 'hostname', values: ['only-a'] }] })).data[0]!.id, 1, 20)).data;
  t.ok(history.some((h) => h.field === 'state' && h.to === 'retired' && h.cause === 'admin admin: manager a deleted'), 'the cause, with the admin who acted, is in the history');
  t.throws(() => parseNodesChoice('state:'), { code: 'ERR_MANAGER_NODES_CHOICE' });
  t.throws(() => parseNodesChoice('state:Bad State'), { code: 'ERR_MANAGER_NODES_CHOICE' });
});
