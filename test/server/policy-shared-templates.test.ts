/**
 * file_from_template with a `source` in the policy shared folder (real SQLite store, through the
 * PolicyService door): the server renders the file per node as it renders an inline template,
 * the template's bytes count in the config id of the nodes using it and only theirs, an edited
 * file regenerates exactly those nodes, undefined names and unusable files are that directive's
 * error (naming the name), secrets are sealed, output is bounded, and a plan shows the change.
 */
import { createHash, generateKeyPairSync } from 'node:crypto';
import { mkdir, rm, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { silentLogger } from '@capstan/shared';
import { computeConfigId } from '@capstan/shared/policy/bundle';
import { openSealed } from '@capstan/shared/policy/secrets';
import { PolicyGenerator } from '@capstan/server/policy/generate';
import { parsePolicyObject, PolicyService } from '@capstan/server/policy/service';
import { regenerateTemplateUsers } from '@capstan/server/policy/template-watch';
import { openRegistry } from '@capstan/server/registry/open';
import type { PolicyKind, Store } from '@capstan/server/store/index';
import { inventory } from './store-suite.js';
import { programDir } from '../helpers/programs.js';
import { setAcceptance, TEST_ADMIN } from '../helpers/node-changes.js';

const AT = '2024-05-01T08:00:00Z';
const keys = Array.from({ length: 2 }, () => generateKeyPairSync('rsa', { modulusLength: 2048 }));
const pub = (i: number) => keys[i]!.publicKey.export({ type: 'spki', format: 'pem' }).toString();
const priv = (i: number) => keys[i]!.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const sha = (s: string | Buffer) => createHash('sha256').update(s).digest('hex');

async function fleet(t: Test, n: number, opts: { sharedFolder?: boolean } = {}) {
  const dir = programDir(t);
  const shared = join(dir, 'shared');
  await mkdir(join(shared, 'tpl'), { recursive: true });
  const store: Store = await openRegistry({ sqlitePath: join(dir, 'capstan.db') });
  t.teardown(() => store.close());
  for (let i = 0; i < n; i++) {
    await store.upsertFromInventory(inventory(`n${i}`, {
      hostname: `host-${i}`, certificate: pub(i % 2), policy_server: 'relay-1',
      inventory: { node_id: `n${i}`, hostname: `host-${i}`, os: { name: 'debian', version: '12' }, facts: { site: { room: `R${i}` } } },
    }));
    await setAcceptance(store, `n${i}`, 'accepted', AT);
  }
  const gen = new PolicyGenerator({ store, log: silentLogger, ...(opts.sharedFolder !== false && { sharedFolder: shared }) });
  const svc = new PolicyService({ store, generator: gen, log: silentLogger });
  const put = (kind: PolicyKind, body: Record<string, unknown>) => svc.save(kind, parsePolicyObject(kind, body), TEST_ADMIN, null);
  const file = (name: string, text: string | Buffer) => writeFile(join(shared, 'tpl', name), text);
  return { store, gen, svc, put, shared, file };
}

type Parsed = { directives: Array<{ id: string; params: Record<string, unknown> }>; properties?: Record<string, unknown>; secrets?: Record<string, never> };
const bundleOf = async (store: Store, id: string) => {
  const b = await store.getPolicyBundle(id);
  return b ? { ...b, parsed: JSON.parse(b.bundle) as Parsed } : null;
};
/** The test fleets' nodes (n0…n9) that have a policy problem. */
const problemNodes = async (gen: PolicyGenerator) => {
  const ids = Array.from({ length: 10 }, (_, i) => `n${i}`);
  return (await Promise.all(ids.map(async (id) => ((await gen.problemOf(id)) ? id : null)))).filter((x) => x !== null);
};
const configIds = async (store: Store, ids: string[]) => Promise.all(ids.map(async (n) => (await store.getPolicyBundle(n))?.config_id ?? null));

t.test('a shared-folder template is rendered per node into content, with the file\'s sha256, in file mode', async (t) => {
  const { store, gen, put, file } = await fleet(t, 3);
  const text = 'host={{node.hostname}} owner=${node.properties.owner} room={{facts.site.room}}\n{{#node.properties.admins}}- {{.}}\n{{/node.properties.admins}}tag={{node.properties.tag}} raw={{{node.properties.tag}}}\n';
  await file('app.conf.mustache', text);
  await put('property', { id: 'owner', value: 'ops' });
  await put('property', { id: 'admins', value: ['ann', 'bo'] });
  await put('property', { id: 'tag', value: '<b>' });
  await store.setProperties('n1', { owner: 'alice' });
  await put('group', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] });
  await put('directive', { id: 'app', name: 'app', method: 'file_from_template', params: { path: '/etc/app.conf', source: 'tpl/app.conf.mustache', mode: '0640' } });
  await put('rule', { id: 'r', name: 'r', directives: ['app'], groups: ['all'] });

  t.same(await problemNodes(gen), [], 'no node has a problem');
  const b0 = (await bundleOf(store, 'n0'))!;
  t.same(b0.parsed.directives[0]!.params, {
    path: '/etc/app.conf', source: 'tpl/app.conf.mustache', mode: '0640', source_sha256: sha(text),
    content: 'host=host-0 owner=ops room=R0\n- ann\n- bo\ntag=&lt;b&gt; raw=<b>\n',
  }, 'rendered with the node\'s data, HTML-escaped as an inline file template is, the source kept');
  t.equal((await bundleOf(store, 'n1'))!.parsed.directives[0]!.params.content, 'host=host-1 owner=alice room=R1\n- ann\n- bo\ntag=&lt;b&gt; raw=<b>\n');
  t.equal(b0.config_id, computeConfigId(b0.parsed.directives as never, { properties: b0.parsed.properties! }), 'the config id counts the rendered content');
  t.match(await gen.regenerateAll(), { nodes: 3, changed: 0 }, 'a second pass changes nothing');
  t.same(await regenerateTemplateUsers(gen, store), { sources: [], nodes: 0 }, 'an unchanged file regenerates nobody');
});

t.test('an edited template regenerates exactly the nodes whose directives name it', async (t) => {
  const { store, gen, put, file } = await fleet(t, 4);
  await file('a.mustache', 'a on {{node.hostname}}\n');
  await file('b.mustache', 'b on {{node.hostname}}\n');
  await put('group', { id: 'ga', name: 'ga', nodes: ['n0', 'n1'] });
  await put('group', { id: 'gb', name: 'gb', nodes: ['n2', 'n3'] });
  await put('directive', { id: 'da', name: 'da', method: 'file_from_template', params: { path: '/etc/a', source: 'tpl/a.mustache' } });
  await put('directive', { id: 'db', name: 'db', method: 'file_from_template', params: { path: '/etc/b', source: 'tpl/b.mustache' } });
  await put('rule', { id: 'ra', name: 'ra', directives: ['da'], groups: ['ga'] });
  await put('rule', { id: 'rb', name: 'rb', directives: ['db'], groups: ['gb'] });
  const all = ['n0', 'n1', 'n2', 'n3'];
  const before = await configIds(store, all);
  const stamps = await Promise.all(all.map(async (n) => (await store.getPolicyBundle(n))!.generated_at));

  await file('a.mustache', 'a v2 on {{node.hostname}}\n');
  t.same(await regenerateTemplateUsers(gen, store), { sources: ['tpl/a.mustache'], nodes: 2 }, 'the members of the groups using it');
  const after = await configIds(store, all);
  t.not(after[0], before[0]);
  t.not(after[1], before[1]);
  t.same(after.slice(2), before.slice(2), 'the other template\'s nodes keep their config ids');
  t.same((await Promise.all(['n2', 'n3'].map(async (n) => (await store.getPolicyBundle(n))!.generated_at))), stamps.slice(2), 'and their bundles untouched');
  t.equal((await bundleOf(store, 'n1'))!.parsed.directives[0]!.params.content, 'a v2 on host-1\n');
  t.equal((await bundleOf(store, 'n1'))!.parsed.directives[0]!.params.source_sha256, sha('a v2 on {{node.hostname}}\n'));
  t.same(await regenerateTemplateUsers(gen, store), { sources: [], nodes: 0 }, 'seen once');

  // Without the check, the periodic pass finds the edit too, and changes only the users' bundles.
  await file('b.mustache', 'b v2 on {{node.hostname}}\n');
  t.match(await gen.regenerateAll(), { nodes: 4, changed: 2 });
  t.same((await configIds(store, all)).slice(0, 2), after.slice(0, 2));
  t.equal((await bundleOf(store, 'n3'))!.parsed.directives[0]!.params.content, 'b v2 on host-3\n');
  t.same(await regenerateTemplateUsers(gen, store), { sources: [], nodes: 0 }, 'the regeneration saw the new file already');

  // The same rendered bytes: a node's config id does not move on a rewrite that changes nothing.
  const same = await configIds(store, all);
  await file('b.mustache', 'b v2 on {{node.hostname}}\n');
  await regenerateTemplateUsers(gen, store);
  t.same(await configIds(store, all), same, 'an identical rewrite changes no config id');
});

t.test('an undefined name, a missing, oversized or non-UTF-8 file is that directive\'s error; the node keeps its bundle', async (t) => {
  const { store, gen, put, file, shared } = await fleet(t, 2);
  await file('x.mustache', 'x={{node.properties.x}}\n');
  await put('property', { id: 'x', value: 1 });
  await put('group', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] });
  await put('directive', { id: 'd', name: 'd', method: 'file_from_template', params: { path: '/etc/x', source: 'tpl/x.mustache' } });
  await put('rule', { id: 'r', name: 'r', directives: ['d'], groups: ['all'] });
  const kept = await configIds(store, ['n0', 'n1']);
  t.equal((await bundleOf(store, 'n0'))!.parsed.directives[0]!.params.content, 'x=1\n');

  await file('x.mustache', 'x={{node.properties.x}}\ny={{node.properties.nope}}\n');
  t.same(await regenerateTemplateUsers(gen, store), { sources: ['tpl/x.mustache'], nodes: 2 });
  t.same(await configIds(store, ['n0', 'n1']), kept, 'previous bundles kept');
  t.match(await gen.problemOf('n0'), {
    code: 'ERR_TEMPLATE', directive_id: 'd', rule_id: 'r', field: 'source', name: 'node.properties.nope',
    message: /^directive d \(rule r\): shared-folder template tpl\/x\.mustache: template \(line 2\): node\.properties\.nope is not defined$/,
  });

  await rm(join(shared, 'tpl', 'x.mustache'));
  await regenerateTemplateUsers(gen, store);
  t.match(await gen.problemOf('n1'), { code: 'ERR_NOT_FOUND', field: 'source', message: /shared-folder template tpl\/x\.mustache is not a file in the shared folder/ });

  await file('x.mustache', Buffer.alloc(256 * 1024 + 1, 0x61));
  await regenerateTemplateUsers(gen, store);
  t.match(await gen.problemOf('n0'), { code: 'ERR_TEMPLATE_LIMIT', message: /larger than 262144 bytes/ });

  await file('x.mustache', Buffer.from([0x78, 0xff, 0xfe, 0x0a]));
  await regenerateTemplateUsers(gen, store);
  t.match(await gen.problemOf('n0'), { code: 'ERR_TEMPLATE', message: /is not UTF-8 text/ });

  // A link out of the shared folder is not followed.
  await rm(join(shared, 'tpl', 'x.mustache'));
  await writeFile(join(shared, '..', 'outside'), 'secret-outside\n');
  await symlink(join(shared, '..', 'outside'), join(shared, 'tpl', 'x.mustache'));
  await regenerateTemplateUsers(gen, store);
  t.match(await gen.problemOf('n0'), { code: 'ERR_BAD_PATH', message: /leaves the shared folder/ });
  t.same(await configIds(store, ['n0', 'n1']), kept);

  await rm(join(shared, 'tpl', 'x.mustache'));
  await file('x.mustache', 'x={{node.properties.x}} again\n');
  await regenerateTemplateUsers(gen, store);
  t.same(await problemNodes(gen), [], 'fixed: the problems are cleared');
  t.equal((await bundleOf(store, 'n1'))!.parsed.directives[0]!.params.content, 'x=1 again\n');
});

t.test('rendering is bounded like an inline template\'s: output past 1 MiB is an error', async (t) => {
  const { gen, put, file } = await fleet(t, 1);
  // 2,000 items × 600 bytes: 1.2 MB of output from a template of a few bytes.
  await put('property', { id: 'items', value: Array.from({ length: 2000 }, (_, i) => i) });
  await file('big.mustache', `{{#node.properties.items}}${'z'.repeat(600)}{{/node.properties.items}}`);
  await put('group', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] });
  await put('directive', { id: 'big', name: 'big', method: 'file_from_template', params: { path: '/etc/big', source: 'tpl/big.mustache' } });
  await put('rule', { id: 'r', name: 'r', directives: ['big'], groups: ['all'] });
  t.match(await gen.problemOf('n0'), { code: 'ERR_TEMPLATE_LIMIT', directive_id: 'big', field: 'source', message: /shared-folder template tpl\/big\.mustache: .*output larger than 1048576 bytes/ });
});

t.test('a secret in a shared-folder template is sealed to the node\'s key', async (t) => {
  const { store, put, file } = await fleet(t, 2);
  await put('property', { id: 'db_pw', value: 'pw-in-shared-template', secret: true });
  await file('db.mustache', 'user=app\npassword={{node.properties.db_pw}}\nraw={{{node.properties.db_pw}}}\n');
  await put('group', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] });
  await put('directive', { id: 'db', name: 'db', method: 'file_from_template', params: { path: '/etc/db.conf', source: 'tpl/db.mustache', show_diff: false } });
  await put('rule', { id: 'r', name: 'r', directives: ['db'], groups: ['all'] });
  for (const i of [0, 1]) {
    const b = (await bundleOf(store, `n${i}`))!;
    t.notOk(b.bundle.includes('pw-in-shared-template'), 'no plaintext in the stored bundle');
    t.equal(b.parsed.directives[0]!.params.content, 'user=app\npassword=\uFFF9secret:db_pw:html\uFFFB\nraw=\uFFF9secret:db_pw\uFFFB\n', 'markers, HTML-escaped by the agent where the template escapes');
    t.equal(openSealed(b.parsed.secrets!.db_pw, priv(i)), 'pw-in-shared-template');
  }
});

t.test('without a shared folder, a directive naming a source is an error saying so', async (t) => {
  const { gen, put } = await fleet(t, 1, { sharedFolder: false });
  await put('group', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] });
  await put('directive', { id: 'd', name: 'd', method: 'file_from_template', params: { path: '/etc/x', source: 'tpl/x.mustache' } });
  await put('rule', { id: 'r', name: 'r', directives: ['d'], groups: ['all'] });
  t.match(await gen.problemOf('n0'), { code: 'ERR_NOT_FOUND', field: 'source', message: /no shared folder is configured \(\[policy\] shared_folder\)/ });
});

t.test('a plan shows the rendered change per node of a directive moving to another template', async (t) => {
  const { store, svc, put, file } = await fleet(t, 3);
  await file('v1.mustache', 'v1 {{node.hostname}}\n');
  await file('v2.mustache', 'v2 {{node.hostname}}\n');
  await put('group', { id: 'some', name: 'some', nodes: ['n0', 'n1'] });
  await put('directive', { id: 'd', name: 'd', method: 'file_from_template', params: { path: '/etc/v', source: 'tpl/v1.mustache' } });
  await put('rule', { id: 'r', name: 'r', directives: ['d'], groups: ['some'] });
  const before = await configIds(store, ['n0', 'n1', 'n2']);
  const plan = await svc.plan({ directives: [{ id: 'd', name: 'd', method: 'file_from_template', params: { path: '/etc/v', source: 'tpl/v2.mustache' } }] }, 100);
  t.same(plan.nodes.map((n) => n.node_id), ['n0', 'n1'], 'the directive\'s nodes only');
  t.same(plan.nodes[0]!.values?.map((v) => v.field).sort(), ['content', 'source', 'source_sha256']);
  const broken = await svc.plan({ directives: [{ id: 'd', name: 'd', method: 'file_from_template', params: { path: '/etc/v', source: 'tpl/none.mustache' } }] }, 100);
  t.match(broken.nodes[0], { problem: { code: 'ERR_NOT_FOUND', message: /tpl\/none\.mustache is not a file/ } }, 'a missing template shows before apply');
  t.same(await configIds(store, ['n0', 'n1', 'n2']), before, 'a plan writes nothing');
});

t.test('a technique\'s file_from_template call renders its shared-folder source with the call\'s data', async (t) => {
  const { store, gen, put, file } = await fleet(t, 3);
  await file('vhost.mustache', 'server {{item}} port {{params.port}} on {{node.hostname}}\n');
  await put('technique', {
    id: 'vhosts', name: 'vhosts', version: '1.0',
    parameters: [{ name: 'sites', type: 'list', required: true }, { name: 'port', type: 'string', default: '80' }],
    calls: [{ id: 'vhost', name: 'vhost {{item}}', method: 'file_from_template', foreach: 'sites', params: { path: '/etc/vhosts/{{item}}.conf', source: 'tpl/vhost.mustache' } }],
  });
  await put('group', { id: 'web', name: 'web', nodes: ['n0', 'n1'] });
  await put('directive', { id: 'v', name: 'v', method: 'technique', technique: { id: 'vhosts', version: '1.0' }, params: { sites: ['a', 'b'], port: '8080' } });
  await put('rule', { id: 'r', name: 'r', directives: ['v'], groups: ['web'] });
  t.same(await problemNodes(gen), []);
  const calls = (await bundleOf(store, 'n1'))!.parsed.directives[0]! as unknown as { calls: Array<{ id: string; params: Record<string, unknown> }> };
  t.same(calls.calls.map((c) => [c.id, c.params.path, c.params.content, c.params.source_sha256]), [
    ['vhost.0', '/etc/vhosts/a.conf', 'server a port 8080 on host-1\n', sha('server {{item}} port {{params.port}} on {{node.hostname}}\n')],
    ['vhost.1', '/etc/vhosts/b.conf', 'server b port 8080 on host-1\n', sha('server {{item}} port {{params.port}} on {{node.hostname}}\n')],
  ], 'each item rendered with its own data');

  await file('vhost.mustache', 'server {{item}} port {{params.port}} on {{node.hostname}} ({{params.nope}})\n');
  t.same(await regenerateTemplateUsers(gen, store), { sources: ['tpl/vhost.mustache'], nodes: 2 }, 'the technique\'s users only');
  t.match(await gen.problemOf('n0'), { code: 'ERR_TEMPLATE', directive_id: 'v', name: 'params.nope',
    message: /technique vhosts, call vhost\.0: shared-folder template tpl\/vhost\.mustache: template \(line 1\): params\.nope is not defined/ });
  t.equal(await store.getPolicyBundle('n2'), null, 'a node of no rule has no bundle, before and after');
});
