/**
 * Managers in the store, one suite for both backends (managers-store.test.ts runs it on each):
 * the node↔manager links, the `managed_by` and `has_agent` filters, list rows, discovery polls
 * and an agent adopting a discovered row. Not named `.test.ts`.
 */
import type { Test } from 'tap';
import type { DiscoveredInstance, DiscoverySummary, ManagerInsert, NodeFilter, Store } from '@capstan/server/store/index';
import type { Open } from './backends.js';

const AT = '2026-01-01T10:00:00.000Z';
const LATER = '2026-01-01T10:05:00.000Z';
const PEM = '-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n';

/** A poll's counts, without the nodes it moved. */
const counts = (s: DiscoverySummary) => ({ created: s.created, updated: s.updated, unchanged: s.unchanged, missing: s.missing });

export function manager(id: string, over: Partial<ManagerInsert> = {}): ManagerInsert {
  return { id, name: `Manager ${id}`, type: 'aws-ec2', provider: 'server', spec: { poll_interval: '5m', regions: ['eu-west-1'] }, ...over };
}

export function instance(id: string, over: Partial<DiscoveredInstance> = {}): DiscoveredInstance {
  return { source_id: id, region: 'eu-west-1', account_id: '111122223333', hostname: `${id}.internal`, address: '10.0.0.1', state: 'running', tags: {}, ...over };
}

const ids = async (store: Store, filters: NodeFilter[]) =>
  (await store.listNodes({ page: 1, per_page: 100, filters, sort: 'id' })).data.map((n) => n.id);

export function managersStoreSuite(t: Test, open: Open): void {
  t.test('managers are created once, listed by provider, updated and deleted', async (t) => {
    const store = await open(t);
    const m = await store.managers.createManager(manager('aws-prod', { provider: 'relay-1' }), AT);
    t.match(m, { id: 'aws-prod', provider: 'relay-1', created_at: AT, last_poll_at: null });
    await t.rejects(store.managers.createManager(manager('aws-prod'), AT), { code: 'ERR_CONFLICT' });
    await store.managers.createManager(manager('static-lab', { type: 'static' }), AT);
    t.same((await store.managers.listManagers('relay-1')).map((x) => x.id), ['aws-prod']);
    t.same((await store.managers.listManagers()).map((x) => x.id), ['aws-prod', 'static-lab']);
    const u = await store.managers.updateManager('aws-prod', { name: 'Prod', provider: 'server', spec: { poll_interval: '1m' } }, LATER);
    t.match(u, { name: 'Prod', provider: 'server', spec: { poll_interval: '1m' }, updated_at: LATER, created_at: AT });
    t.equal(await store.managers.updateManager('ghost', { name: 'x', provider: 'server', spec: {} }, LATER), null);
    t.equal(await store.managers.deleteManager('aws-prod'), true);
    t.equal(await store.managers.deleteManager('aws-prod'), false);
    t.equal(await store.managers.getManager('aws-prod'), null);
  });

  t.test('a node linked to two managers is one node; managed_by and has_agent filter lists, groups and ids', async (t) => {
    const store = await open(t);
    await store.managers.createManager(manager('m1'), AT);
    await store.managers.createManager(manager('m2'), AT);
    await store.createNode({ id: 'a', hostname: 'a' });
    await store.createNode({ id: 'b', hostname: 'b' });
    await store.createNode({ id: 'c', hostname: 'c' });
    await store.upsertFromInventory({
      id: 'agent1', hostname: 'agent1', certificate: PEM, certificate_fingerprint: 'f'.repeat(64), os_name: 'debian',
      os_version: '12', agent_version: '1', policy_server: 'relay', inventory: {}, received_at: AT,
    });
    t.equal(await store.managers.linkNode('a', 'm1', AT), true);
    t.equal(await store.managers.linkNode('a', 'm2', AT), true);
    t.equal(await store.managers.linkNode('a', 'm2', LATER), true, 'linking again is harmless');
    t.equal(await store.managers.linkNode('b', 'm2', AT), true);
    t.equal(await store.managers.linkNode('agent1', 'm1', AT), true);
    t.equal(await store.managers.linkNode('ghost', 'm1', AT), false);
    t.equal(await store.managers.linkNode('a', 'ghost', AT), false);

    t.same(await ids(store, [{ key: 'managed_by', values: ['m1'] }]), ['a', 'agent1']);
    t.same(await ids(store, [{ key: 'managed_by', values: ['m1', 'm2'] }]), ['a', 'agent1', 'b'], 'values are ORed, a node once');
    t.same(await ids(store, [{ key: 'managed_by', values: ['m2'], exclude: true }]), ['agent1', 'c']);
    t.same(await ids(store, [{ key: 'has_agent', values: ['true'] }]), ['agent1']);
    t.same(await ids(store, [{ key: 'has_agent', values: ['false'] }]), ['a', 'b', 'c']);
    t.same(await ids(store, [{ key: 'has_agent', values: ['true'], exclude: true }]), ['a', 'b', 'c']);
    t.same(await ids(store, [{ key: 'managed_by', values: ['m1'] }, { key: 'has_agent', values: ['false'] }]), ['a'],
      'discovered but no agent: one filter away');
    t.same((await store.listNodeIds([{ key: 'managed_by', values: ['m2'] }])).sort(), ['a', 'b']);
    await t.rejects(store.listNodes({ page: 1, per_page: 10, filters: [{ key: 'has_agent', values: ['yes'] }] }), { code: 'ERR_BAD_REQUEST' });

    const rows = (await store.listNodes({ page: 1, per_page: 10, sort: 'id' })).data;
    t.same(rows.map((r) => [r.id, r.managers, r.has_agent]), [
      ['a', ['m1', 'm2'], false], ['agent1', ['m1'], true], ['b', ['m2'], false], ['c', [], false],
    ]);
    t.same(await store.managers.exclusiveNodes('m1'), ['agent1']);
    t.same(await store.managers.exclusiveNodes('m2'), ['b']);
    await store.deleteNode('a');
    t.same(await store.managers.exclusiveNodes('m1'), ['agent1'], 'a deleted node takes its links with it');
    await store.managers.deleteManager('m2');
    t.same(await ids(store, [{ key: 'managed_by', values: ['m2'] }]), [], 'a deleted manager takes its links with it');
  });

  t.test('a poll creates, updates and marks missing by cloud identity; terminated is final', async (t) => {
    const store = await open(t);
    await store.managers.createManager(manager('m1'), AT);
    const first = await store.managers.applyDiscovery('m1', [
      instance('i-1', { tags: { env: 'prod', 'bad=key': 'x' } }),
      instance('i-2', { state: 'stopped' }),
      instance('i-3', { state: 'terminated' }),
      instance('i-1', { region: 'us-east-1', address: null }),
    ], AT);
    t.same(counts(first), { created: 4, updated: 0, unchanged: 0, missing: 0 });
    t.same(first.changed.map((c) => c.change), ['created', 'created', 'created', 'created'], 'each new node is named for the registry to record');
    const all = (await store.listNodes({ page: 1, per_page: 10, sort: 'hostname' })).data;
    const by = (src: string, region = 'eu-west-1') => all.find((n) => n.source_id === src && n.region === region)!;
    t.match(by('i-1'), { state: 'running', status: 'unknown', manager: 'm1', accepted: 'accepted', tags: { env: 'prod' }, managers: ['m1'], has_agent: false });
    t.notOk('bad=key' in by('i-1').tags, 'a tag key the registry cannot hold is dropped');
    t.match(by('i-2'), { state: 'stopped', status: 'unreachable' });
    t.match(by('i-3'), { state: 'terminated', status: 'unreachable' });
    t.not(by('i-1').id, by('i-1', 'us-east-1').id, 'the same instance id in two regions is two nodes');

    const second = await store.managers.applyDiscovery('m1', [
      instance('i-1', { state: 'stopped', tags: { env: 'prod' } }),
      instance('i-2', { state: 'running' }),
      instance('i-3', { state: 'running' }),
    ], LATER);
    t.same(counts(second), { created: 0, updated: 2, unchanged: 1, missing: 1 });
    t.same(second.changed.map((c) => [c.change, c.before?.state, c.after.state]).sort(), [['missing', 'running', 'missing'], ['updated', 'running', 'stopped'], ['updated', 'stopped', 'running']], 'each moved node, before and after');
    t.match(await store.getNode(by('i-1').id), { state: 'stopped', status: 'unreachable', state_changed_at: LATER });
    t.match(await store.getNode(by('i-2').id), { state: 'running', status: 'unknown' });
    t.match(await store.getNode(by('i-3').id), { state: 'terminated' }, 'terminated stays terminated');
    t.match(await store.getNode(by('i-1', 'us-east-1').id), { state: 'missing' });
    const history = (await store.getHistory(by('i-1').id, 1, 10)).data;
    t.ok(history.some((h) => h.field === 'state' && h.from === 'running' && h.to === 'stopped' && h.cause === 'discovery (manager m1)'),
      'the change is in the history with its cause');
    t.match(await store.managers.getManager('m1'), { last_poll_at: LATER, last_poll_error: null });
    await t.rejects(store.managers.applyDiscovery('ghost', [], AT), { code: 'ERR_NOT_FOUND' });
  });

  t.test('two managers discovering one instance share one node; one losing sight of it only unlinks', async (t) => {
    const store = await open(t);
    await store.managers.createManager(manager('m1'), AT);
    await store.managers.createManager(manager('m2'), AT);
    await store.managers.applyDiscovery('m1', [instance('i-1')], AT);
    await store.managers.applyDiscovery('m2', [instance('i-1')], AT);
    const rows = (await store.listNodes({ page: 1, per_page: 10 })).data;
    t.equal(rows.length, 1);
    t.same(rows[0]!.managers, ['m1', 'm2']);
    t.same(await store.managers.applyDiscovery('m2', [], LATER), { created: 0, updated: 0, unchanged: 0, missing: 0, changed: [] });
    const after = (await store.listNodes({ page: 1, per_page: 10 })).data[0]!;
    t.same(after.managers, ['m1']);
    t.equal(after.state, 'running', 'm1 still holds it, so it is not missing');
  });

  t.test('an agent enrolling on a discovered instance takes over its row', async (t) => {
    const store = await open(t);
    await store.managers.createManager(manager('m1'), AT);
    await store.managers.applyDiscovery('m1', [instance('i-1', { tags: { env: 'prod' } })], AT);
    const discovered = (await store.listNodes({ page: 1, per_page: 10 })).data[0]!;
    const identity = { source_id: 'i-1', region: 'eu-west-1', account_id: '111122223333' };
    t.equal(await store.managers.adoptDiscovered('agent-1', { ...identity, account_id: 'other' }, LATER), false);
    t.equal(await store.managers.adoptDiscovered('agent-1', identity, LATER), true);
    t.equal(await store.getNode(discovered.id), null, 'the discovered id is gone');
    const node = await store.upsertFromInventory({
      id: 'agent-1', hostname: 'web1', certificate: PEM, certificate_fingerprint: 'f'.repeat(64), os_name: 'debian',
      os_version: '12', agent_version: '1', policy_server: 'relay', inventory: {}, received_at: LATER,
    });
    t.match(node, { id: 'agent-1', source_id: 'i-1', region: 'eu-west-1', accepted: 'pending', certificate: PEM, tags: { env: 'prod' }, status: 'reachable' });
    const rows = (await store.listNodes({ page: 1, per_page: 10 })).data;
    t.same(rows.map((r) => [r.id, r.managers, r.has_agent]), [['agent-1', ['m1'], true]]);
    t.same(await store.listNodeIds([{ key: 'tag:env', values: ['prod'] }]), ['agent-1'], 'tags moved with the row');
    const history = (await store.getHistory('agent-1', 1, 20)).data;
    t.ok(history.some((h) => h.field === 'accepted' && h.to === 'pending' && h.cause.includes(discovered.id)));
    t.ok(history.some((h) => h.cause === 'discovery (manager m1)'), 'the discovery history moved with it');
    t.equal(await store.managers.adoptDiscovered('agent-2', identity, LATER), false, 'a row with an agent is never taken over');
    // The next poll finds the same row by its cloud identity.
    t.same(await store.managers.applyDiscovery('m1', [instance('i-1', { tags: { env: 'prod' } })], LATER), { created: 0, updated: 0, unchanged: 1, missing: 0, changed: [] });
  });
}
