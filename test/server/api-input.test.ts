/**
 * What the admin API refuses at the door (buildApp + inject, real SQLite store): bodies nested
 * too deep, directive parameters a method does not have, query parameters of the wrong type or
 * unknown on every route, states and references that do not exist; and one page bound for
 * every list.
 */
import t, { type Test } from 'tap';
import { adminApp } from '../helpers/admin-app.js';
import { METHOD_SPECS, validateMethodParams } from '@capstan/shared';
import { jsonDepth } from '@capstan/toolkit';
import { loadServerConfig } from '@capstan/server/config';
import { MAX_PER_PAGE } from '@capstan/server/api/params';
import { inventory, run } from './store-suite.js';
import { setAcceptance } from '../helpers/node-changes.js';


async function setup(t: Test, overrides: Record<string, unknown> = {}) {
  const { api, send, store } = await adminApp(t, { overrides });
  return { api, send, store };
}

t.test('jsonDepth counts arrays and objects, not brackets inside strings', async (t) => {
  for (const [text, depth] of [
    ['1', 0], ['"[[[["', 0], ['[]', 1], ['{"a":[1,{"b":[]}]}', 4], ['{"a":"]]]}"}', 1], ['{"a":"\\"[["}', 1], ['[[],[[]],[]]', 3],
  ] as const) {
    t.equal(jsonDepth(text), depth, text);
  }
  t.equal(jsonDepth('['.repeat(10_000) + ']'.repeat(10_000), 5), 6, 'stops once past the limit');
});

t.test('a deeply nested body is a coded 400, below the configured depth it is accepted', async (t) => {
  // This used to answer 500: the body parsed, then the directive's checks overflowed the stack.
  const { send, api } = await setup(t);
  const deep = `{"id":"d","method":"file_content","params":{"path":"/etc/motd","content":"x","extra":${'['.repeat(200_000)}${']'.repeat(200_000)}}}`;
  t.same(await send('POST', '/api/1/directives', deep).then((r) => [r.status, r.code]), [400, 'ERR_BAD_REQUEST']);
  t.same(await send('POST', '/api/1/groups', `{"id":"g","nodes":${'['.repeat(65)}${']'.repeat(65)}}`).then((r) => [r.status, r.code]), [400, 'ERR_BAD_REQUEST']);
  t.equal((await api('GET', '/api/1/directives')).status, 200, 'the server is still up');

  const shallow = await setup(t, { 'limits.max_json_depth': 3 });
  const withUnless = { id: 'c', method: 'command_run', params: { command: '/bin/true', unless: { command: '/bin/false', args: ['-x'] } } };
  t.same(await shallow.api('POST', '/api/1/directives', withUnless).then((r) => [r.status, r.code]), [400, 'ERR_BAD_REQUEST'], 'depth 4 over a limit of 3');
  t.equal((await api('POST', '/api/1/directives', withUnless)).status, 201, 'the same body under the default limit');
  t.throws(() => loadServerConfig({ overrides: { 'limits.max_json_depth': 0 } }), { code: 'ERR_CONFIG' });
});

t.test('a parameter a method does not have is refused, naming it; every declared one is accepted', async (t) => {
  // A misspelt `mdoe` used to be stored and shipped to agents, which ignored it.
  const { api } = await setup(t);
  const typo = await api('POST', '/api/1/directives', { id: 'd', method: 'file_content', params: { path: '/etc/motd', content: 'x', mdoe: '0644' } });
  t.same([typo.status, typo.code, typo.json.error.field], [400, 'ERR_METHOD_PARAMS', 'params.mdoe']);
  t.match(typo.json.error.message, /mdoe/);
  const nested = await api('POST', '/api/1/directives', {
    id: 'd', method: 'command_run', params: { command: '/bin/true', unless: { command: '/bin/false', argz: ['x'] } },
  });
  t.same([nested.status, nested.code, nested.json.error.field], [400, 'ERR_METHOD_PARAMS', 'params.unless.argz']);
  t.equal((await api('GET', '/api/1/directives/d')).status, 404, 'nothing was stored');

  // Every optional parameter of these methods, given at once, is known.
  const full: Array<[string, Record<string, unknown>]> = [
    ['file_content', { path: '/etc/motd', content: 'x', mode: '0644' }],
    ['file_permissions', { path: '/etc/motd', mode: '0600', owner: 0, group: 0 }],
    ['file_from_shared_folder', { source: 'a/b', path: '/etc/b', sha256: 'a'.repeat(64), mode: '0644' }],
    ['archive_from_shared_folder', { source: 'x.tar.gz', sha256: 'a'.repeat(64), sums_sha256: 'b'.repeat(64), target: '/opt', name: 'x', purge: true }],
    ['package_present', { name: 'vim', version: '2:9.0' }],
    ['command_check', { command: '/bin/true', args: ['-a'], expect_exit: 1 }],
    ['command_run', { command: '/bin/true', args: [], creates: '/tmp/x', unless: { command: '/bin/test', args: ['-e', '/tmp/x'] } }],
    ['sysctl_value', { key: 'net.ipv4.ip_forward', value: 1 }],
  ];
  for (const [method, params] of full) t.doesNotThrow(() => validateMethodParams(method, params), method);
  // Each method refuses a made-up field.
  for (const method of METHOD_SPECS.keys()) {
    t.throws(() => validateMethodParams(method, { ...full.find(([m]) => m === method)?.[1], zzz: 1 }), { code: 'ERR_METHOD_PARAMS' }, method);
  }
});

t.test('query parameters are checked by type on every admin route; one page bound for every list', async (t) => {
  // `reports=maybe` used to be read as false, `?foo=1` on most routes ignored, and runs refused
  // per_page above 200 while the documented bound is 1000.
  const { api, store } = await setup(t);
  await store.upsertFromInventory(inventory('n1'));
  await setAcceptance(store, 'n1', 'accepted', '2024-05-01T08:00:00Z');
  await store.insertRun(run('n1', '2024-05-01T10:00:00Z'));
  const status = async (url: string, method = 'GET') => {
    const r = await api(method, url);
    return r.status === 200 ? 200 : `${r.status} ${r.code}`;
  };
  for (const url of [
    '/api/1/nodes/n1/runs?reports=maybe', '/api/1/nodes/n1/runs?from=2024-05-01T00:00:00Zjunk', '/api/1/nodes/n1/runs?to=2024-02-31T00:00:00Z',
    '/api/1/nodes/n1/runs?per_page=1001', '/api/1/nodes/n1/runs?page=x', '/api/1/nodes/n1/runs?raports=true',
    '/api/1/nodes/n1?verbose=1', '/api/1/nodes/n1/inventory?x=', '/api/1/nodes/n1/history?per_page=-1', '/api/1/directives?kind=x',
    '/api/1/compliance/rules?by=x', '/api/1/lifecycle?x=1', '/api/1/managers?x=1', '/api/1/nodes?per_page=1001',
  ]) {
    t.equal(await status(url), '400 ERR_BAD_REQUEST', url);
  }
  t.equal(await status('/api/1/nodes/n1?x=1', 'DELETE'), '400 ERR_BAD_REQUEST', 'nothing is deleted on a typo');
  t.equal((await api('GET', '/api/1/nodes/n1')).status, 200);
  for (const url of [
    `/api/1/nodes/n1/runs?per_page=${MAX_PER_PAGE}&reports=false`, '/api/1/nodes/n1/runs?reports=0&from=2024-05-01T00:00:00%2B02:00',
    `/api/1/nodes/n1/history?per_page=${MAX_PER_PAGE}`, `/api/1/nodes?per_page=${MAX_PER_PAGE}`, `/api/1/nodes/pending?per_page=${MAX_PER_PAGE}`,
  ]) {
    t.equal(await status(url), 200, url);
  }
  t.equal((await api('GET', '/api/1/nodes/n1/runs?from=2024-05-01T11:00:00Z')).json.total, 0, 'the range still applies');
  t.equal(MAX_PER_PAGE, 1000, 'the bound docs/api.md states');
});

t.test('states, static group members and a manager\'s relay must exist', async (t) => {
  // `{"state":"stoped"}` used to be stored (the node then matched no state filter), a static
  // group could name nodes nobody has, and a manager could name a relay that does not exist.
  const { api, store } = await setup(t);
  await store.createNode({ id: 'm1', hostname: 'db-1' });
  const bad = await api('PATCH', '/api/1/nodes/m1', { state: 'stoped' });
  t.same([bad.status, bad.code], [400, 'ERR_BAD_REQUEST']);
  t.match(bad.json.error.message, /running, stopped/);
  t.equal((await store.getNode('m1'))!.state, 'running');
  t.equal((await api('PATCH', '/api/1/nodes/m1', { state: 'stopped' })).json.data.state, 'stopped');
  t.equal((await api('PATCH', '/api/1/nodes/m1', { state: 'decommissioned' })).json.data.state, 'decommissioned');

  const group = await api('POST', '/api/1/groups', { id: 'g', nodes: ['m1', 'nobody', 'm2'] });
  t.same([group.status, group.code, group.json.error.field], [400, 'ERR_BAD_REQUEST', 'nodes']);
  t.match(group.json.error.message, /m2, nobody/);
  t.equal((await api('POST', '/api/1/groups', { id: 'g', nodes: ['m1'] })).status, 201);
  t.equal((await api('PUT', '/api/1/groups/g', { id: 'g', nodes: ['m1', 'ghost'] })).code, 'ERR_BAD_REQUEST');
  // More members than one filter holds are checked in chunks.
  for (let i = 0; i < 150; i++) await store.createNode({ id: `b${i}`, hostname: `b${i}` });
  const many = Array.from({ length: 150 }, (_, i) => `b${i}`);
  t.equal((await api('PUT', '/api/1/groups/g', { id: 'g', nodes: many })).status, 200);
  t.match((await api('PUT', '/api/1/groups/g', { id: 'g', nodes: [...many, 'b150'] })).json.error.message, /b150/);

  const manager = { id: 'lab', type: 'static', config: { hosts: ['h1'] } };
  const noRelay = await api('POST', '/api/1/managers', { ...manager, provider: 'relay-nope' });
  t.same([noRelay.status, noRelay.code], [400, 'ERR_MANAGER_INVALID']);
  t.equal((await api('POST', '/api/1/managers', { ...manager, provider: 'm1' })).code, 'ERR_MANAGER_INVALID', 'a node that is not a relay');
  await store.createNode({ id: 'relay-1', hostname: 'relay-1', relay: true, certificate: 'x', certificate_fingerprint: 'f'.repeat(64) });
  t.equal((await api('POST', '/api/1/managers', { ...manager, provider: 'relay-1' })).status, 201);
  t.equal((await api('PUT', '/api/1/managers/lab', { ...manager, provider: 'relay-2' })).code, 'ERR_MANAGER_INVALID');
  t.equal((await api('PUT', '/api/1/managers/lab', { ...manager, provider: 'server' })).status, 200);
  t.equal((await api('DELETE', '/api/1/managers/lab?nodes=state:bogus')).code, 'ERR_MANAGER_NODES_CHOICE');
});

t.test('accepting a node with a certificate conflict needs the fingerprint to pin (409 without)', async (t) => {
  const { api, store } = await setup(t);
  await store.upsertFromInventory(inventory('p1'));
  await store.upsertFromInventory(inventory('p1', { certificate: '-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----\n', certificate_fingerprint: 'b'.repeat(64) }));
  const pending = await api('GET', '/api/1/nodes/pending');
  t.match(pending.json.data, [{ id: 'p1', certificate_fingerprint: 'a'.repeat(64), conflict_fingerprint: 'b'.repeat(64) }]);
  t.notOk('conflict_certificate' in pending.json.data[0], 'certificates only on the single-node view');
  t.match((await api('GET', '/api/1/nodes/p1')).json.data, { conflict_certificate: /B/ });
  t.same(await api('POST', '/api/1/nodes/p1/accept').then((r) => [r.status, r.code]), [409, 'ERR_CERTIFICATE_CONFLICT']);
  t.same(await api('POST', '/api/1/nodes/p1/accept', { fingerprint: 'c'.repeat(64) }).then((r) => [r.status, r.code]), [400, 'ERR_CERTIFICATE']);
  t.same(await api('POST', '/api/1/nodes/p1/accept', { fingerprint: 'xyz' }).then((r) => [r.status, r.code]), [400, 'ERR_BAD_REQUEST']);
  t.same(await api('POST', '/api/1/nodes/p1/accept', { fingerprnt: 'b'.repeat(64) }).then((r) => [r.status, r.code]), [400, 'ERR_BAD_REQUEST']);
  const ok = await api('POST', '/api/1/nodes/p1/accept', { fingerprint: 'b'.repeat(64) });
  t.match([ok.status, ok.json.data], [200, { accepted: 'accepted', certificate_fingerprint: 'b'.repeat(64), conflict_fingerprint: null }]);
  // Without a conflict, accept works as before, with or without the node's own fingerprint.
  await store.upsertFromInventory(inventory('p2'));
  t.equal((await api('POST', '/api/1/nodes/p2/accept')).status, 200);
});
