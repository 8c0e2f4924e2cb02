/**
 * A node's own secret properties, as the global and group ones are tested (policy-render.test.ts):
 * sealed to that node's key alone, a marker in the rendered value, out of the bundle's properties,
 * kept while unchanged, never returned, audited or planned with its value; and node properties in
 * a plan (`nodes` of POST /api/1/policy/plan, `nodes/<id>` files): which values change, with the
 * effective leaves and their origins, a placeholder keeping the stored secret, refusals naming
 * the field, and nodes the request does not list left alone.
 */
import { generateKeyPairSync } from 'node:crypto';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { silentLogger } from '@capstan/shared';
import { openSealed } from '@capstan/shared/policy/secrets';
import { PolicyGenerator } from '@capstan/server/policy/generate';
import { parsePolicyObject, PolicyService } from '@capstan/server/policy/service';
import { NodeRegistry } from '@capstan/server/registry/nodes';
import { openRegistry } from '@capstan/server/registry/open';
import type { PolicyKind } from '@capstan/server/store/index';
import { inventory } from './store-suite.js';
import { programDir } from '../helpers/programs.js';
import { setAcceptance, TEST_ADMIN } from '../helpers/node-changes.js';

const AT = '2024-05-01T08:00:00Z';
const SECRET = 'node-secret-6b1f-not-for-anyone';
const keys = Array.from({ length: 2 }, () => generateKeyPairSync('rsa', { modulusLength: 2048 }));
const pub = (i: number) => keys[i]!.publicKey.export({ type: 'spki', format: 'pem' }).toString();
const priv = (i: number) => keys[i]!.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();

/** `n` accepted nodes (n0 and n1 with keys of their own, the others with a certificate nothing can seal to), a rule writing `pw` and `owner`. */
async function fleet(t: Test, n: number) {
  const store = await openRegistry({ sqlitePath: join(programDir(t), 'capstan.db') });
  t.teardown(() => store.close());
  for (let i = 0; i < n; i++) {
    await store.upsertFromInventory(inventory(`n${i}`, { hostname: `web-${i}`, ...(i < 2 && { certificate: pub(i) }) }));
    await setAcceptance(store, `n${i}`, 'accepted', AT);
  }
  const recorded: Array<Record<string, unknown>> = [];
  const audit = { record: async (_a: unknown, r: Record<string, unknown>) => void recorded.push(r) } as never;
  const gen = new PolicyGenerator({ store, log: silentLogger });
  const svc = new PolicyService({ store, generator: gen, log: silentLogger, audit });
  const nodes = new NodeRegistry({ store, log: silentLogger, audit });
  // What the server's listeners do on a node's change: regenerate it.
  nodes.on(async (e) => void (await gen.nodeChanged(e.id)));
  const put = (kind: PolicyKind, body: Record<string, unknown>) => svc.save(kind, parsePolicyObject(kind, body), TEST_ADMIN, null);
  await put('group', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] });
  await put('directive', { id: 'd', name: 'd', method: 'file_content', params: { path: '/etc/app', content: 'owner={{node.properties.owner}} pw={{node.properties.pw}}\n' } });
  await put('property', { id: 'owner', value: 'ops' });
  await put('property', { id: 'pw', value: 'global-pw', secret: true });
  await put('rule', { id: 'r', name: 'r', directives: ['d'], groups: ['all'] });
  return { store, gen, svc, nodes, put, recorded };
}

const bundleOf = async (store: Awaited<ReturnType<typeof fleet>>['store'], id: string) => {
  const b = (await store.getPolicyBundle(id))!;
  return { ...b, parsed: JSON.parse(b.bundle) as { directives: Array<{ params: Record<string, string> }>; properties?: Record<string, unknown>; secrets?: Record<string, never> } };
};

t.test('a node\'s own secret is sealed to that node alone, kept while unchanged, and shown nowhere', async (t) => {
  const { store, gen, svc, nodes, recorded } = await fleet(t, 2);
  const view = await nodes.setOwnProperties('n0', { owner: { value: 'alice' }, pw: { value: SECRET, secret: true } }, TEST_ADMIN);
  t.same(view, { owner: { value: 'alice' }, pw: { secret: true } }, 'answered without the value');
  const b0 = await bundleOf(store, 'n0');
  t.notOk(b0.bundle.includes(SECRET), 'the stored bundle holds no plaintext');
  t.equal(b0.parsed.directives[0]!.params.content, 'owner=alice pw=\uFFF9secret:pw\uFFFB\n', 'a marker in its place');
  t.equal(openSealed(b0.parsed.secrets!.pw, priv(0)), SECRET, 'opens with the node\'s key');
  t.throws(() => openSealed(b0.parsed.secrets!.pw, priv(1)), { code: 'ERR_SECRET' }, 'another node\'s key does not open it');
  t.same(b0.parsed.properties, { owner: 'alice' }, 'not among the bundle properties');
  t.equal(openSealed((await bundleOf(store, 'n1')).parsed.secrets!.pw, priv(1)), 'global-pw', 'another node keeps the global value');

  const cfg = b0.config_id;
  t.match(await gen.regenerateAll(), { changed: 0 }, 'sealed values kept: config ids stable');
  const restarted = new PolicyGenerator({ store, log: silentLogger });
  t.match(await restarted.regenerateAll(), { changed: 0 }, 'a restarted server reuses the kept seal');
  // A plain write leaves the secret as it is.
  await nodes.setProperties('n0', { owner: 'bob' }, TEST_ADMIN);
  t.match((await bundleOf(store, 'n0')).parsed.directives[0]!.params.content, /^owner=bob pw=\uFFF9secret:pw\uFFFB/);
  t.equal(openSealed((await bundleOf(store, 'n0')).parsed.secrets!.pw, priv(0)), SECRET);
  // Given back as shown, it keeps its value; a new value is a new seal.
  await nodes.setOwnProperties('n0', { owner: { value: 'alice' }, pw: { secret: true } }, TEST_ADMIN);
  t.equal((await bundleOf(store, 'n0')).config_id, cfg, 'the same properties, the same kept seal');
  await nodes.setOwnProperties('n0', { owner: { value: 'alice' }, pw: { value: `${SECRET}-2`, secret: true } }, TEST_ADMIN);
  t.not((await bundleOf(store, 'n0')).config_id, cfg, 'a new value: a new seal and config id');

  const eff = (await svc.effective('n0'))!;
  t.match(eff, { properties: { pw: { secret: true }, owner: 'alice' }, secrets: ['pw'] });
  t.match(eff.origins.find((o) => o.path[0] === 'pw'), { secret: true, origin: { level: 'node' }, overridden: [{ origin: { level: 'global' } }] });
  t.notOk(JSON.stringify(eff).includes(SECRET) || JSON.stringify(eff).includes('global-pw'), 'the effective view holds no value');
  t.same(await nodes.ownProperties('n0'), { owner: { value: 'alice' }, pw: { secret: true } });
  t.same(await store.getProperties('n0'), { owner: 'alice' }, 'the plain read leaves it out');
  t.same(await store.listNodeIds([{ key: 'q', values: ['property:pw'] }]), [], 'filters do not see it');

  t.match(recorded.filter((r) => r.action === 'node.properties.update'), [
    { target: 'n0', before: {}, after: { owner: { value: 'alice' }, pw: { secret: true } } },
    { before: { pw: { secret: true } }, after: { owner: { value: 'bob' }, pw: { secret: true } } }, {}, {},
  ]);
  t.notOk(JSON.stringify(recorded).includes(SECRET), 'no audit record holds the value');

  // Refusals name the field; a placeholder needs a stored secret.
  await t.rejects(nodes.setOwnProperties('n1', { pw: { secret: true } }, TEST_ADMIN), { code: 'ERR_PROPERTIES_INVALID', details: { field: 'properties.pw.value' } });
  await t.rejects(nodes.setOwnProperties('n1', { pw: { value: 3, secret: true } }, TEST_ADMIN), { code: 'ERR_PROPERTIES_INVALID', details: { field: 'properties.pw.value' } });
  await t.rejects(nodes.setOwnProperties('n1', { 'a.b': { value: 'x', secret: true } }, TEST_ADMIN), { code: 'ERR_PROPERTIES_INVALID', details: { field: 'properties.a.b' } });
  await t.rejects(nodes.setOwnProperties('n1', { x: { value: 'x'.repeat(5000) } }, TEST_ADMIN), { code: 'ERR_PROPERTIES_INVALID', details: { field: 'properties.x.value' } });
  await t.rejects(nodes.setOwnProperties('n1', { x: 'bare' }, TEST_ADMIN), { code: 'ERR_PROPERTIES_INVALID', details: { field: 'properties.x' } });
  await t.rejects(nodes.setOwnProperties('ghost', {}, TEST_ADMIN), { code: 'ERR_NODE_UNKNOWN' });
});

t.test('a plan of node properties: what changes per node, with origins, never a secret\'s value', async (t) => {
  const { store, svc, nodes, put } = await fleet(t, 3);
  await put('group', { id: 'web', name: 'web', nodes: ['n0', 'n1'], priority: 1, properties: { owner: { value: 'web-team' } } });
  await nodes.setOwnProperties('n0', { pw: { value: SECRET, secret: true }, old: { value: 1 } }, TEST_ADMIN);
  await nodes.setOwnProperties('n2', { owner: { value: 'kept' } }, TEST_ADMIN);
  const before = await Promise.all(['n0', 'n1', 'n2'].map(async (n) => (await store.getPolicyBundle(n))?.config_id));

  const plan = await svc.plan({ nodes: [
    { id: 'n0', properties: { owner: { value: 'alice' }, pw: { secret: true } } },
    { id: 'n1', properties: { pw: { value: `${SECRET}-n1`, secret: true } } },
  ] }, 100);
  t.same(plan.changes, [
    { kind: 'node', id: 'n0', action: 'update', fields: ['old', 'owner'], object: { id: 'n0', properties: { owner: { value: 'alice' }, pw: { secret: true } } },
      properties: [{ name: 'old', action: 'delete', before: 1 }, { name: 'owner', action: 'create', after: 'alice' }] },
    { kind: 'node', id: 'n1', action: 'update', fields: ['pw'], object: { id: 'n1', properties: { pw: { secret: true } } },
      properties: [{ name: 'pw', action: 'create', secret: true }] },
  ], 'the placeholder keeps n0\'s secret: unchanged; n2, not listed, is left alone');
  t.same(plan.nodes.map((n) => n.node_id), ['n0', 'n1']);
  t.match(plan.nodes[0], { changed: [{ rule_id: 'r', directive_id: 'd' }], values: [{ field: 'content' }], properties: ['old', 'owner'],
    effective: [
      { path: ['old'], before: { value: 1, origin: { level: 'node' } } },
      { path: ['owner'], before: { value: 'web-team', origin: { level: 'group', id: 'web' } }, after: { value: 'alice', origin: { level: 'node' } } },
    ] });
  t.match(plan.nodes[1], { secrets: ['pw'], effective: [{ path: ['pw'], before: { secret: true, origin: { level: 'global' } }, after: { secret: true, origin: { level: 'node' } } }] });
  t.notOk(JSON.stringify(plan).includes(SECRET) || JSON.stringify(plan).includes('global-pw'), 'no secret value in the plan');
  t.same(await Promise.all(['n0', 'n1', 'n2'].map(async (n) => (await store.getPolicyBundle(n))?.config_id)), before, 'a plan writes nothing');

  const origin = await svc.plan({ nodes: [{ id: 'n1', properties: { owner: { value: 'web-team' } } }] }, 100);
  t.same([origin.changes.map((c) => `${c.kind} ${c.id}`), origin.nodes], [['node n1'], []], 'the value its group gives it: its own level changes, its bundle does not');
  const objects = (await svc.plan({}, 100)).unchanged;
  const same = await svc.plan({ nodes: [{ id: 'n2', properties: { owner: { value: 'kept' } } }] }, 100);
  t.same([same.changes, same.unchanged], [[], objects + 1], 'a node as it is: counted unchanged');
  const pruned = await svc.plan({ prune: true }, 100);
  t.same(pruned.changes.filter((c) => c.kind === 'node'), [], 'pruning deletes policy objects, never a node\'s properties');

  const refused = async (body: unknown, field: string, code = 'ERR_PROPERTIES_INVALID') => t.rejects(svc.plan(body, 100), { code, details: { field } }, field);
  await refused({ nodes: [{ id: 'n1', properties: { pw: { secret: true } } }] }, 'nodes[0].properties.pw.value');
  await refused({ nodes: [{ id: 'n0', properties: { x: { value: 'x'.repeat(5000) } } }] }, 'nodes[0].properties.x.value');
  await refused({ nodes: [{ id: 'n0', properties: {} }, { id: 'ghost', properties: {} }] }, 'nodes[1].id', 'ERR_BAD_REQUEST');
  await refused({ nodes: [{ id: 'n0' }, { id: 'n0' }] }, 'nodes[1].id', 'ERR_BAD_REQUEST');
  await refused({ nodes: [{ id: 'n0', props: {} }] }, 'nodes[0].props', 'ERR_BAD_REQUEST');
  await refused({ nodes: [{ id: 'n0', properties: [] }] }, 'nodes[0].properties');
  await refused({ nodes: {} }, 'nodes', 'ERR_BAD_REQUEST');

  const { ChangeRequestService } = await import('@capstan/server/policy/reviews');
  const reviews = new ChangeRequestService({ store, policy: svc });
  await t.rejects(reviews.propose({ title: 'nodes', nodes: [{ id: 'n0', properties: {} }] }, TEST_ADMIN), { code: 'ERR_BAD_REQUEST', details: { field: 'nodes' } },
    'a change request carries no node properties');
});
