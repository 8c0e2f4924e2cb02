/**
 * Policies through the server's HTTP app (buildApp + inject, real SQLite store): model CRUD with
 * its coded errors, generation into per-node bundles (static and dynamic groups, incremental),
 * expectations for compliance, and the signed, ETag'd GET /policies/<node-id>/rules.
 */
import { join } from 'node:path';
import { stat } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import t, { type Test } from 'tap';
import { adminApp, ADMIN_TOKEN as TOKEN } from '../helpers/admin-app.js';
import { capstanError, silentLogger, systemExpectations, verifyBundle, policyKeyId } from '@capstan/shared';
import { Spool } from '@capstan/toolkit';
import { buildApp } from '@capstan/server/api/app';
import { loadServerConfig } from '@capstan/server/config';
import { openRegistry } from '@capstan/server/registry/open';
import { PolicyGenerator } from '@capstan/server/policy/generate';
import { ensurePolicyKey } from '@capstan/server/policy/key';
import { inventory } from './store-suite.js';
import { programDir } from '../helpers/programs.js';
import { updateNode } from '../helpers/node-changes.js';
import { composeDomain } from '@capstan/server/domain';


async function setup(t: Test) {
  const { dir, api, store, key, generator } = await adminApp(t);
  return { dir, api, store, key, generator };
}

const motd = (content: string) => ({ id: 'motd', name: 'Message of the day', method: 'file_content', params: { path: '/etc/motd', content } });

t.test('the policy key is made once, kept 0600, and published', async (t) => {
  const { dir, api, key } = await setup(t);
  t.equal((await stat(join(dir, 'policy-key.pem'))).mode & 0o777, 0o600);
  t.equal((await ensurePolicyKey(dir)).keyId, key.keyId, 'a restart keeps the key');
  const r = await api('GET', '/api/1/keys/policy', undefined, { authorization: '' });
  t.equal(r.status, 200);
  t.equal(r.json.data.key_id, key.keyId);
  t.equal(policyKeyId(r.json.data.public_key), key.keyId);
});

t.test('admin CRUD refuses bad input with coded errors naming the field', async (t) => {
  const { api, store } = await setup(t);
  const e = async (p: Promise<{ status: number; json: { error: { code: string; message: string } } }>) => {
    const r = await p;
    return [r.status, r.json.error.code, r.json.error.message] as const;
  };
  const [s1, c1, m1] = await e(api('POST', '/api/1/directives', { id: 'd', method: 'file_content', params: { path: 'relative', content: '' } }));
  t.same([s1, c1], [400, 'ERR_METHOD_PARAMS']);
  t.match(m1, /path/);
  t.same((await e(api('POST', '/api/1/directives', { id: 'd', method: 'no_such', params: {} }))).slice(0, 2), [400, 'ERR_METHOD_PARAMS']);
  t.same((await e(api('POST', '/api/1/directives', { ...motd('x'), condition: "fact('os.name' ==" }))).slice(0, 2), [400, 'ERR_CONDITION_SYNTAX']);
  t.same((await e(api('POST', '/api/1/directives', { ...motd('x'), id: 'a@@b' }))).slice(0, 2), [400, 'ERR_BAD_REQUEST']);
  t.same((await e(api('POST', '/api/1/directives', { ...motd('x'), extra: 1 }))).slice(0, 2), [400, 'ERR_BAD_REQUEST']);
  t.same((await e(api('POST', '/api/1/groups', { id: 'g', name: 'G' }))).slice(0, 2), [400, 'ERR_BAD_REQUEST'], 'neither nodes nor filter');
  t.same((await e(api('POST', '/api/1/groups', { id: 'g', filter: [{ key: 'colour', values: ['x'] }] }))).slice(0, 2), [400, 'ERR_BAD_REQUEST']);
  t.same((await e(api('POST', '/api/1/groups', { id: 'g', filter: [{ key: 'region', values: ['a'] }, { key: 'region', values: ['b'], exclude: true }] }))).slice(0, 2), [400, 'ERR_FILTER_CONFLICT']);
  t.same((await e(api('POST', '/api/1/rules', { id: 'r', directives: ['nope'], groups: [] }))).slice(0, 2), [400, 'ERR_BAD_REQUEST'], 'unknown directive');
  t.same((await e(api('GET', '/api/1/rules/r'))).slice(0, 2), [404, 'ERR_NOT_FOUND']);
  t.equal((await api('GET', '/api/1/directives', undefined, { authorization: 'Bearer wrong' })).status, 401);

  t.equal((await api('POST', '/api/1/directives', motd('a\n'))).status, 201);
  t.same((await e(api('POST', '/api/1/directives', motd('a\n')))).slice(0, 2), [409, 'ERR_CONFLICT']);
  t.same((await e(api('PUT', '/api/1/directives/other', motd('a\n')))).slice(0, 2), [400, 'ERR_BAD_REQUEST'], 'path and body ids differ');
  const put = await api('PUT', '/api/1/directives/motd', { ...motd('b\n'), mode: 'audit' });
  t.equal(put.status, 200);
  t.equal(put.json.data.mode, 'audit');
  t.equal((await api('POST', '/api/1/groups', { id: 'g', nodes: ['n1'] })).status, 400, 'a static group names known nodes only');
  await store.createNode({ id: 'n1', hostname: 'web-1' });
  t.equal((await api('POST', '/api/1/groups', { id: 'g', nodes: ['n1'] })).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'r', name: 'R', directives: ['motd'], groups: ['g'] })).status, 201);
  t.same((await e(api('DELETE', '/api/1/directives/motd'))).slice(0, 2), [409, 'ERR_CONFLICT'], 'still used by a rule');
  t.equal((await api('GET', '/api/1/rules')).json.total, 1);
  t.equal((await api('DELETE', '/api/1/rules/r')).status, 204);
  t.equal((await api('DELETE', '/api/1/directives/motd')).status, 204);
  t.same((await e(api('DELETE', '/api/1/directives/motd'))).slice(0, 2), [404, 'ERR_NOT_FOUND']);
});

/** For every method: good parameters, then one bad change each and the field the answer must name. */
const METHOD_CASES: Record<string, { good: Record<string, unknown>; bad: Array<[Record<string, unknown>, string]> }> = {
  file_content: {
    good: { path: '/etc/motd', content: 'x', mode: '0644', show_diff: false },
    bad: [[{ path: 'etc/motd' }, 'params.path'], [{ content: 1 }, 'params.content'], [{ mode: '999' }, 'params.mode'], [{ show_diff: 'no' }, 'params.show_diff']],
  },
  file_line_present: { good: { path: '/etc/hosts', line: '1.2.3.4 a' }, bad: [[{ line: 'a\nb' }, 'params.line'], [{ path: '' }, 'params.path']] },
  file_absent: { good: { path: '/tmp/x', show_diff: true }, bad: [[{ path: 'x\u0000y' }, 'params.path'], [{ show_diff: 1 }, 'params.show_diff']] },
  file_permissions: { good: { path: '/etc/x', mode: '0600' }, bad: [[{ mode: undefined }, 'params.mode'], [{ owner: -1 }, 'params.owner'], [{ group: 'root' }, 'params.group']] },
  directory_present: { good: { path: '/srv/x' }, bad: [[{ path: 'srv' }, 'params.path'], [{ mode: 755 }, 'params.mode']] },
  file_from_shared_folder: {
    good: { source: 'a/b.conf', path: '/etc/b.conf', sha256: 'a'.repeat(64) },
    bad: [[{ source: '../b' }, 'params.source'], [{ sha256: 'A'.repeat(64) }, 'params.sha256'], [{ path: 'b.conf' }, 'params.path']],
  },
  archive_from_shared_folder: {
    good: { source: 'b/web.tar.gz', sha256: 'a'.repeat(64), sums_sha256: 'b'.repeat(64), target: '/opt/b' },
    bad: [[{ source: 'b/web.zip' }, 'params.source'], [{ sums_sha256: 'x' }, 'params.sums_sha256'], [{ target: '/opt/../etc' }, 'params.target'], [{ name: '..' }, 'params.name'], [{ purge: 'yes' }, 'params.purge']],
  },
  package_present: { good: { name: 'nginx', version: '1.2-3' }, bad: [[{ name: '-rf' }, 'params.name'], [{ version: 'a b' }, 'params.version']] },
  package_absent: { good: { name: 'telnet' }, bad: [[{ name: '' }, 'params.name']] },
  service_running: { good: { name: 'ssh.service' }, bad: [[{ name: 'a b' }, 'params.name']] },
  service_enabled: { good: { name: 'ssh' }, bad: [[{ name: 5 }, 'params.name']] },
  command_check: { good: { command: 'test', args: ['-f', '/x'] }, bad: [[{ args: [1] }, 'params.args'], [{ expect_exit: 300 }, 'params.expect_exit'], [{ command: '' }, 'params.command']] },
  command_run: {
    good: { command: 'touch', args: ['/x'], creates: '/x' },
    bad: [[{ creates: undefined }, 'params.creates'], [{ creates: undefined, unless: { command: '' } }, 'params.unless.command'], [{ unless: 'x' }, 'params.unless']],
  },
  sysctl_value: { good: { key: 'net.ipv4.ip_forward', value: 1 }, bad: [[{ key: 'forward' }, 'params.key'], [{ value: true }, 'params.value']] },
  // The file-writing methods (every field of theirs: test/shared/policy-file-methods.test.ts).
  file_from_template: { good: { path: '/etc/app.conf', template: 'x={{x}}\n', owner: 'app' }, bad: [[{ template: undefined }, 'params.template'], [{ validate: ['check'] }, 'params.validate']] },
  file_block_present: { good: { path: '/etc/hosts', name: 'cluster', block: '10.0.0.1 db' }, bad: [[{ insert_after: '(' }, 'params.insert_after']] },
  file_key_value: { good: { path: '/etc/ssh/sshd_config', values: { PermitRootLogin: 'no' } }, bad: [[{ values: { 'a b': 1 } }, 'params.values.a b']] },
  ini_value: { good: { path: '/etc/x.ini', section: 's', key: 'k', value: 'v' }, bad: [[{ key: 'a=b' }, 'params.key']] },
  file_replace: { good: { path: '/etc/x', pattern: '^a$', replacement: 'b' }, bad: [[{ pattern: 'a*' }, 'params.pattern']] },
  symlink_present: { good: { path: '/etc/x', target: '/etc/y' }, bad: [[{ force: 1 }, 'params.force']] },
  symlink_absent: { good: { path: '/etc/x' }, bad: [[{ path: 'x' }, 'params.path']] },
  cron_entry: { good: { name: 'backup', schedule: '@daily', user: 'root', command: '/usr/local/bin/backup' }, bad: [[{ schedule: '* *' }, 'params.schedule']] },
  ssh_authorized_key: { good: { user: 'deploy', key: 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHcVNLFBvL/ljhXuvEz2PodKMZFUDw+Ej2tC10OzNKKJ' }, bad: [[{ key: 'ssh-ed25519 AAAA' }, 'params.key']] },
  sudoers_file: { good: { name: 'deploy', content: 'deploy ALL=(root) NOPASSWD: /usr/bin/true\n' }, bad: [[{ name: 'a.b' }, 'params.name']] },
  systemd_unit_file: { good: { unit: 'app.service', content: '[Service]\n' }, bad: [[{ unit: 'app' }, 'params.unit']] },
  timezone: { good: { name: 'Europe/Paris' }, bad: [[{ name: '../x' }, 'params.name']] },
  apt_repository: { good: { name: 'x', uris: 'https://x.example/debian', suites: 'stable', components: 'main', signed_by: '/etc/apt/keyrings/x.asc' }, bad: [[{ signed_by: 'x.asc' }, 'params.signed_by']] },
  yum_repository: { good: { name: 'x', baseurl: 'https://x.example/el9' }, bad: [[{ priority: 0 }, 'params.priority']] },
  service_stopped: { good: { name: 'telnetd' }, bad: [[{ name: 'a;b' }, 'params.name']] },
  service_disabled: { good: { name: 'telnetd.socket' }, bad: [[{ name: '' }, 'params.name']] },
  service_restarted: { good: { name: 'nginx' }, bad: [[{ name: ['nginx'] }, 'params.name']] },
  service_reloaded: { good: { name: 'nginx' }, bad: [[{ name: 'a b' }, 'params.name']] },
  user_present: {
    good: { name: 'app', uid: 1500, group: 'app', groups: ['docker'], shell: '/bin/bash', home: '/srv/app', manage_home: true, password_hash: '$y$j9T$salt$hash', locked: false },
    bad: [[{ name: '-o' }, 'params.name'], [{ gid: 1500 }, 'params.group'], [{ groups: ['a:b'] }, 'params.groups[0]'], [{ password_hash: 'secret' }, 'params.password_hash'], [{ shell: 'bash' }, 'params.shell']],
  },
  user_absent: { good: { name: 'app', remove_home: true }, bad: [[{ remove_home: 'yes' }, 'params.remove_home']] },
  group_present: { good: { name: 'ops', gid: 2000, members: ['alice'], members_exclusive: true }, bad: [[{ gid: -1 }, 'params.gid'], [{ members: 'alice' }, 'params.members']] },
  group_absent: { good: { name: 'ops' }, bad: [[{ name: '1ops' }, 'params.name']] },
  kernel_module_loaded: { good: { name: 'br_netfilter', persist: true }, bad: [[{ name: 'a/b' }, 'params.name'], [{ persist: 1 }, 'params.persist']] },
  mount_present: {
    good: { path: '/srv/data', device: 'UUID=3f0c', fstype: 'xfs', options: ['noatime'], pass: 2 },
    bad: [[{ path: '/' }, 'params.path'], [{ fstype: 'X' }, 'params.fstype'], [{ options: ['a b'] }, 'params.options[0]'], [{ pass: 3 }, 'params.pass']],
  },
  mount_absent: { good: { path: '/srv/data' }, bad: [[{ path: 'srv' }, 'params.path']] },
  hostname: { good: { name: 'web-01.example.org' }, bad: [[{ name: 'Web_01' }, 'params.name']] },
};

t.test('every method: good parameters are saved, each bad one is a 400 naming its field', async (t) => {
  const { api } = await setup(t);
  const { METHOD_SPECS } = await import('@capstan/shared');
  t.same(Object.keys(METHOD_CASES).sort(), [...METHOD_SPECS.keys()].sort(), 'a case for every method');
  for (const [method, c] of Object.entries(METHOD_CASES)) {
    t.equal((await api('POST', '/api/1/directives', { id: `ok-${method}`, method, params: c.good })).status, 201, `${method}: good`);
    for (const [change, field] of c.bad) {
      const r = await api('POST', '/api/1/directives', { id: `bad-${method}`, method, params: { ...c.good, ...change } });
      t.same([r.status, r.json.error.code, r.json.error.field], [400, 'ERR_METHOD_PARAMS', field], `${method}: ${JSON.stringify(change)}`);
    }
  }
  const field = async (body: unknown, method = 'POST', url = '/api/1/directives') => {
    const r = await api(method, url, body);
    return [r.status, r.json.error.code, r.json.error.field];
  };
  t.same(await field({ id: 'x', method: 'no_such', params: {} }), [400, 'ERR_METHOD_PARAMS', 'method']);
  t.same(await field({ id: 'x', method: 'file_absent', params: ['/x'] }), [400, 'ERR_METHOD_PARAMS', 'params']);
  t.same(await field({ id: 'x', method: 'file_absent', params: { path: '/x' }, condition: "has_file('/x' &&" }), [400, 'ERR_CONDITION_SYNTAX', 'condition']);
  t.same(await field({ id: 'x', method: 'file_absent', params: { path: '/x' }, mode: 'sometimes' }), [400, 'ERR_BAD_REQUEST', 'mode']);
  t.same(await field({ id: 'x', method: 'file_absent', params: { path: '/x' }, colour: 'red' }), [400, 'ERR_BAD_REQUEST', 'colour']);
  t.same(await field({ id: 'g', filter: [{ key: 'colour', values: ['x'] }] }, 'POST', '/api/1/groups'), [400, 'ERR_BAD_REQUEST', 'filter[0].key']);
  t.same(await field({ id: 'g', filter: [{ key: 'region', values: ['a'] }, { key: 'region', values: ['b'], exclude: true }] }, 'POST', '/api/1/groups'), [400, 'ERR_FILTER_CONFLICT', 'filter']);
  t.same(await field({ id: 'r', directives: ['ok-file_absent', 'ghost'] }, 'POST', '/api/1/rules'), [400, 'ERR_BAD_REQUEST', 'directives']);
  t.same(await field({ id: 'r', groups: 'all' }, 'PUT', '/api/1/rules/r'), [400, 'ERR_BAD_REQUEST', 'groups']);
  t.equal((await api('GET', '/api/1/directives/bad-file_content')).status, 404, 'nothing refused was saved');
});

t.test('a rule change reaches its nodes signed, with a config id that follows content only', async (t) => {
  const { api, store, key } = await setup(t);
  await store.createNode({ id: 'n1', hostname: 'web-1', tags: { env: 'prod' } });
  await store.createNode({ id: 'n2', hostname: 'db-1', tags: { env: 'prod' } });
  await store.createNode({ id: 'n3', hostname: 'web-3', tags: { env: 'dev' } });
  await store.upsertFromInventory(inventory('p1', { hostname: 'web-pending' })); // pending: never gets a policy

  t.equal((await api('GET', '/policies/n1/rules')).status, 404, 'no rule yet');
  await api('POST', '/api/1/directives', motd('hello\n'));
  await api('POST', '/api/1/directives', { id: 'sshd', method: 'service_running', params: { name: 'ssh' }, mode: 'audit' });
  await api('POST', '/api/1/groups', { id: 'web', filter: [{ key: 'hostname', values: ['web*'] }] });
  t.equal((await api('POST', '/api/1/groups', { id: 'n2only', nodes: ['n2'] })).status, 201);
  const rule = await api('POST', '/api/1/rules', { id: 'base', directives: ['motd'], groups: ['web', 'n2only'] });
  t.same(rule.json.regenerated, { nodes: 3, changed: 3 });

  const pinned = { keyId: key.keyId, publicKeyPem: key.publicKeyPem };
  const r1 = await api('GET', '/policies/n1/rules', undefined, { authorization: '' });
  t.equal(r1.status, 200);
  const b1 = verifyBundle(r1.json, pinned, 'n1');
  t.same(b1.directives.map((d) => `${d.rule_id}/${d.id}`), ['base/motd']);
  const etag1 = `"${b1.config_id}.${key.keyId.slice(0, 8)}"`;
  t.equal(r1.headers.etag, etag1, 'the ETag is the config id and the signing key');
  t.equal(r1.json.public_key, key.publicKeyPem);
  t.equal((await api('GET', '/policies/n1/rules', undefined, { 'if-none-match': etag1 })).status, 304);
  t.equal((await api('GET', '/policies/p1/rules')).status, 404, 'pending node');
  t.equal((await api('GET', '/policies/nobody/rules')).status, 404, 'unknown node');
  t.equal(verifyBundle((await api('GET', '/policies/n3/rules')).json, pinned, 'n3').config_id, b1.config_id, 'same content, same config id');

  // Expectations follow the bundle: the node is expected to report the directive's component.
  const base = await store.getComplianceBase('n1');
  t.equal(base?.policy_config_id, b1.config_id);
  // The agent's own self-checks are expected on every node, then the policy's components.
  t.same(base?.expected, [...systemExpectations(), { rule_id: 'base', directive_id: 'motd', component: 'File content' }]);

  // A second rule for env=prod only: n1 and n2 change, n3 (dev) is not touched.
  await api('POST', '/api/1/groups', { id: 'prod', filter: [{ key: 'tag:env', values: ['prod'] }] });
  const r2 = await api('POST', '/api/1/rules', { id: 'audit', directives: ['sshd'], groups: ['prod'] });
  t.same(r2.json.regenerated, { nodes: 2, changed: 2 }, 'only the group of the new rule');
  const n3Before = await store.getPolicyBundle('n3');
  // Changing the directive changes every config id that carries it.
  const changed = await api('PUT', '/api/1/directives/motd', motd('changed\n'));
  t.equal(changed.json.regenerated.changed, 3);
  const b1b = verifyBundle((await api('GET', '/policies/n1/rules')).json, pinned, 'n1');
  t.not(b1b.config_id, b1.config_id);
  t.same(b1b.directives.map((d) => `${d.rule_id}/${d.id}`), ['audit/sshd', 'base/motd']);
  t.equal((await api('GET', '/policies/n1/rules', undefined, { 'if-none-match': etag1 })).status, 200, 'old etag no longer matches');
  t.not((await store.getPolicyBundle('n3'))?.config_id, n3Before?.config_id);

  // Saving the same content again changes nothing at all.
  const same = await api('PUT', '/api/1/directives/motd', motd('changed\n'));
  t.equal(same.json.regenerated.changed, 0);

  // A node leaving the dynamic group (admin renames it… here: its tag) loses the rule, and a
  // node left with no rule gets an empty bundle rather than keeping its last one forever.
  await updateNode(store, 'n3', { tags: { env: 'dev' } }, new Date().toISOString());
  await api('PUT', '/api/1/groups/web', { id: 'web', filter: [{ key: 'hostname', values: ['nothing*'] }] });
  const empty = verifyBundle((await api('GET', '/policies/n3/rules')).json, pinned, 'n3');
  t.same(empty.directives, []);
  t.same((await store.getComplianceBase('n3'))?.expected, systemExpectations(), 'only the self-checks are left');
});

t.test('a node changing (inventory, acceptance) is regenerated alone', async (t) => {
  const { api, store, generator } = await setup(t);
  await api('POST', '/api/1/directives', motd('x\n'));
  await api('POST', '/api/1/groups', { id: 'web', filter: [{ key: 'hostname', values: ['web*'] }] });
  await api('POST', '/api/1/rules', { id: 'base', directives: ['motd'], groups: ['web'] });
  await store.upsertFromInventory(inventory('p1', { hostname: 'web-9' }));
  t.equal((await api('GET', '/policies/p1/rules')).status, 404, 'pending');
  const acc = await api('POST', '/api/1/nodes/p1/accept');
  t.equal(acc.status, 200);
  // Accepted outside the app (CLI): the first fetch generates it.
  const res = await api('GET', '/policies/p1/rules');
  t.equal(res.status, 200);
  t.match(await generator.nodeChanged('p1'), { nodes: 1, changed: 0 }, 'nothing to redo');
  await store.upsertFromInventory(inventory('p1', { hostname: 'db-9' }));
  const st = await generator.nodeChanged('p1');
  t.equal(st.changed, 1, 'inventory moved it out of the group');
  t.same(JSON.parse((await store.getPolicyBundle('p1'))!.bundle).directives, []);
});

t.test('with node tokens required, the shared folder answers only a request with a valid token of some node', async (t) => {
  const dir = programDir(t, { shared: { 'motd.txt': 'hello\n' } });
  const asked: Array<string | undefined> = [];
  // What the server wires in with identity.require_token (authorizeNodeToken); here a stand-in.
  const authorizeNode = async (req: { headers: Record<string, unknown> }, nodeId: string | undefined) => {
    asked.push(nodeId);
    if (req.headers.authorization !== 'Bearer good') throw capstanError('ERR_TOKEN_INVALID', 'a node token is required');
  };
  const { app } = await adminApp(t, { dir, policy: { sharedFolder: join(dir, 'shared'), authorizeNode } });
  const base = '/rudder/relay-api/1/shared-folder';
  for (const method of ['GET', 'HEAD'] as const) {
    for (const path of ['motd.txt', 'nope.txt', '..%2Fsecret.txt']) {
      const r = await app.inject({ method, url: `${base}/${path}` });
      t.equal(r.statusCode, 401, `${method} ${path} without a token: 401 before the path is looked at`);
    }
    t.equal((await app.inject({ method, url: `${base}/motd.txt`, headers: { authorization: 'Bearer bad' } })).statusCode, 401);
  }
  const ok = await app.inject({ method: 'GET', url: `${base}/motd.txt`, headers: { authorization: 'Bearer good' } });
  t.equal(ok.statusCode, 200);
  t.equal(ok.body, 'hello\n');
  t.equal((await app.inject({ method: 'HEAD', url: `${base}/nope.txt`, headers: { authorization: 'Bearer good' } })).statusCode, 404);
  t.ok(asked.every((n) => n === undefined), 'any node\'s token will do (no node is named)');
});

t.test('the shared folder is served by the server, with RUDDER hash semantics and no escapes', async (t) => {
  const dir = programDir(t, { shared: { 'motd.txt': 'hello\n', sub: { 'a.conf': 'x' } }, 'secret.txt': 'no' });
  const { app } = await adminApp(t, { dir, policy: { sharedFolder: join(dir, 'shared') } });
  const sha = createHash('sha256').update('hello\n').digest('hex');
  const base = '/rudder/relay-api/1/shared-folder';
  const get = await app.inject({ method: 'GET', url: `${base}/motd.txt` });
  t.equal(get.statusCode, 200);
  t.equal(get.body, 'hello\n');
  t.equal((await app.inject({ method: 'GET', url: `${base}/sub/a.conf` })).body, 'x');
  t.equal((await app.inject({ method: 'HEAD', url: `${base}/motd.txt?hash=${sha}` })).statusCode, 304);
  t.equal((await app.inject({ method: 'HEAD', url: `${base}/motd.txt?hash=${'0'.repeat(64)}` })).statusCode, 200);
  t.equal((await app.inject({ method: 'HEAD', url: `${base}/motd.txt?hash=zz` })).statusCode, 400);
  t.equal((await app.inject({ method: 'HEAD', url: `${base}/nope.txt` })).statusCode, 404);
  t.equal((await app.inject({ method: 'GET', url: `${base}/nope.txt` })).statusCode, 404);
  for (const bad of ['..%2Fsecret.txt', 'sub//a.conf', 'sub%2Fa.conf']) {
    t.equal((await app.inject({ method: 'GET', url: `${base}/${bad}` })).statusCode, 400, bad);
  }
  // Dot segments may be resolved by the HTTP layer before routing: never the file, whichever answers.
  for (const bad of ['%2E%2E/secret.txt', 'sub/%2e%2e/../secret.txt']) {
    const r = await app.inject({ method: 'GET', url: `${base}/${bad}` });
    t.ok([400, 404].includes(r.statusCode), `${bad} → ${r.statusCode}`);
    t.not(r.body, 'no');
  }
});

t.test('a group sent back with its secret property as shown ({"secret": true}) keeps the saved value', async (t) => {
  const { api, store } = await setup(t);
  const filter = [{ key: 'q', values: ['hostname = web*'] }];
  const group = { id: 'web', name: 'Web', filter, priority: 5, properties: { db_pw: { value: 's3cret', secret: true }, site: { value: { dc: 'par1' } } } };
  t.equal((await api('PUT', '/api/1/groups/web', group)).status, 201);
  const shown = (await api('GET', '/api/1/groups/web')).json.data;
  t.same(shown.properties, { db_pw: { secret: true }, site: { value: { dc: 'par1' } } }, 'the secret shown without its value');
  const { updated_at: _at, ...back } = shown;
  const edited = await api('PUT', '/api/1/groups/web', { ...back, properties: { ...back.properties, site: { value: { dc: 'par2' } } } });
  t.equal(edited.status, 200, JSON.stringify(edited.json));
  t.same(edited.json.data.properties.db_pw, { secret: true });
  t.same((await store.getPolicyObject('group', 'web'))!.body.properties, { db_pw: { value: 's3cret', secret: true }, site: { value: { dc: 'par2' } } }, 'the value kept, the rest saved');
  const replaced = await api('PUT', '/api/1/groups/web', { ...back, properties: { db_pw: { value: 'n3w', secret: true } } });
  t.equal(replaced.status, 200);
  t.same((await store.getPolicyObject('group', 'web'))!.body.properties, { db_pw: { value: 'n3w', secret: true } }, 'a new value replaces it');
  const unknown = await api('PUT', '/api/1/groups/web', { ...back, properties: { other: { secret: true } } });
  t.same([unknown.status, unknown.json.error.code, unknown.json.error.field], [400, 'ERR_PROPERTIES_INVALID', 'properties.other.value'], 'no saved secret of that name: its value is required');
  const fresh = await api('POST', '/api/1/groups', { id: 'db', filter, properties: { db_pw: { secret: true } } });
  t.same([fresh.status, fresh.json.error.field], [400, 'properties.db_pw.value'], 'a new group has nothing to keep');

  // A change request made from what the API shows carries the saved value, never shows it.
  const proposed = await api('POST', '/api/1/change-requests', { title: 'priority', groups: [{ ...back, priority: 7 }] });
  t.equal(proposed.status, 201, JSON.stringify(proposed.json));
  t.same(proposed.json.data.changes.groups[0].properties.db_pw, { secret: true });
  t.notMatch(JSON.stringify(proposed.json), /n3w/);
  const stored = await store.reviews.getChangeRequest(proposed.json.data.id);
  t.same((stored!.changes as { groups: Array<{ properties: unknown }> }).groups[0]!.properties, { db_pw: { value: 'n3w', secret: true }, site: { value: { dc: 'par1' } } }, 'the saved secret, the proposed rest');
  const badCr = await api('POST', '/api/1/change-requests', { title: 'x', groups: [{ ...back, properties: { nope: { secret: true } } }] });
  t.same([badCr.status, badCr.json.error.field], [400, 'groups[0].properties.nope.value']);
});
