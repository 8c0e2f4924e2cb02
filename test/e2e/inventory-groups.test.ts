/**
 * Targeting by inventory with the real programs: an agent whose facts directory says it is a web
 * node, and whose package set holds a given package, joins a group defined by a filter expression
 * over both, and gets that group's directive at its next run; when the fact changes, its next
 * inventory takes it out of the group and the directive no longer reaches it. On the way: the
 * node list answers the same expression, a bad expression answers 400 with its position, and the
 * node's policy is explained through the group.
 */
import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { adminClient, BIN, runProgram, startProgram, waitFor, programDir, startServer } from '../helpers/programs.js';

t.test('a node joins and leaves a dynamic group as its facts and packages say', async (t) => {
  const dir = programDir(t, { 'facts.d': { 'role.json': '{"role": "web", "site": {"room": "b2"}}' } });
  const { server, api } = await startServer(t, join(dir, 'server'));
  await writeFile(join(dir, 'agent.toml'), `[inventory]\nfacts_dir = ${JSON.stringify(join(dir, 'facts.d'))}\n`);
  const agent = () => runProgram(BIN.agent, ['run', '--config', join(dir, 'agent.toml'), '--relay', server.url, '--state-dir', join(dir, 'agent'), '--log-level', 'error']);

  t.equal((await agent()).code, 5, 'the first run waits for acceptance');
  const id = (await readFile(join(dir, 'agent', 'node-id'), 'utf8')).trim();
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${id}`)).status === 200 ? true : undefined), 'the node registered');
  t.equal((await api('POST', `/api/1/nodes/${id}/accept`)).status, 200);

  // A package this host really has, from the inventory the agent sent.
  const inventory = (await api('GET', `/api/1/nodes/${id}/inventory`)).json.data.inventory;
  t.same(inventory.facts, { role: 'web', site: { room: 'b2' } }, 'the facts directory is in the inventory');
  const pkg = inventory.packages?.[0] as { name: string; version: string } | undefined;
  t.ok(pkg, 'the host reports its packages (dpkg, rpm or apk)');
  const expr = `fact:role = web and fact:site.room = b2 and package:${JSON.stringify(pkg!.name)} >= ${JSON.stringify(pkg!.version)}`;

  // The node list answers the expression; a bad one is refused with its position.
  const listed = await api('GET', `/api/1/nodes?q=${encodeURIComponent(expr)}`);
  t.same(listed.json.data.map((n: { id: string }) => n.id), [id]);
  t.same((await api('GET', `/api/1/nodes?q=${encodeURIComponent('fact:role = web and')}`)).json.error, { code: 'ERR_FILTER_SYNTAX', message: 'filter, at position 19: expected a field', position: 19 });

  const target = join(dir, 'web.txt');
  t.equal((await api('POST', '/api/1/directives', { id: 'web-file', name: 'Web file', method: 'file_content', params: { path: target, content: 'web\n' } })).status, 201);
  t.equal((await api('POST', '/api/1/groups', { id: 'web', name: 'Web nodes', filter: expr })).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'web-rule', name: 'Web', directives: ['web-file'], groups: ['web'] })).status, 201);
  const members = await api('GET', '/api/1/groups/web/nodes');
  t.same(members.json.data.map((n: { id: string }) => n.id), [id], 'the group holds the node');

  const joined = await agent();
  t.equal(joined.code, 0, joined.stderr);
  t.equal(await readFile(target, 'utf8'), 'web\n', "the group's directive was applied");
  const policy = (await api('GET', `/api/1/nodes/${id}/policy`)).json.data;
  t.match(policy.rules, [{ id: 'web-rule', via: ['web'], directives: [{ id: 'web-file', method: 'file_content' }] }]);
  t.ok(policy.groups.includes('all-nodes') && policy.groups.includes('web'), 'built-in and dynamic groups');

  // The fact changes: the next run sends the changed inventory and the node leaves the group.
  await writeFile(join(dir, 'facts.d', 'role.json'), '{"role": "db", "site": {"room": "b2"}}');
  t.equal((await agent()).code, 0);
  await waitFor(async () => ((await api('GET', '/api/1/groups/web/nodes')).json.total === 0 ? true : undefined), 'the node out of the group');
  // Changed nodes are regenerated together a moment later ([policy] touch_window): the policy
  // says which groups its last generation found the node in.
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${id}/policy`)).json.data.rules.length === 0 ? true : undefined), 'the policy regenerated');
  t.same((await api('GET', `/api/1/nodes/${id}/policy`)).json.data.rules, [], 'no rule reaches the node');
  await rm(target);
  const left = await agent();
  t.equal(left.code, 0, left.stderr);
  await t.rejects(readFile(target, 'utf8'), { code: 'ENOENT' }, 'the directive no longer applies');
  t.same((await api('GET', `/api/1/nodes?q=${encodeURIComponent('fact:role = db')}`)).json.total, 1);
});
