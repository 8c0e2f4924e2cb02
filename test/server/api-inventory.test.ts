/**
 * The admin API's inventory views, in process on a real SQLite store: properties (read, replace,
 * checked, queryable, moving the node between groups), `group` meaning policy groups in the node
 * list, built-in groups (listed, targetable, immutable), group members and a node's policy
 * explained, the fleet's software, a manual node with a known address, and unknown parameters.
 */
import t, { type Test } from 'tap';
import { adminApp } from '../helpers/admin-app.js';
import { inventory } from './store-suite.js';
import { setAcceptance } from '../helpers/node-changes.js';


async function setup(t: Test) {
  const { api, store, generator } = await adminApp(t);
  for (const [id, pkgs] of [['n1', [{ name: 'nginx', version: '1.22.1-9' }]], ['n2', [{ name: 'nginx', version: '1.18.0-6' }, { name: 'openssl', version: '3.0.11-1' }]]] as const) {
    await store.upsertFromInventory(inventory(id, {
      inventory: { node_id: id, packages: pkgs, interfaces: [{ name: 'eth0', addresses: [{ address: id === 'n1' ? '10.0.0.1' : '10.0.0.2' }] }] },
    }));
    await setAcceptance(store, id, 'accepted', '2024-05-01T10:01:00Z');
  }
  return { api, generator };
}

t.test('properties are set, checked, queried, and move a node between groups', async (t) => {
  const { api, generator } = await setup(t);
  // The node has no secret of its own: an empty list beside the plain values.
  t.same((await api('GET', '/api/1/nodes/n1/properties')).json, { data: {}, secrets: [] });
  t.same((await api('PUT', '/api/1/nodes/n1/properties', { owner: 'alice', rack: 'b2' })).json, { data: { owner: 'alice', rack: 'b2' }, secrets: [] });
  t.match((await api('PUT', '/api/1/nodes/n1/properties', { owner: 'x'.repeat(4097) })).json.error, { code: 'ERR_BAD_REQUEST', message: /^property owner holds a string longer than 4096/ });
  t.equal((await api('PUT', '/api/1/nodes/n1/properties', ['a'])).json.error.code, 'ERR_BAD_REQUEST');
  t.equal((await api('PUT', '/api/1/nodes/nope/properties', {})).json.error.code, 'ERR_NODE_UNKNOWN');
  t.same((await api('GET', `/api/1/nodes?q=${encodeURIComponent('property:owner = alice')}`)).json.data.map((n: { id: string }) => n.id), ['n1']);

  t.equal((await api('POST', '/api/1/directives', { id: 'd1', name: 'D1', method: 'file_absent', params: { path: '/tmp/x' } })).status, 201);
  t.equal((await api('POST', '/api/1/groups', { id: 'alice', name: "Alice's", filter: 'property:owner = alice' })).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'r1', name: 'R1', directives: ['d1'], groups: ['alice', 'all-nodes'] })).status, 201);
  t.same((await api('GET', '/api/1/groups/alice/nodes')).json.data.map((n: { id: string }) => n.id), ['n1']);
  t.match((await api('GET', '/api/1/nodes/n1/policy')).json.data, { groups: ['alice', 'all-nodes', 'all-nodes-with-agent'], rules: [{ id: 'r1', via: ['alice', 'all-nodes'] }] });
  // `group` in the node list means the policy group too.
  t.same((await api('GET', '/api/1/nodes?group=alice')).json.data.map((n: { id: string }) => n.id), ['n1']);
  t.same((await api('GET', `/api/1/nodes?q=${encodeURIComponent('not group = alice')}`)).json.data.map((n: { id: string }) => n.id), ['n2']);

  await api('PUT', '/api/1/nodes/n1/properties', { owner: 'bob' });
  await generator.settled();
  t.same((await api('GET', '/api/1/groups/alice/nodes')).json.total, 0, 'the changed property took it out');
  t.match((await api('GET', '/api/1/nodes/n1/policy')).json.data.rules, [{ id: 'r1', via: ['all-nodes'] }]);
  t.equal((await api('GET', '/api/1/groups/nope/nodes')).json.error.code, 'ERR_NOT_FOUND');
});

t.test('built-in groups are listed and cannot be changed', async (t) => {
  const { api } = await setup(t);
  const list = (await api('GET', '/api/1/groups')).json;
  t.same(list.data.filter((g: { builtin?: boolean }) => g.builtin).map((g: { id: string }) => g.id), ['all-nodes', 'all-nodes-with-agent', 'all-relays']);
  t.equal((await api('PUT', '/api/1/groups/all-nodes', { name: 'x', nodes: [] })).status, 409);
  t.equal((await api('DELETE', '/api/1/groups/all-relays')).status, 409);
  t.same((await api('GET', '/api/1/groups/all-nodes/nodes')).json.total, 2);
  t.same((await api('GET', '/api/1/groups/all-relays/nodes')).json.total, 0);
  const bad = await api('POST', '/api/1/groups', { id: 'g', name: 'G', filter: 'package:nginx <' });
  t.match(bad.json.error, { code: 'ERR_FILTER_SYNTAX', field: 'filter' });
});

t.test('software across the fleet, and a manual node with a known address', async (t) => {
  const { api } = await setup(t);
  t.same((await api('GET', '/api/1/software?name=ng*')).json, {
    data: [{ name: 'nginx', version: '1.18.0-6', nodes: 1 }, { name: 'nginx', version: '1.22.1-9', nodes: 1 }], total: 2, page: 1, per_page: 100,
  });
  t.equal((await api('GET', '/api/1/software?nom=x')).json.error.code, 'ERR_BAD_REQUEST');
  const taken = await api('POST', '/api/1/nodes', { host: '10.0.0.2' });
  t.equal(taken.status, 409);
  t.match(taken.json.error, { code: 'ERR_ADDRESS_TAKEN', node: 'n2' });
  t.equal((await api('POST', '/api/1/nodes', { host: '10.0.0.3' })).status, 201);
  t.equal((await api('GET', `/api/1/nodes?q=${encodeURIComponent('ip in 10.0.0.0/24')}`)).json.total, 3);
});
