/**
 * One door for node changes: each change made through the admin API and through
 * `capstan-server nodes …` (the same verbs as `capstan`, in process on the same database) leaves
 * the same node record, the same history and the same effects. A tag changed from the shell
 * regenerates the node's policy before the command returns (seen from outside, as the config id
 * an agent gets: it used to wait for the 15-minute regeneration sweep); a relay demoted from the
 * shell has its tokens renewed as through the API.
 */
import t from 'tap';
import { createNodeIdentity, silentLogger } from '@capstan/shared';
import { loadServerConfig } from '@capstan/server/config';
import { startServer } from '@capstan/server/server';
import type { NodeRecord } from '@capstan/server/store/index';
import { BIN, adminClient, runProgram, waitFor, programDir } from '../helpers/programs.js';
import { inventory } from './store-suite.js';

t.test('API and command line: same records, history and effects for every node change', async (t) => {
  const dir = programDir(t);
  const config = loadServerConfig({
    overrides: {
      'general.data_dir': dir, 'general.listen': '127.0.0.1:0', 'identity.require_token': false,
      'lifecycle.sweep_interval': '1h', 'policy.regenerate_interval': '0',
    },
  });
  const server = await startServer(config, silentLogger);
  t.teardown(() => server.close());
  const api = adminClient(server.url, server.adminToken);
  const cli = async (...args: string[]) => {
    const r = await runProgram(BIN.server, ['nodes', ...args, '--data-dir', dir, '--json']);
    t.equal(r.code, 0, `nodes ${args.join(' ')}: ${r.stderr}`);
  };
  /** The config id of the node's policy as an agent fetches it (null: none). */
  const configId = async (id: string): Promise<string | null> => {
    const res = await fetch(`${server.url}/policies/${id}/rules`);
    const body = await res.text();
    if (res.status !== 200 && process.env.PARITY_DEBUG) console.error(id, res.status, body);
    return res.status === 200 ? res.headers.get('etag') : null;
  };
  const shape = (n: NodeRecord | null) => n && {
    accepted: n.accepted, state: n.state, status: n.status, tags: n.tags, groups: n.groups, relay: n.relay, manager: n.manager, name: n.name,
  };
  const history = async (id: string) => (await server.store.getHistory(id, 1, 100)).data.map((h) => `${h.field}:${h.from}->${h.to}`).sort();
  const same = async (a: string, b: string, what: string) => {
    t.same(shape(await server.store.getNode(b)), shape(await server.store.getNode(a)), `${what}: same record`);
    t.same(await history(b), await history(a), `${what}: same history`);
  };

  // A rule for the nodes tagged env=prod.
  t.equal((await api('POST', '/api/1/directives', { id: 'motd', name: 'motd', method: 'file_content', params: { path: '/etc/motd', content: 'hi' } })).status, 201);
  t.equal((await api('POST', '/api/1/groups', { id: 'prod', filter: [{ key: 'tag:env', values: ['prod'] }] })).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'prod', directives: ['motd'], groups: ['prod'] })).status, 201);

  // accept (pending nodes that sent an inventory)
  for (const id of ['a1', 'c1']) await server.store.upsertFromInventory(inventory(id, { hostname: 'same.example.com' }));
  t.equal((await api('POST', '/api/1/nodes/a1/accept')).status, 200);
  await cli('accept', 'c1');
  await same('a1', 'c1', 'accept');
  // No rule applies to them yet: no policy either way.
  t.equal(await server.store.getPolicyBundle('c1'), null);

  // tags: the node joins the group, its policy is generated at once
  t.equal((await api('PATCH', '/api/1/nodes/a1', { tags: { env: 'prod' } })).status, 200);
  await cli('tags', 'c1', 'env=prod');
  // Read from the store before any fetch (a fetch would generate a missing bundle itself).
  const stored = await server.store.getPolicyBundle('c1');
  t.ok(stored?.bundle.includes('"motd"'), 'command line: the rule reached the node before the command returned');
  await same('a1', 'c1', 'tags');
  await waitFor(async () => ((await server.store.getPolicyBundle('a1'))?.bundle.includes('"motd"') ? true : undefined), 'the API\'s regeneration');
  const prod = { a1: await configId('a1'), c1: await configId('c1') };
  t.ok(prod.c1);
  t.equal(prod.c1, prod.a1, 'the same policy either way');
  // and leaves it: the policy an agent fetches changes at once
  t.equal((await api('PATCH', '/api/1/nodes/a1', { tags: {} })).status, 200);
  await cli('tags', 'c1', '--remove', 'env');
  t.not(await configId('c1'), prod.c1, 'command line: the new policy is served when the command returns');
  await waitFor(async () => ((await configId('a1')) !== prod.a1 ? true : undefined), 'the API\'s regeneration');
  t.equal(await configId('c1'), await configId('a1'));
  await same('a1', 'c1', 'tags cleared');

  // groups, state
  t.equal((await api('PATCH', '/api/1/nodes/a1', { groups: ['g1'] })).status, 200);
  await cli('groups', 'c1', 'g1');
  await same('a1', 'c1', 'groups');
  t.equal((await api('PATCH', '/api/1/nodes/a1', { state: 'stopped' })).status, 200);
  await cli('set-state', 'c1', 'stopped');
  await same('a1', 'c1', 'state');

  // refuse
  for (const id of ['a2', 'c2']) await server.store.upsertFromInventory(inventory(id, { hostname: 'two.example.com' }));
  t.equal((await api('POST', '/api/1/nodes/a2/refuse')).status, 200);
  await cli('refuse', 'c2');
  await same('a2', 'c2', 'refuse');

  // create
  t.equal((await api('POST', '/api/1/nodes', { host: '10.0.0.1', id: 'a3', name: 'n', tags: { env: 'prod' } })).status, 201);
  await cli('add', '--host', '10.0.0.2', '--id', 'c3', '--name', 'n', '--tag', 'env=prod');
  await same('a3', 'c3', 'create');
  t.equal(!!(await configId('c3')), !!(await configId('a3')), 'create: same policy presence');

  // a relay demoted: its tokens are renewed either way
  for (const id of ['ar', 'cr']) {
    await server.store.createNode({ id, hostname: 'relay.example.com', certificate: createNodeIdentity(id, { bits: 1024 }).certPem, relay: true });
  }
  t.equal((await api('PATCH', '/api/1/nodes/ar', { relay: false })).status, 200);
  await cli('set-relay', 'cr', 'off');
  await same('ar', 'cr', 'relay off');
  const forced = await server.store.identity.forcedRenewals(0);
  t.ok(forced.has('ar') && forced.has('cr'), 'both demoted relays have a forced renewal');

  // delete
  t.equal((await api('DELETE', '/api/1/nodes/a1')).status, 204);
  await cli('delete', 'c1');
  t.equal(await server.store.getNode('c1'), null);
  t.equal(await configId('c1'), await configId('a1'), 'delete: no policy either way');
});
