/**
 * The generator on its own (real SQLite store): which nodes a change reaches, config ids that
 * change when and only when content does, and the benchmark function on a small fleet (its
 * figures are for `benchPolicy`'s caller; here only that it runs and generates every node, on
 * SQLite and, when reachable, PostgreSQL).
 */
import { join } from 'node:path';
import t from 'tap';
import { silentLogger } from '@capstan/shared';
import { benchPolicy } from '@capstan/bench/policy';
import { bundleJson } from '@capstan/server/policy/content';
import { PolicyGenerator } from '@capstan/server/policy/generate';
import { openRegistry } from '@capstan/server/registry/open';
import { inventory } from './store-suite.js';
import { programDir, waitFor } from '../helpers/programs.js';
import { PG_URL, pgUnavailable } from './pg.js';
import { setAcceptance, setState, updateNode } from '../helpers/node-changes.js';

const AT = '2024-05-01T08:00:00Z';

t.test('one rule change regenerates only the nodes of its groups', async (t) => {
  const store = await openRegistry({ sqlitePath: join(programDir(t), 'capstan.db') });
  t.teardown(() => store.close());
  for (let i = 0; i < 30; i++) await store.createNode({ id: `n${i}`, hostname: `${i % 3 === 0 ? 'web' : 'db'}-${i}` });
  const gen = new PolicyGenerator({ store, log: silentLogger });
  const dir = (id: string, content: string) => ({ id, name: id, method: 'file_content', mode: 'enforce', params: { path: `/etc/${id}`, content } });
  await store.putPolicyObject('directive', 'a', dir('a', '1'), AT);
  await store.putPolicyObject('directive', 'b', dir('b', '1'), AT);
  await store.putPolicyObject('group', 'web', { id: 'web', name: 'web', filter: [{ key: 'hostname', values: ['web*'] }] }, AT);
  await store.putPolicyObject('group', 'some', { id: 'some', name: 'some', nodes: ['n1', 'n2'] }, AT);
  const r1 = await gen.change('rule', 'r1', () => store.putPolicyObject('rule', 'r1', { id: 'r1', name: 'r1', directives: ['a'], groups: ['web'] }, AT));
  t.match(r1.stats, { nodes: 10, changed: 10 });
  const r2 = await gen.change('rule', 'r2', () => store.putPolicyObject('rule', 'r2', { id: 'r2', name: 'r2', directives: ['b'], groups: ['some'] }, AT));
  t.match(r2.stats, { nodes: 2, changed: 2 }, 'the web nodes were not touched');
  const web0 = await store.getPolicyBundle('n0');

  // A directive used only by r2: only r2's nodes.
  const d = await gen.change('directive', 'b', () => store.putPolicyObject('directive', 'b', dir('b', '2'), AT));
  t.match(d.stats, { nodes: 2, changed: 2 });
  t.same(await store.getPolicyBundle('n0'), web0, 'bundle, generated_at and ETag untouched');

  // Moving r1 from "web" to "some": web nodes lose it (empty bundles), n1/n2 gain it.
  const moved = await gen.change('rule', 'r1', () => store.putPolicyObject('rule', 'r1', { id: 'r1', name: 'r1', directives: ['a'], groups: ['some'] }, AT));
  t.match(moved.stats, { nodes: 12, changed: 12 });
  t.same(JSON.parse((await store.getPolicyBundle('n0'))!.bundle).directives, []);
  t.same(JSON.parse((await store.getPolicyBundle('n1'))!.bundle).directives.map((x: { rule_id: string; id: string }) => `${x.rule_id}/${x.id}`), ['r1/a', 'r2/b']);
  t.equal(await store.getPolicyBundle('n4'), null, 'a node never reached has no bundle');

  // The same content back: same config id as before for n1's content.
  const before = (await store.getPolicyBundle('n1'))!.config_id;
  await gen.change('directive', 'a', () => store.putPolicyObject('directive', 'a', dir('a', 'other'), AT));
  t.not((await store.getPolicyBundle('n1'))!.config_id, before);
  await gen.change('directive', 'a', () => store.putPolicyObject('directive', 'a', dir('a', '1'), AT));
  t.equal((await store.getPolicyBundle('n1'))!.config_id, before, 'config id is a function of content only');
  t.match(await gen.regenerateAll(), { nodes: 30, changed: 0 });
});

t.test('benchPolicy runs on a small fleet and generates every accepted node', async (t) => {
  const r = await benchPolicy({ nodes: 1000 });
  t.equal(r.nodes, 1000);
  t.equal(r.first_changed, 990, 'the bench fleet has 1% pending nodes');
  t.ok(r.directive_change_nodes! > 0 && r.directive_change_nodes! < 1000, 'a directive change reaches part of the fleet');
  // A bundle of the bench is about 1.2 KB, nearly all of it text its group's nodes share.
  t.ok(r.first_bundles_per_node_bytes! > 0 && r.first_bundles_per_node_bytes! < 600, `the bundles measured, their shared texts stored once (${r.first_bundles_per_node_bytes} B a node)`);
  t.comment(`1000 nodes: first ${r.first_ms} ms, unchanged ${r.unchanged_ms} ms, one directive ${r.directive_change_ms} ms`);
});

const why = await pgUnavailable();
t.test('benchPolicy given a PostgreSQL URL measures there too, under `postgres`', { skip: why ?? false }, async (t) => {
  const r = await benchPolicy({ nodes: 300, sqlite: false, databaseUrl: PG_URL });
  t.equal(r.first_ms, undefined, 'no SQLite figures when it is left out');
  const p = r.postgres!;
  t.equal(p.nodes, 300);
  t.equal(p.first_changed, 297, 'every accepted node generated (1% pending)');
  t.equal(p.templated_first_changed, 297);
  t.ok(p.directive_change_nodes > 0 && p.directive_change_nodes < 300, 'a directive change reaches part of the fleet');
  t.equal(p.one_percent_directive_change_nodes, 3, 'the 1 % change stays at its group');
  t.ok(p.first_bundles_bytes! > 0, 'the bundles measured');
  t.comment(`300 nodes on PostgreSQL: first ${p.first_ms} ms (${p.first_cpu_ms} ms CPU), templated ${p.templated_first_ms} ms`);
});

t.test('touched nodes are regenerated in batches, and settled() waits for them', async (t) => {
  const store = await openRegistry({ sqlitePath: join(programDir(t), 'capstan.db') });
  t.teardown(() => store.close());
  for (let i = 0; i < 50; i++) await store.createNode({ id: `n${i}`, hostname: `web-${i}` });
  await store.putPolicyObject('directive', 'a', { id: 'a', name: 'a', method: 'file_absent', mode: 'enforce', params: { path: '/tmp/x' } }, AT);
  await store.putPolicyObject('group', 'web', { id: 'web', name: 'web', filter: [{ key: 'hostname', values: ['web*'] }] }, AT);
  await store.putPolicyObject('rule', 'r', { id: 'r', name: 'r', directives: ['a'], groups: ['web'] }, AT);
  const gen = new PolicyGenerator({ store, log: silentLogger });
  for (let i = 0; i < 50; i++) gen.touch(`n${i}`);
  gen.touch('n0'); // a repeat costs nothing more
  await gen.settled();
  t.equal((await store.policyConfigIds(Array.from({ length: 50 }, (_, i) => `n${i}`))).size, 50);
  await updateNode(store, 'n7', { name: 'renamed' }, AT);
  await store.createNode({ id: 'x1', hostname: 'db-1' });
  gen.touch('x1');
  await gen.settled();
  t.equal(await store.getPolicyBundle('x1'), null, 'outside every group: nothing');
});

t.test('touches within the touch window, in separate turns, make one generation', async (t) => {
  const store = await openRegistry({ sqlitePath: join(programDir(t), 'capstan.db') });
  t.teardown(() => store.close());
  for (let i = 0; i < 10; i++) await store.createNode({ id: `n${i}`, hostname: `web-${i}` });
  await store.putPolicyObject('directive', 'a', { id: 'a', name: 'a', method: 'file_absent', mode: 'enforce', params: { path: '/tmp/x' } }, AT);
  await store.putPolicyObject('group', 'web', { id: 'web', name: 'web', filter: [{ key: 'hostname', values: ['web*'] }] }, AT);
  await store.putPolicyObject('rule', 'r', { id: 'r', name: 'r', directives: ['a'], groups: ['web'] }, AT);
  const deployed: string[][] = [];
  t.teardown(() => gen.close());
  const gen = new PolicyGenerator({ store, log: silentLogger, touchWindowMs: 60_000, onDeployed: (ids) => void deployed.push([...ids].sort()) });
  for (let i = 0; i < 5; i++) {
    gen.touch(`n${i}`);
    // Another turn of the event loop (an inventory each): still inside the window.
    await new Promise((r) => setImmediate(r));
  }
  t.same(deployed, [], 'nothing generated while the window is open');
  t.equal((await store.policyConfigIds(['n0'])).size, 0);
  for (let i = 5; i < 10; i++) {
    gen.touch(`n${i}`);
    await new Promise((r) => setImmediate(r));
  }
  // settled() (tests, shutdown) ends the window early and waits for the batch.
  await gen.settled();
  t.same(deployed, [['n0', 'n1', 'n2', 'n3', 'n4', 'n5', 'n6', 'n7', 'n8', 'n9']], 'ten touches in ten turns: one generation');
  const immediate = new PolicyGenerator({ store, log: silentLogger, touchWindowMs: 0, onDeployed: (ids) => void deployed.push([...ids].sort()) });
  await store.putPolicyObject('directive', 'a', { id: 'a', name: 'a', method: 'file_absent', mode: 'enforce', params: { path: '/tmp/y' } }, AT);
  immediate.touch('n0');
  await waitFor(async () => (deployed.length === 2 ? true : undefined), 'the touch without a window to be generated');
  t.same(deployed.at(-1), ['n0'], 'no window: generated without settled()');
  await immediate.close();
});

t.test('a group with a node list and a filter holds both; a reordered rule reaches its nodes with a new config id', async (t) => {
  const store = await openRegistry({ sqlitePath: join(programDir(t), 'capstan.db') });
  t.teardown(() => store.close());
  await store.createNode({ id: 'n0', hostname: 'web-0' });
  await store.createNode({ id: 'n1', hostname: 'db-1' });
  await store.createNode({ id: 'n2', hostname: 'db-2' });
  await store.upsertFromInventory(inventory('p1', { hostname: 'web-pending' })); // pending: no policy, whatever the groups say
  const gen = new PolicyGenerator({ store, log: silentLogger });
  const dir = (id: string) => ({ id, name: id, method: 'directory_present', mode: 'enforce', params: { path: `/srv/${id}` } });
  await store.putPolicyObject('directive', 'a', dir('a'), AT);
  await store.putPolicyObject('directive', 'b', dir('b'), AT);
  await store.putPolicyObject('group', 'mixed', { id: 'mixed', name: 'mixed', nodes: ['n1', 'p1', 'ghost'], filter: [{ key: 'hostname', values: ['web*'] }] }, AT);
  const rule = (directives: string[]) => gen.change('rule', 'r', () => store.putPolicyObject('rule', 'r', { id: 'r', name: 'r', directives, groups: ['mixed'] }, AT));
  t.match((await rule(['a', 'b'])).stats, { nodes: 2, changed: 2 }, 'n0 by the filter, n1 by the list');
  const order = async (n: string) => (JSON.parse((await store.getPolicyBundle(n))!.bundle) as { directives: Array<{ id: string }> }).directives.map((d) => d.id);
  t.same(await order('n0'), ['a', 'b']);
  t.same(await order('n1'), ['a', 'b']);
  t.equal(await store.getPolicyBundle('n2'), null, 'in neither');
  t.equal(await store.getPolicyBundle('p1'), null, 'listed but pending');
  const first = (await store.getPolicyBundle('n0'))!.config_id;

  // The agent applies directives in bundle order: a new order is a new policy for every node.
  t.match((await rule(['b', 'a'])).stats, { nodes: 2, changed: 2 });
  t.same(await order('n0'), ['b', 'a']);
  t.not((await store.getPolicyBundle('n0'))!.config_id, first);
  await rule(['a', 'b']);
  t.equal((await store.getPolicyBundle('n1'))!.config_id, first, 'the same order again: the same config id');

  // Accepting the pending node brings it in through the list (and its hostname matches too).
  await setAcceptance(store, 'p1', 'accepted', AT);
  t.match(await gen.nodeChanged('p1'), { changed: 1 });
  t.same(await order('p1'), ['a', 'b']);
});

t.test('the periodic check picks up membership no event announces (a state set by a provider)', async (t) => {
  const store = await openRegistry({ sqlitePath: join(programDir(t), 'capstan.db') });
  t.teardown(() => store.close());
  await store.createNode({ id: 'n1', hostname: 'a' });
  await store.createNode({ id: 'n2', hostname: 'b' });
  await store.putPolicyObject('directive', 'a', { id: 'a', name: 'a', method: 'file_absent', mode: 'enforce', params: { path: '/tmp/x' } }, AT);
  await store.putPolicyObject('group', 'stopped', { id: 'stopped', name: 'stopped', filter: [{ key: 'state', values: ['stopped'] }] }, AT);
  await store.putPolicyObject('rule', 'r', { id: 'r', name: 'r', directives: ['a'], groups: ['stopped'] }, AT);
  const gen = new PolicyGenerator({ store, log: silentLogger });
  t.match(await gen.regenerateAll(), { changed: 0 });
  // No touch: the store changes under the generator, as the lifecycle sweep or a provider does.
  await setState(store, 'n1', 'stopped', AT, 'provider says so');
  const periodic = gen.every(10);
  t.teardown(() => periodic.stop());
  const deadline = Date.now() + 10_000;
  while ((await store.getPolicyBundle('n1')) === null && Date.now() < deadline) await new Promise((r) => setImmediate(r));
  await periodic.stop();
  t.equal((await store.getPolicyBundle('n1'))?.config_id !== undefined, true, 'n1 joined the group at the next check');
  t.equal(await store.getPolicyBundle('n2'), null);
});

t.test('a bundle is stored as JSON.stringify of {node_id, config_id, generated_at, directives}, byte for byte', async (t) => {
  const directives = [{ id: 'd"1', name: 'é\n', method: 'file_content', mode: 'enforce', params: { path: '/x', content: '\u0000\u2028' }, rule_id: 'r' }];
  const at = '2024-05-01T08:00:00.000Z';
  t.equal(bundleJson('n"\\1', 'abc', at, JSON.stringify(directives)), JSON.stringify({ node_id: 'n"\\1', config_id: 'abc', generated_at: at, directives }));
});

t.test('expectations an older server wrote for an unchanged policy are brought up to date, bundles untouched', async (t) => {
  const store = await openRegistry({ sqlitePath: join(programDir(t), 'capstan.db') });
  t.teardown(() => store.close());
  const ids = Array.from({ length: 6 }, (_, i) => `n${i}`);
  for (const id of ids) await store.createNode({ id, hostname: `web-${id}` });
  await store.putPolicyObject('directive', 'a', { id: 'a', name: 'a', method: 'file_absent', mode: 'enforce', params: { path: '/tmp/x' } }, AT);
  await store.putPolicyObject('group', 'web', { id: 'web', name: 'web', filter: [{ key: 'hostname', values: ['web-*'] }] }, AT);
  await store.putPolicyObject('rule', 'r', { id: 'r', name: 'r', directives: ['a'], groups: ['web'] }, AT);
  t.match(await new PolicyGenerator({ store, log: silentLogger }).regenerateAll(), { changed: 6 });
  const configId = (await store.getPolicyBundle('n0'))!.config_id;
  const current = (await store.getExpectations('n0', configId))!;
  t.ok(current.some((e) => e.component === 'Policy'), 'today\'s self-checks are expected');
  const before = await Promise.all(ids.map((id) => store.getPolicyBundle(id)));

  // What an older server left: the same config id with fewer expected components. A run cut
  // short fixed the first nodes only (ids in order), so only the last ones are old.
  const old = current.filter((e) => e.component !== 'Policy');
  for (const id of ['n4', 'n5']) await store.setExpectations(id, configId, old, AT);
  t.same(await store.getExpectations('n5', configId), old);

  const restarted = new PolicyGenerator({ store, log: silentLogger }); // a new process: nothing verified yet
  t.match(await restarted.regenerateAll(), { changed: 0 }, 'no bundle changed');
  for (const id of ids) t.same(await store.getExpectations(id, configId), current, `${id}: current expectations`);
  t.same(await Promise.all(ids.map((id) => store.getPolicyBundle(id))), before, 'bundles and generated_at untouched');
  t.match(await restarted.regenerateAll(), { changed: 0 });
});
