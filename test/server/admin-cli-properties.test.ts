/**
 * `capstan properties …` against a real server on a loopback port: global properties set as text,
 * JSON and secret (never shown back), a node's effective properties with their origins, and the
 * exit codes of what the server refuses or does not have.
 */
import t from 'tap';
import { EXIT } from '@capstan/server/admin-cli/output';
import { serverWithApi } from '../helpers/admin-app.js';
import { capstan } from '../helpers/capstan.js';
import { inventory } from './store-suite.js';

t.test('properties: list, get, set, delete, and a node\'s effective ones', async (t) => {
  const { server, api } = await serverWithApi(t);
  const env = { CAPSTAN_URL: server.url, CAPSTAN_TOKEN: server.adminToken };
  const cli = (...args: string[]) => capstan(args, env);
  const rows = (out: string) => out.trimEnd().split('\n').map((l) => l.split(/ {2,}/));
  await server.store.upsertFromInventory(inventory('web1'));
  t.equal((await api('POST', '/api/1/nodes/web1/accept')).status, 200);

  t.equal((await cli('properties', 'set', 'owner', 'ops')).code, 0);
  t.equal((await cli('properties', 'set', 'dc', '{"dns":"10.0.0.1"}', '--json-value')).code, 0);
  const secret = await cli('properties', 'set', 'db_pw', 'hunter2-secret', '--secret');
  t.equal(secret.code, 0, secret.err);
  t.notMatch(secret.out, /hunter2/, 'the answer does not echo the secret');
  const listed = await cli('properties', 'list');
  t.notMatch(listed.out, /hunter2/);
  t.same(rows(listed.out).map((r) => r.slice(0, 3)), [['NAME', 'VALUE', 'SECRET'], ['db_pw', '(secret)', 'true'], ['dc', '{"dns":"10.0.0.1"}', 'false'], ['owner', 'ops', 'false']]);
  t.match(JSON.parse((await cli('--json', 'properties', 'get', 'dc')).out), { data: { id: 'dc', value: { dns: '10.0.0.1' } } });

  t.equal((await api('POST', '/api/1/groups', { id: 'paris', name: 'Paris', nodes: ['web1'], properties: { dc: { value: { dns: '10.0.0.2' } } } })).status, 201);
  t.equal((await api('PUT', '/api/1/nodes/web1/properties', { owner: 'alice' })).status, 200);
  const node = await cli('properties', 'node', 'web1');
  t.equal(node.code, 0, node.err);
  t.same(rows(node.out), [['PATH', 'VALUE', 'ORIGIN', 'OVERRIDES'], ['db_pw', '(secret)', 'global', '-'], ['dc.dns', '10.0.0.2', 'group paris', 'global'], ['owner', 'alice', 'node', 'global']]);
  t.notMatch((await cli('--json', 'properties', 'node', 'web1')).out, /hunter2/);
  // The node's own level, JSON values: an object merged into the groups' one, key by key.
  const edited = await cli('properties', 'node', 'web1', '--json-value', '--set', 'dc={"ntp":"ntp.web1"}', '--set', 'port=8080');
  t.equal(edited.code, 0, edited.err);
  t.same(rows(edited.out).filter((r) => ['dc.dns', 'dc.ntp', 'port'].includes(r[0]!)),
    [['dc.dns', '10.0.0.2', 'group paris', 'global'], ['dc.ntp', 'ntp.web1', 'node', '-'], ['port', '8080', 'node', '-']]);
  t.same((await api('GET', '/api/1/nodes/web1/properties')).json.data, { owner: 'alice', dc: { ntp: 'ntp.web1' }, port: 8080 });
  t.equal((await cli('properties', 'node', 'web1', '--unset', 'dc', '--unset', 'port')).code, 0);
  t.same((await api('GET', '/api/1/nodes/web1/properties')).json.data, { owner: 'alice' });
  t.equal((await cli('properties', 'node', 'web1', '--json-value', '--set', 'x={')).code, EXIT.USAGE);

  t.equal((await cli('properties', 'set', 'bad.name', 'x')).code, EXIT.REFUSED, 'a name with a dot is refused');
  t.equal((await cli('properties', 'set', 'n', '{nope', '--json-value')).code, EXIT.USAGE);
  t.equal((await cli('properties', 'node', 'ghost')).code, EXIT.NOT_FOUND);
  t.equal((await cli('properties', 'delete', 'owner')).code, 0);
  t.equal((await cli('properties', 'get', 'owner')).code, EXIT.NOT_FOUND);
});
