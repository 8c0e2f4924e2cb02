/**
 * The `capstan` verbs that came over from `capstan-server` (credentials, software, lifecycle,
 * node inventory and its history, properties, host keys, compliance, policy, identity, relays,
 * group members), each against a real server on a loopback port: what it prints, what it
 * changed, and the exit code of what the server refuses.
 */
import { generateKeyPairSync } from 'node:crypto';
import { join } from 'node:path';
import t from 'tap';
import { createNodeIdentity } from '@capstan/shared';
import { EXIT } from '@capstan/server/admin-cli/output';
import { serverWithApi } from '../helpers/admin-app.js';
import { capstan } from '../helpers/capstan.js';
import { programDir } from '../helpers/programs.js';
import { inventory } from './store-suite.js';

let server: Awaited<ReturnType<typeof serverWithApi>>['server'];
let api: Awaited<ReturnType<typeof serverWithApi>>['api'];
let env: Record<string, string>;
const cli = (...args: string[]) => capstan(args, env);
const json = async (...args: string[]) => {
  const r = await cli('--json', ...args);
  if (r.code !== 0) throw new Error(`capstan ${args.join(' ')} exited ${r.code}: ${r.err}`);
  return JSON.parse(r.out);
};
/** The table's lines, each split on its column gaps. */
const rows = (out: string) => out.trimEnd().split('\n').map((l) => l.split(/ {2,}/));

/** An inventory as an agent sends it, with these packages and addresses. */
const sent = (id: string, packages: Array<[string, string]>, at: string, address = '10.1.0.5') => inventory(id, {
  inventory: {
    node_id: id, hostname: `${id}.example.com`, os: { name: 'debian', version: '12', kernel: '6.1.0-18-amd64', arch: 'x86_64' },
    packages: packages.map(([name, version]) => ({ name, version })), interfaces: [{ name: 'eth0', addresses: [{ family: 'IPv4', address }] }],
  },
  received_at: at,
});

// One server for the whole file: web1 (two inventories) and db1 accepted, pend1 pending.
t.before(async () => {
  ({ server, api } = await serverWithApi(t));
  env = { CAPSTAN_URL: server.url, CAPSTAN_TOKEN: server.adminToken };
  await server.store.upsertFromInventory(sent('web1', [['openssl', '3.0.11-1~deb12u2'], ['nginx', '1.22.1-9']], '2026-11-20T10:00:00.000Z'));
  await server.store.upsertFromInventory(sent('web1', [['openssl', '3.0.13-1~deb12u1']], '2026-11-21T10:00:00.000Z'));
  await server.store.upsertFromInventory(sent('db1', [['openssl', '3.0.13-1~deb12u1']], '2026-11-21T10:00:00.000Z', '10.1.0.6'));
  await server.store.upsertFromInventory(sent('pend1', [], '2026-11-21T10:00:00.000Z', '10.1.0.7'));
  for (const id of ['web1', 'db1']) t.equal((await api('POST', `/api/1/nodes/${id}/accept`)).status, 200);
});

t.test('nodes inventory: the last inventory, its packages, and what changed between inventories', async (t) => {
  const shown = await cli('nodes', 'inventory', 'web1');
  t.equal(shown.code, 0, shown.err);
  t.match(shown.out, /^os\.name\s+debian$/m, 'objects one level flattened');
  t.match(shown.out, /^packages\s+1 entries$/m, 'lists counted');
  t.notMatch(shown.out, /certificate/);
  t.same(rows((await cli('nodes', 'inventory', 'web1', '--packages')).out), [['NAME', 'VERSION'], ['openssl', '3.0.13-1~deb12u1']]);
  t.match(await json('nodes', 'inventory', 'web1'), { data: { received_at: '2026-11-21T10:00:00.000Z', inventory: { node_id: 'web1', packages: [{ name: 'openssl' }] } } }, '--json: the document as sent');
  const history = await cli('nodes', 'inventory-history', 'web1');
  t.equal(history.code, 0, history.err);
  t.same(rows(history.out), [
    ['AT', 'KIND', 'NAME', 'FROM', 'TO'],
    ['2026-11-21T10:00:00.000Z', 'package_upgraded', 'openssl', '3.0.11-1~deb12u2', '3.0.13-1~deb12u1'],
    ['2026-11-21T10:00:00.000Z', 'package_removed', 'nginx', '1.22.1-9', '-'],
  ]);
  t.equal((await cli('nodes', 'inventory', 'ghost')).code, EXIT.NOT_FOUND);
});

t.test('software: versions across the fleet, with node counts', async (t) => {
  const r = await cli('software', 'open*');
  t.equal(r.code, 0, r.err);
  t.same(rows(r.out), [['NAME', 'VERSION', 'NODES'], ['openssl', '3.0.13-1~deb12u1', '2']], 'accepted nodes, as their last inventories have it');
  t.equal((await cli('software', 'nothing*')).out, 'NAME  VERSION  NODES\n');
  t.match(await json('software'), { data: [{ name: 'openssl', nodes: 2 }], total: 1 }, 'without a glob: every package');
});

t.test('nodes properties: shown, set and unset, the others kept', async (t) => {
  t.equal((await cli('nodes', 'properties', 'web1')).out, 'PROPERTY  VALUE\n');
  const set = await cli('nodes', 'properties', 'web1', '--set', 'owner=alice', '-s', 'rack=b2-14');
  t.equal(set.code, 0, set.err);
  t.same(rows(set.out), [['PROPERTY', 'VALUE'], ['owner', 'alice'], ['rack', 'b2-14']]);
  t.same((await json('nodes', 'properties', 'web1', '--unset', 'rack', '--set', 'owner=bob')).data, { owner: 'bob' });
  t.same((await api('GET', '/api/1/nodes/web1/properties')).json.data, { owner: 'bob' }, 'stored');
  t.equal((await cli('nodes', 'properties', 'web1', '--set', 'novalue')).code, EXIT.USAGE);
  // JSON values: objects, lists, numbers; the table shows them as JSON.
  const js = await cli('nodes', 'properties', 'web1', '--json-value', '--set', 'site={"room":"R1","racks":[3,4]}', '--set', 'weight=2');
  t.equal(js.code, 0, js.err);
  t.same(rows(js.out), [['PROPERTY', 'VALUE'], ['owner', 'bob'], ['site', '{"room":"R1","racks":[3,4]}'], ['weight', '2']]);
  t.same((await api('GET', '/api/1/nodes/web1/properties')).json.data, { owner: 'bob', site: { room: 'R1', racks: [3, 4] }, weight: 2 }, 'stored as JSON');
  t.same(rows((await cli('nodes', 'list', '-q', 'property:site.racks.0 = 3 and property:weight >= 2')).out).map((r) => r[0]), ['ID', 'web1'], 'filtered by path');
  t.equal((await cli('nodes', 'properties', 'web1', '--json-value', '--set', 'bad={')).code, EXIT.USAGE, 'JSON that does not parse');
  t.equal((await cli('nodes', 'properties', 'ghost')).code, EXIT.NOT_FOUND);
});

t.test('nodes policy and groups members: what reaches a node and why, a group\'s members', async (t) => {
  t.equal((await api('POST', '/api/1/directives', { id: 'motd', name: 'Motd', method: 'file_content', params: { path: '/etc/motd', content: 'hi\n' } })).status, 201);
  t.equal((await api('POST', '/api/1/groups', { id: 'web', name: 'Web', filter: [{ key: 'name', values: ['web*'] }] })).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'base', name: 'Base', directives: ['motd'], groups: ['web'] })).status, 201);
  const policy = await cli('nodes', 'policy', 'web1');
  t.equal(policy.code, 0, policy.err);
  const [head, , ...table] = policy.out.trimEnd().split('\n');
  t.match(head, /^node web1 \(accepted\), config \S+, groups: .*\bweb\b/);
  t.same(table.map((l) => l.split(/ {2,}/)), [['RULE_ID', 'VIA', 'DIRECTIVE_ID', 'METHOD', 'MODE'], ['base', 'web', 'motd', 'file_content', 'enforce']]);
  t.same((await json('nodes', 'policy', 'db1')).data.rules, [], 'no rule reaches db1');
  t.same(rows((await cli('groups', 'members', 'web')).out).map((r) => r[0]), ['ID', 'web1']);
  t.equal((await cli('groups', 'members', 'nope')).code, EXIT.NOT_FOUND);
});

t.test('nodes compliance: one node per rule and directive, or every node', async (t) => {
  const one = await cli('nodes', 'compliance', 'web1');
  t.equal(one.code, 0, one.err);
  t.match(one.out, /^RULE_ID\s+DIRECTIVE_ID\s+COMPLIANCE\s+ITEMS\s+COUNTS\n/);
  t.match(one.out, /^base\s+motd\s+0\s+1\s+applying 1$/m, 'the new rule, not run yet');
  t.same(await cli('nodes', 'compliance', 'web1'), await cli('node-compliance', 'web1'), 'node-compliance is the same verb');
  const all = await cli('nodes', 'compliance', '--filter', 'name=web*');
  t.same(rows(all.out).map((r) => r.slice(0, 3)), [['NODE_ID', 'HOSTNAME', 'CLASS'], ['web1', 'web1.example.com', 'agent']]);
  t.match((await cli('nodes', 'compliance', '--csv')).out, /^node_id,hostname,class,status,state,last_run_at,policy_config_id,compliance,items,/, 'CSV as the server exports it');
});

t.test('lifecycle: counts by status, state and acceptance', async (t) => {
  const r = await cli('lifecycle');
  t.equal(r.code, 0, r.err);
  const lines = rows(r.out);
  t.same(lines[0], ['FIELD', 'VALUE', 'COUNT']);
  t.ok(lines.some((l) => l[0] === 'accepted' && l[1] === 'accepted' && l[2] === '2'), r.out);
  t.ok(lines.some((l) => l[0] === 'accepted' && l[1] === 'pending' && l[2] === '1'), r.out);
  t.match(await json('lifecycle'), { data: { nodes: { by_acceptance: { accepted: 2, pending: 1 } }, policy: { missedRuns: Number } } });
});

t.test('nodes list --pending and pending: the certificates to choose from', async (t) => {
  const pending = await cli('nodes', 'list', '--pending');
  t.same(rows(pending.out).map((r) => r.slice(0, 2)), [['ID', 'HOSTNAME'], ['pend1', 'pend1.example.com']]);
  t.equal(pending.out, (await cli('nodes', 'pending')).out);
});

t.test('credentials: add from files, list, show, delete; secrets never come back', async (t) => {
  const dir = programDir(t, { pw: 'hunter2\n' });
  const key = generateKeyPairSync('rsa', { modulusLength: 2048, privateKeyEncoding: { type: 'pkcs1', format: 'pem' }, publicKeyEncoding: { type: 'spki', format: 'pem' } }).privateKey;
  const { writeFile } = await import('node:fs/promises');
  await writeFile(join(dir, 'id_rsa'), key);
  const added = await cli('credentials', 'add', '--id', 'deploy', '--user', 'deploy', '--port', '2222', '--key-file', join(dir, 'id_rsa'),
    '--password-file', join(dir, 'pw'), '-s', 'tag:env=prod', '--selector', 'group:web');
  t.equal(added.code, 0, added.err);
  t.match(added.out, /^fingerprint\s+SHA256:/m);
  t.match(added.out, /^has_password\s+true$/m);
  t.notMatch(added.out, /PRIVATE|hunter2/);
  const listed = await cli('credentials', 'list');
  t.match(rows(listed.out), [['ID', 'USER', 'PORT', 'SELECTORS', 'FINGERPRINT', 'HAS_PASSWORD', 'CREATED_AT'], ['deploy', 'deploy', '2222', 'tag:env=prod group:web', /^SHA256:/, 'true']]);
  t.match(await json('credentials', 'show', 'deploy'), { data: { id: 'deploy', user: 'deploy', selectors: ['tag:env=prod', 'group:web'] } });
  t.equal((await cli('credentials', 'add', '--id', 'x', '--user', 'u', '--key-file', join(dir, 'absent'))).code, EXIT.USAGE, 'an unreadable key file');
  const bad = await cli('credentials', 'add', '--id', 'x', '--user', 'u', '--key-file', join(dir, 'pw'), '-s', '*');
  t.equal(bad.code, EXIT.REFUSED, 'not a key');
  t.match(bad.err, /^capstan: ERR_CREDENTIAL_INVALID: /);
  t.same(await cli('credentials', 'delete', 'deploy'), { code: 0, out: 'deleted credential deploy\n', err: '' });
  t.equal((await cli('credentials', 'show', 'deploy')).code, EXIT.NOT_FOUND);
  t.equal((await cli('credentials', 'delete', 'deploy')).code, EXIT.NOT_FOUND);
});

t.test('nodes host-key and clear-host-key: the pin a bootstrap made, and forgetting it', async (t) => {
  await server.store.bootstrap.pinHostKey({ node_id: 'db1', algorithm: 'ssh-ed25519', fingerprint: 'SHA256:abc', pinned_at: '2026-11-21T10:00:00.000Z', job_id: null });
  t.match((await cli('nodes', 'host-key', 'db1')).out, /^fingerprint\s+SHA256:abc$/m);
  t.same(await cli('nodes', 'clear-host-key', 'db1'), { code: 0, out: 'cleared the host key of node db1\n', err: '' });
  t.equal((await cli('nodes', 'host-key', 'db1')).code, EXIT.NOT_FOUND);
  t.equal((await cli('nodes', 'clear-host-key', 'db1')).code, EXIT.NOT_FOUND);
  t.match((await api('GET', '/api/1/audit?action=node.host_key.clear')).json.data, [
    { admin: 'admin', target: 'db1', status: 404, error: 'ERR_NOT_FOUND' },
    { admin: 'admin', target: 'db1', status: 204, before: { fingerprint: 'SHA256:abc' }, address: '127.0.0.1' },
  ], 'recorded, newest first');
});

t.test('nodes add --relay with its certificate, set-relay, identity', async (t) => {
  const dir = programDir(t, { 'relay.pem': createNodeIdentity('relay-7', { bits: 1024 }).certPem });
  const noCert = await cli('nodes', 'add', '--host', 'relay-7.lan', '--id', 'relay-7', '--relay');
  t.equal(noCert.code, EXIT.REFUSED);
  t.match(noCert.err, /ERR_CERTIFICATE/);
  t.equal((await cli('nodes', 'add', '--host', 'relay-7.lan', '--id', 'relay-7', '--relay', '--certificate', join(dir, 'nope.pem'))).code, EXIT.USAGE);
  const added = await json('nodes', 'add', '--host', 'relay-7.lan', '--id', 'relay-7', '--relay', '--certificate', join(dir, 'relay.pem'));
  t.match(added.data, { id: 'relay-7', relay: true, accepted: 'accepted' });
  const sub = await json('nodes', 'add', '--host', 'sub.lan', '--id', 'sub-1', '--policy-server', 'relay-7');
  t.match(sub.data, { id: 'sub-1', policy_server: 'relay-7' });
  t.match((await json('nodes', 'set-relay', 'relay-7', 'off')).data, { relay: false });
  t.equal((await cli('nodes', 'set-relay', 'relay-7', 'maybe')).code, EXIT.USAGE);
  t.equal((await cli('nodes', 'set-relay', 'ghost', 'on')).code, EXIT.NOT_FOUND);
  t.match((await json('nodes', 'set-relay', 'relay-7', 'on')).data, { relay: true });
  t.match((await json('nodes', 'identity', 'web1')).data, { node_id: 'web1', state: 'none', kid: null });
  t.equal((await cli('nodes', 'identity', 'ghost')).code, EXIT.NOT_FOUND);
});

t.test('changes list --from takes a duration; the server refuses what is neither', async (t) => {
  const r = await cli('changes', 'list', '--from', '1d', '--to', '0s');
  t.equal(r.code, 0, r.err);
  t.match(r.out, /^AT\s+NODE_ID\s+RULE_ID/);
  t.equal((await cli('changes', 'list', '--show', '--from', '1d')).out, '0 changes\n');
  t.equal((await cli('changes', 'list', '--from', 'last tuesday')).code, EXIT.REFUSED);
});
