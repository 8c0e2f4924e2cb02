/**
 * Node data in generation (real SQLite store, through the PolicyService door): properties at
 * three levels merged into each node's bundle, templates rendered with them and the node's facts,
 * conflicts and template errors keeping a node's previous bundle, secrets sealed to the node's
 * key and kept while unchanged, and a group property change reaching only its members.
 */
import { generateKeyPairSync } from 'node:crypto';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { silentLogger } from '@capstan/shared';
import { computeConfigId } from '@capstan/shared/policy/bundle';
import { openSealed } from '@capstan/shared/policy/secrets';
import { PolicyGenerator } from '@capstan/server/policy/generate';
import { parsePolicyObject, PolicyService } from '@capstan/server/policy/service';
import { openRegistry } from '@capstan/server/registry/open';
import type { PolicyKind, Store } from '@capstan/server/store/index';
import { inventory } from './store-suite.js';
import { programDir } from '../helpers/programs.js';
import { setAcceptance, TEST_ADMIN } from '../helpers/node-changes.js';

const AT = '2024-05-01T08:00:00Z';
const keys = Array.from({ length: 2 }, () => generateKeyPairSync('rsa', { modulusLength: 2048 }));
const pub = (i: number) => keys[i]!.publicKey.export({ type: 'spki', format: 'pem' }).toString();
const priv = (i: number) => keys[i]!.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();

async function fleet(t: Test, n: number): Promise<{ store: Store; gen: PolicyGenerator; svc: PolicyService; put: (kind: PolicyKind, body: Record<string, unknown>) => Promise<unknown> }> {
  const store = await openRegistry({ sqlitePath: join(programDir(t), 'capstan.db') });
  t.teardown(() => store.close());
  for (let i = 0; i < n; i++) {
    await store.upsertFromInventory(inventory(`n${i}`, {
      hostname: `${i < 2 ? 'web' : 'db'}-${i}`, certificate: pub(i % 2), policy_server: 'relay-1',
      inventory: { node_id: `n${i}`, hostname: `${i < 2 ? 'web' : 'db'}-${i}`, os: { name: 'debian', version: '12' }, facts: { site: { room: `R${i}` } } },
    }));
    await setAcceptance(store, `n${i}`, 'accepted', AT);
  }
  const gen = new PolicyGenerator({ store, log: silentLogger });
  const svc = new PolicyService({ store, generator: gen, log: silentLogger });
  const put = (kind: PolicyKind, body: Record<string, unknown>) => svc.save(kind, parsePolicyObject(kind, body), TEST_ADMIN, null);
  return { store, gen, svc, put };
}

const bundleOf = async (store: Store, id: string) => {
  const b = await store.getPolicyBundle(id);
  return b ? { ...b, parsed: JSON.parse(b.bundle) as { directives: Array<{ id: string; params: Record<string, unknown> }>; properties?: Record<string, unknown>; secrets?: Record<string, unknown> } } : null;
};

t.test('properties at three levels and node facts are rendered into each node\'s directives', async (t) => {
  const { store, gen, svc, put } = await fleet(t, 4);
  await put('property', { id: 'owner', value: 'ops' });
  await put('property', { id: 'dc', value: { dns: '10.0.0.1', ntp: 'pool' } });
  await put('group', { id: 'web', name: 'web', filter: [{ key: 'hostname', values: ['web-*'] }], priority: 1, properties: { dc: { value: { dns: '10.0.0.2' } } } });
  await put('group', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] });
  await store.setProperties('n0', { owner: 'alice' });
  await put('property', { id: 'tag', value: '<b>' });
  await put('directive', { id: 'motd', name: 'motd', method: 'file_content',
    params: { path: '/etc/motd', content: 'owner=${node.properties.owner} dns={{node.properties.dc.dns}} ntp={{node.properties.dc.ntp}} room={{facts.site.room}} host={{node.hostname}}\n' } });
  await put('directive', { id: 'tpl', name: 'tpl', method: 'file_from_template', params: { path: '/etc/x.conf', template: 'a={{node.properties.owner}} {{node.properties.tag}} {{{node.properties.tag}}} {{os.name}}\n' } });
  await put('rule', { id: 'r', name: 'r', directives: ['motd', 'tpl'], groups: ['all'] });

  const b0 = (await bundleOf(store, 'n0'))!.parsed;
  t.equal(b0.directives[0]!.params.content, 'owner=alice dns=10.0.0.2 ntp=pool room=R0 host=web-0\n', 'node < group < global, deep merged');
  t.same(b0.directives[1]!.params, { path: '/etc/x.conf', template: 'a={{node.properties.owner}} {{node.properties.tag}} {{{node.properties.tag}}} {{os.name}}\n', content: 'a=alice &lt;b&gt; <b> debian\n' }, 'file mode: content rendered and escaped, template kept');
  t.same(b0.properties, { owner: 'alice', tag: '<b>', dc: { dns: '10.0.0.2', ntp: 'pool' } }, 'the bundle carries the effective properties');
  t.same(await store.policyProblems(null), [], 'no node has a problem');
  const b3 = (await bundleOf(store, 'n3'))!;
  t.equal(b3.parsed.directives[0]!.params.content, 'owner=ops dns=10.0.0.1 ntp=pool room=R3 host=db-3\n');
  t.equal(b3.config_id, computeConfigId(b3.parsed.directives as never, { properties: b3.parsed.properties }), 'config id counts the properties');

  const eff = (await svc.effective('n0'))!;
  t.match(eff.origins.find((o) => o.path.join('.') === 'dc.dns'), { value: '10.0.0.2', origin: { level: 'group', id: 'web' }, overridden: [{ origin: { level: 'global' }, value: '10.0.0.1' }] });
  t.match(eff.origins.find((o) => o.path.join('.') === 'owner'), { value: 'alice', origin: { level: 'node' } });

  // One group's property: only its members are regenerated.
  const r = await gen.change('group', 'web', () => store.putPolicyObject('group', 'web', { id: 'web', name: 'web', filter: [{ key: 'hostname', values: ['web-*'] }], priority: 1, properties: { dc: { value: { dns: '10.0.0.3' } } } }, AT));
  t.match(r.stats, { nodes: 2, changed: 2 });
  t.equal((await bundleOf(store, 'n1'))!.parsed.directives[0]!.params.content, 'owner=ops dns=10.0.0.3 ntp=pool room=R1 host=web-1\n');
  t.match(await gen.regenerateAll(), { nodes: 4, changed: 0 }, 'nothing changes on a second pass');

  // A node's own property, and a new fact: that node alone.
  await store.setProperties('n3', { owner: 'bob' });
  t.match(await gen.nodeChanged('n3'), { changed: 1 });
  t.match((await bundleOf(store, 'n3'))!.parsed.directives[0]!.params.content, /^owner=bob /);
  await store.upsertFromInventory(inventory('n3', { hostname: 'db-3', certificate: pub(1), received_at: '2024-05-02T10:00:00Z',
    inventory: { node_id: 'n3', hostname: 'db-3', os: { name: 'debian', version: '12' }, facts: { site: { room: 'R99' } } } }));
  t.match(await gen.nodeChanged('n3'), { changed: 1 });
  t.match((await bundleOf(store, 'n3'))!.parsed.directives[0]!.params.content, /room=R99 /, 'a new inventory: rendered again with its facts');
  t.match(await gen.regenerateAll(), { nodes: 4, changed: 0 });

  // A node's own JSON value: an object merges into the groups' object key by key.
  await store.setProperties('n1', { owner: 'carol', dc: { ntp: 'ntp.n1' } });
  t.match(await gen.nodeChanged('n1'), { changed: 1 });
  const b1 = (await bundleOf(store, 'n1'))!.parsed;
  t.equal(b1.directives[0]!.params.content, 'owner=carol dns=10.0.0.3 ntp=ntp.n1 room=R1 host=web-1\n', 'node < group < global, the node level an object');
  t.same(b1.properties, { owner: 'carol', tag: '<b>', dc: { dns: '10.0.0.3', ntp: 'ntp.n1' } });
  const e1 = (await svc.effective('n1'))!;
  t.match(e1.origins.find((o) => o.path.join('.') === 'dc.ntp'), { value: 'ntp.n1', origin: { level: 'node' }, overridden: [{ origin: { level: 'global' }, value: 'pool' }] });
  t.match(e1.origins.find((o) => o.path.join('.') === 'dc.dns'), { value: '10.0.0.3', origin: { level: 'group', id: 'web' } });
  t.match(await gen.regenerateAll(), { nodes: 4, changed: 0 });
});

t.test('a conflict or a template error keeps the node\'s previous bundle, with the problem on the node', async (t) => {
  const { store, gen, svc, put } = await fleet(t, 3);
  await put('group', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] });
  await put('group', { id: 'a', name: 'a', nodes: ['n0'], properties: { port: { value: 80 } } });
  await put('directive', { id: 'd', name: 'd', method: 'file_content', params: { path: '/etc/port', content: 'port={{node.properties.port}}' } });
  await put('property', { id: 'port', value: 8080 });
  await put('rule', { id: 'r', name: 'r', directives: ['d'], groups: ['all'] });
  const before = (await bundleOf(store, 'n0'))!;
  t.equal(before.parsed.directives[0]!.params.content, 'port=80');

  await put('group', { id: 'b', name: 'b', nodes: ['n0'], properties: { port: { value: 81 } } });
  t.equal((await bundleOf(store, 'n0'))!.config_id, before.config_id, 'previous bundle kept');
  t.match(await gen.problemOf('n0'), { code: 'ERR_PROPERTY_CONFLICT', conflicts: [{ path: ['port'], groups: [{ id: 'a', value: 80 }, { id: 'b', value: 81 }] }] });
  t.match(await svc.effective('n0'), { conflicts: [{ path: ['port'] }], problem: { code: 'ERR_PROPERTY_CONFLICT' } });
  t.equal((await bundleOf(store, 'n1'))!.parsed.directives[0]!.params.content, 'port=8080', 'other nodes are generated');

  await put('group', { id: 'b', name: 'b', nodes: ['n0'], priority: 2, properties: { port: { value: 81 } } });
  t.equal((await bundleOf(store, 'n0'))!.parsed.directives[0]!.params.content, 'port=81', 'a higher priority settles it');
  t.equal(await gen.problemOf('n0'), null, 'the problem is cleared');

  const kept = (await bundleOf(store, 'n2'))!.config_id;
  await put('directive', { id: 'd', name: 'd', method: 'file_content', params: { path: '/etc/port', content: 'port={{node.properties.nope}}' } });
  t.equal((await bundleOf(store, 'n2'))!.config_id, kept);
  t.match(await gen.problemOf('n2'), { code: 'ERR_TEMPLATE', directive_id: 'd', rule_id: 'r', name: 'node.properties.nope', message: /node.properties.nope is not defined/ });
  // A file template's own error names its field and line (rendered once, in file mode).
  await put('directive', { id: 'd', name: 'd', method: 'file_from_template', params: { path: '/etc/port', template: 'a\nport={{node.properties.gone}}\n' } });
  t.equal((await bundleOf(store, 'n2'))!.config_id, kept);
  t.match(await gen.problemOf('n2'), {
    code: 'ERR_TEMPLATE', directive_id: 'd', field: 'template', name: 'node.properties.gone', message: /params\.template, line 2\): node\.properties\.gone is not defined/,
  });
});

t.test('a templated field a method constrains is checked per node once rendered, not as written', async (t) => {
  const { store, gen, put } = await fleet(t, 2);
  await put('property', { id: 'tz', value: 'Europe/Paris' });
  await put('group', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] });
  await put('directive', { id: 'clock', name: 'clock', method: 'timezone', params: { name: '${node.properties.tz}' } });
  await put('rule', { id: 'r', name: 'r', directives: ['clock'], groups: ['all'] });
  t.match((await bundleOf(store, 'n0'))!.parsed.directives, [{ id: 'clock', params: { name: 'Europe/Paris' } }], 'saved, and rendered per node');
  await store.setProperties('n1', { tz: 'Not a zone' });
  await put('property', { id: 'tz', value: 'UTC' });
  t.match((await bundleOf(store, 'n0'))!.parsed.directives, [{ params: { name: 'UTC' } }]);
  t.match(await gen.problemOf('n1'), { code: 'ERR_METHOD_PARAMS', directive_id: 'clock' }, 'a value the method refuses is that node\'s problem');
  await t.rejects(async () => put('directive', { id: 'bad', name: 'bad', method: 'timezone', params: { name: '{{#node.properties.tz}}' } }), { code: 'ERR_TEMPLATE', details: { field: 'params.name' } },
    'a template that does not parse is refused at save, naming its field');
  await t.rejects(async () => put('directive', { id: 'bad', name: 'bad', method: 'timezone', params: { name: 'Not a zone' } }), { code: 'ERR_METHOD_PARAMS', details: { field: 'params.name' } },
    'a plain value is checked at save as before');
});

t.test('a secret is sealed to the node key, never in the clear, and kept while unchanged', async (t) => {
  const { store, gen, svc, put } = await fleet(t, 2);
  await put('property', { id: 'db_pw', value: 's3cret-value', secret: true });
  await put('group', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] });
  await put('directive', { id: 'd', name: 'd', method: 'file_content', params: { path: '/etc/db', content: 'pw={{node.properties.db_pw}}\n' } });
  await put('rule', { id: 'r', name: 'r', directives: ['d'], groups: ['all'] });
  for (const i of [0, 1]) {
    const b = (await bundleOf(store, `n${i}`))!;
    t.notOk(b.bundle.includes('s3cret-value'), 'the stored bundle holds no plaintext');
    t.equal(b.parsed.directives[0]!.params.content, 'pw=\uFFF9secret:db_pw\uFFFB\n', 'a marker in its place');
    t.equal(openSealed(b.parsed.secrets!.db_pw, priv(i)), 's3cret-value', 'opens with the node key');
    t.same(b.parsed.properties ?? {}, {}, 'a secret is not among the bundle properties');
  }
  const sealed0 = (await bundleOf(store, 'n0'))!.parsed.secrets!.db_pw;
  t.throws(() => openSealed(sealed0, priv(1)), { code: 'ERR_SECRET' }, 'another node\'s key does not open it');
  const cfg = (await store.getPolicyBundle('n0'))!.config_id;
  t.match(await gen.regenerateAll(), { changed: 0 }, 'sealed values kept: config ids stable');
  t.equal((await store.getPolicyBundle('n0'))!.config_id, cfg);
  t.same(await svc.get('property', 'db_pw'), { id: 'db_pw', secret: true, updated_at: (await svc.get('property', 'db_pw')).updated_at }, 'the API never returns the value');
  t.match(await svc.effective('n0'), { properties: { db_pw: { secret: true } }, origins: [{ path: ['db_pw'], secret: true }] });
  t.notOk(JSON.stringify(await svc.effective('n0')).includes('s3cret'));
  await put('property', { id: 'db_pw', value: 'other', secret: true });
  t.not((await store.getPolicyBundle('n0'))!.config_id, cfg, 'a new value: a new seal and config id');
});

t.test('without templates or properties, bundles are as before (the fast path)', async (t) => {
  const { store, put } = await fleet(t, 2);
  await put('group', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] });
  await put('directive', { id: 'd', name: 'd', method: 'file_content', params: { path: '/etc/x', content: 'plain ${HOME}\n' } });
  await put('rule', { id: 'r', name: 'r', directives: ['d'], groups: ['all'] });
  const b = (await bundleOf(store, 'n0'))!;
  t.equal(b.parsed.properties, undefined);
  t.equal(b.config_id, computeConfigId(b.parsed.directives as never));
  t.equal(b.config_id, (await bundleOf(store, 'n1'))!.config_id, 'shared by the nodes of one content');
});

t.test('generation is deterministic: two servers give the same config ids', async (t) => {
  const ids: string[][] = [];
  for (let round = 0; round < 2; round++) {
    const { store, put } = await fleet(t, 3);
    await put('property', { id: 'tags', value: ['a', 'b'] });
    await put('group', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }], properties: { z: { value: { y: 1, x: [2] } } } });
    await put('directive', { id: 'd', name: 'd', method: 'file_content', params: { path: '/etc/x', content: '{{#node.properties.tags}}{{.}},{{/node.properties.tags}} {{node.id}}' } });
    await put('rule', { id: 'r', name: 'r', directives: ['d'], groups: ['all'] });
    ids.push(await Promise.all(['n0', 'n1', 'n2'].map(async (n) => (await store.getPolicyBundle(n))!.config_id)));
  }
  t.same(ids[0], ids[1]);
  t.equal(new Set(ids[0]).size, 3, 'node.id makes each node\'s own');
});

t.test('a plan shows which rendered values change, secrets by name only, and problems before apply', async (t) => {
  const { store, svc, put } = await fleet(t, 3);
  await put('property', { id: 'pw', value: 'first-secret', secret: true });
  await put('group', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] });
  await put('group', { id: 'a', name: 'a', nodes: ['n0'], properties: { port: { value: 80 } } });
  await put('property', { id: 'port', value: 8080 });
  await put('directive', { id: 'd', name: 'd', method: 'file_content', params: { path: '/etc/p', content: 'port={{node.properties.port}} pw={{node.properties.pw}}' } });
  await put('rule', { id: 'r', name: 'r', directives: ['d'], groups: ['all'] });
  const before = await Promise.all(['n0', 'n1', 'n2'].map(async (n) => (await store.getPolicyBundle(n))!.config_id));

  const plan = await svc.plan({ groups: [{ id: 'a', name: 'a', nodes: ['n0'], properties: { port: { value: 81 } } }] }, 100);
  t.same(plan.nodes.map((n) => n.node_id), ['n0'], 'only the group\'s member');
  t.match(plan.nodes[0], { changed: [{ rule_id: 'r', directive_id: 'd' }], values: [{ rule_id: 'r', directive_id: 'd', field: 'content' }], properties: ['port'] });

  const secret = await svc.plan({ properties: [{ id: 'pw', value: 'second-secret', secret: true }] }, 100);
  t.same(secret.nodes.map((n) => n.node_id), ['n0', 'n1', 'n2']);
  t.match(secret.nodes[0], { secrets: ['pw'] });
  t.notOk(JSON.stringify(secret).includes('second-secret') || JSON.stringify(secret).includes('first-secret'), 'no secret value in the plan');
  t.same(secret.changes, [{ kind: 'property', id: 'pw', action: 'update', fields: ['value'], object: { id: 'pw', secret: true } }]);

  const conflict = await svc.plan({ groups: [{ id: 'b', name: 'b', nodes: ['n1'], properties: { port: { value: 1 } } }, { id: 'c', name: 'c', nodes: ['n1'], properties: { port: { value: 2 } } }] }, 100);
  t.match(conflict.nodes, [{ node_id: 'n1', problem: { code: 'ERR_PROPERTY_CONFLICT', message: /groups b and c/ } }]);
  const broken = await svc.plan({ directives: [{ id: 'd', name: 'd', method: 'file_content', params: { path: '/etc/p', content: '{{os.nope}}' } }] }, 100);
  t.match(broken.nodes[0], { problem: { code: 'ERR_TEMPLATE', message: /os.nope is not defined/ } });
  t.same(await Promise.all(['n0', 'n1', 'n2'].map(async (n) => (await store.getPolicyBundle(n))!.config_id)), before, 'a plan writes nothing');
});

t.test('a change request carries a secret property: shown and audited without its value, deployed with it', async (t) => {
  const { store, gen } = await fleet(t, 1);
  const { ChangeRequestService } = await import('@capstan/server/policy/reviews');
  const recorded: unknown[] = [];
  const audit = { record: async (_a: unknown, r: unknown) => void recorded.push(r) } as never;
  const svc = new PolicyService({ store, generator: gen, log: silentLogger, audit });
  const put = (kind: PolicyKind, body: Record<string, unknown>) => svc.save(kind, parsePolicyObject(kind, body), TEST_ADMIN, null);
  const reviews = new ChangeRequestService({ store, policy: svc, audit });
  await put('group', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] });
  await put('directive', { id: 'd', name: 'd', method: 'file_content', params: { path: '/etc/p', content: 'pw={{node.properties.pw}}' } });
  const cr = await reviews.propose({ title: 'a secret', properties: [{ id: 'pw', value: 'cr-secret-value', secret: true }], rules: [{ id: 'r', name: 'r', directives: ['d'], groups: ['all'] }] }, TEST_ADMIN);
  t.same((cr.changes as { properties: unknown[] }).properties, [{ id: 'pw', secret: true }], 'the view has no value');
  t.notOk(JSON.stringify(cr).includes('cr-secret-value'), 'nor the impact');
  await reviews.review(cr.id, 'approved', 'ok', { ...TEST_ADMIN, name: 'bob' });
  await reviews.deploy(cr.id, { ...TEST_ADMIN, name: 'bob' });
  t.match((await bundleOf(store, 'n0'))!.parsed.secrets, { pw: { v: 1 } }, 'deployed with its value, sealed');
  t.equal(openSealed((await bundleOf(store, 'n0'))!.parsed.secrets!.pw, priv(0)), 'cr-secret-value');
  await put('property', { id: 'pw', value: 'cr-secret-value-2', secret: true });
  t.match(recorded, [{ action: 'group.create' }, { action: 'directive.create' }, { action: 'change_request.propose' }, {}, { action: 'property.create', after: { id: 'pw', secret: true } }, {}, {}, { action: 'property.update' }]);
  t.notOk(JSON.stringify(recorded).includes('cr-secret-value'), 'no audit record holds a value');
});

t.test('a technique directive is expanded per node from model.techniques; a missing one is that node\'s problem', async (t) => {
  const { NodeRendering } = await import('@capstan/server/policy/per-node');
  const { contentOf } = await import('@capstan/server/policy/content');
  const { SealCache, RenderError } = await import('@capstan/server/policy/render');
  const { parseTechnique } = await import('@capstan/shared/policy/technique');
  const technique = parseTechnique({ id: 'motd', name: 'motd', version: '1.0', parameters: [{ name: 'who', type: 'string', required: true }],
    calls: [{ id: 'write', name: 'Motd', method: 'file_content', params: { path: '/etc/motd', content: 'hello {{params.who}} on {{node.hostname}}\n' } }] });
  const directive = { id: 'm', name: 'm', method: 'technique', mode: 'enforce' as const, params: { who: '${node.properties.owner}' }, technique: { id: 'motd', version: '1.0' } };
  const model = {
    directives: new Map([['m', directive]]), groups: new Map([['g', { id: 'g', name: 'g', nodes: ['n1'] }]]),
    rules: new Map([['r', { id: 'r', name: 'r', directives: ['m'], groups: ['g'] }]]),
    properties: new Map([['owner', { id: 'owner', value: 'ops' }]]), techniques: new Map([['motd', technique]]),
  };
  const input = { hostname: 'web-1', relay: 'root', certificate: null, properties: {} };
  const content = contentOf(model as never, [...model.rules.values()], new Set(['g']));
  const out = new NodeRendering(model as never, new SealCache()).render('n1', new Set(['g']), content, input);
  t.match(JSON.parse(`{"directives":${(out as { tail: string }).tail}}`), { directives: [{ id: 'm', method: 'technique', technique: { id: 'motd', version: '1.0' }, params: { who: 'ops' },
    calls: [{ id: 'write', component: 'Motd', method: 'file_content', params: { path: '/etc/motd', content: 'hello ops on web-1\n' } }] }], properties: { owner: 'ops' } });
  const other = { ...model, techniques: new Map([['motd', { ...technique, version: '2.0' }]]) };
  let thrown: unknown;
  try {
    new NodeRendering(other as never, new SealCache()).render('n1', new Set(['g']), contentOf(other as never, [...model.rules.values()], new Set(['g'])), input);
  } catch (err) {
    thrown = err;
  }
  t.ok(thrown instanceof RenderError, 'a RenderError');
  t.match((thrown as InstanceType<typeof RenderError>).problem, { code: 'ERR_NOT_FOUND', directive_id: 'm', rule_id: 'r', message: /technique motd version 1.0 does not exist/ });
});

t.test('many nodes of config ids of their own are written in one batch, each node pointing at its own', async (t) => {
  const { store, put } = await fleet(t, 12);
  await put('group', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] });
  await put('directive', { id: 'd', name: 'd', method: 'file_content', params: { path: '/etc/id', content: '{{node.id}}' } });
  await put('rule', { id: 'r', name: 'r', directives: ['d'], groups: ['all'] });
  const ids = Array.from({ length: 12 }, (_, i) => `n${i}`);
  const configs = await store.policyConfigIds(ids);
  t.equal(new Set(configs.values()).size, 12);
  for (const id of ids) t.equal((await store.getNode(id))!.policy_config_id, configs.get(id), `${id} expects its own config`);
});

t.test('render threads make the bundles the event loop makes: problems, secrets and unchanged nodes alike', async (t) => {
  const n = 150;
  const { store, gen, put } = await fleet(t, n);
  const ids = Array.from({ length: n }, (_, i) => `n${i}`);
  const ported = ids.filter((_, i) => i % 10 === 0);
  for (const id of ported) await store.setProperties(id, { port: 8000 + Number(id.slice(1)) });
  await put('property', { id: 'owner', value: 'ops' });
  await put('property', { id: 'db_pw', value: 's3cret-value', secret: true });
  await put('group', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] });
  await put('group', { id: 'web', name: 'web', filter: [{ key: 'hostname', values: ['web-*'] }], priority: 1, properties: { owner: { value: 'web-team' } } });
  await put('group', { id: 'ported', name: 'ported', nodes: ported });
  await put('group', { id: 'broken', name: 'broken', nodes: ['n1', 'n2', 'n3'] });
  await put('directive', { id: 'motd', name: 'motd', method: 'file_content',
    params: { path: '/etc/motd', content: 'owner={{node.properties.owner}} room={{facts.site.room}} host={{node.hostname}} pw={{node.properties.db_pw}}\n' } });
  await put('directive', { id: 'port', name: 'port', method: 'file_from_template', params: { path: '/etc/port', template: 'port={{node.properties.port}}\n' } });
  await put('directive', { id: 'nope', name: 'nope', method: 'file_content', params: { path: '/etc/nope', content: '{{node.properties.nope}}' } });
  await put('rule', { id: 'base', name: 'base', directives: ['motd'], groups: ['all'] });
  await put('rule', { id: 'ports', name: 'ports', directives: ['port'], groups: ['ported'] });
  await put('rule', { id: 'broken', name: 'broken', directives: ['nope'], groups: ['broken'] });
  const made = await store.policyConfigIds(ids);
  t.equal(made.size, n, 'every node has a bundle (the broken ones their previous one)');
  t.match(await gen.problemOf('n2'), { code: 'ERR_TEMPLATE', directive_id: 'nope' });

  // A second generator with threads renders every node again (it has no memory of them) and
  // finds each bundle exactly as the event loop made it: seals reused, nothing written.
  const threaded = new PolicyGenerator({ store, log: silentLogger, renderThreads: 2 });
  t.teardown(() => threaded.close());
  t.match(await threaded.regenerateAll(), { nodes: n, changed: 0 }, 'no bundle differs');
  t.equal(threaded.renderedInThreads, n, 'every node was rendered on a thread');
  t.same(await store.policyConfigIds(ids), made);
  t.match(await threaded.problemOf('n2'), { code: 'ERR_TEMPLATE', directive_id: 'nope', name: 'node.properties.nope' }, 'a thread\'s problem is the node\'s');

  // A change rendered on the threads: every node's new bundle, which the event loop agrees with.
  const r = await threaded.change('property', 'owner', () => store.putPolicyObject('property', 'owner', { id: 'owner', value: 'sec' }, AT));
  t.match(r.stats, { nodes: n, changed: n - 4 }, 'all but the web nodes n0 and n1 (their group sets owner) and the broken n1 to n3');
  t.equal(threaded.renderedInThreads, 2 * n - 1, 'each again but n0, made from the same data as before (n1 is broken: tried again)');
  const b10 = (await bundleOf(store, 'n10'))!.parsed;
  t.equal(b10.directives[0]!.params.content, 'owner=sec room=R10 host=db-10 pw=\uFFF9secret:db_pw\uFFFB\n');
  t.equal(b10.directives[1]!.params.content, 'port=8010\n');
  t.equal(openSealed(b10.secrets!.db_pw as never, priv(0)), 's3cret-value', 'sealed to the node\'s key by the event loop');
  t.equal((await bundleOf(store, 'n0'))!.parsed.directives[0]!.params.content, 'owner=web-team room=R0 host=web-0 pw=\uFFF9secret:db_pw\uFFFB\n');
  t.equal((await store.getPolicyBundle('n3'))!.config_id, made.get('n3'), 'a broken node keeps its previous bundle');
  const again = new PolicyGenerator({ store, log: silentLogger });
  t.match(await again.regenerateAll(), { nodes: n, changed: 0 }, 'the event loop makes the same bundles');
  t.equal(gen.renderedInThreads, 0, 'a generator without threads renders in the event loop');
});
