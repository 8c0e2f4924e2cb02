/**
 * POST /api/1/policy/plan through the server's app (buildApp + inject, real SQLite store): the
 * object changes in a safe order, the nodes each change reaches by the generator's own membership
 * (static and dynamic groups), nothing written, coded errors naming the field, and a plan
 * applied with PUT and DELETE leaving nothing to do.
 */
import t, { type Test } from 'tap';
import { adminApp } from '../helpers/admin-app.js';


async function setup(t: Test, maxPlanBytes?: number) {
  const { api, store } = await adminApp(t, { ...(maxPlanBytes && { maxPlanBytes }) });
  let hosts = 0;
  const node = async (id: string, tags: Record<string, string> = {}) => {
    // One address per node: a second node at a known address is refused (ERR_ADDRESS_TAKEN).
    const r = await api('POST', '/api/1/nodes', { host: `10.0.0.${++hosts}`, id, tags });
    t.equal(r.status, 201, JSON.stringify(r.json));
  };
  return { api, node, store };
}

const motd = (content: string) => ({ id: 'motd', method: 'file_content', params: { path: '/etc/motd', content } });
const ntp = { id: 'ntp', method: 'package_present', params: { name: 'chrony' } };
const prod = { id: 'prod', filter: [{ key: 'tag:env', values: ['prod'] }] };

t.test('a plan names the changes and the nodes they reach, and writes nothing', async (t) => {
  const { api, node, store } = await setup(t);
  await node('web1', { env: 'prod' });
  await node('web2', { env: 'test' });
  const desired = { directives: [motd('hi\n'), ntp], groups: [prod], rules: [{ id: 'base', directives: ['motd', 'ntp'], groups: ['prod'] }] };
  const r = await api('POST', '/api/1/policy/plan', desired);
  t.equal(r.status, 200, JSON.stringify(r.json));
  const plan = r.json.data;
  t.same(plan.changes.map((c: { action: string; kind: string; id: string }) => `${c.action} ${c.kind} ${c.id}`),
    ['create directive motd', 'create directive ntp', 'create group prod', 'create rule base']);
  t.match(plan.changes[0].object, { id: 'motd', name: 'motd', mode: 'enforce' }, 'the object as it will be saved');
  t.match(plan, { unchanged: 0, nodes_total: 1, nodes_truncated: false });
  t.same(plan.nodes.map((n: { node_id: string; added: unknown }) => [n.node_id, n.added]),
    [['web1', [{ rule_id: 'base', directive_id: 'motd' }, { rule_id: 'base', directive_id: 'ntp' }]]], 'only the member of the dynamic group');
  t.equal(plan.nodes[0].config_id_before, null);
  t.match(plan.nodes[0].config_id_after, /^[0-9a-f]{16}$/);
  t.same((await api('GET', '/api/1/rules')).json.data, [], 'nothing saved');
  t.equal(await store.getPolicyBundle('web1'), null, 'nothing generated');

  // Applied as the CLI does, in the plan's order: the next plan is empty.
  for (const c of plan.changes) t.equal((await api('PUT', `/api/1/${c.kind}s/${c.id}`, c.object)).status, 201);
  t.equal(JSON.parse((await store.getPolicyBundle('web1'))!.bundle).config_id, plan.nodes[0].config_id_after, 'the config id the plan announced');
  const again = (await api('POST', '/api/1/policy/plan', desired)).json.data;
  t.same(again, { changes: [], unchanged: 4, nodes: [], nodes_total: 0, nodes_truncated: false, warnings: [] });

  // A changed directive, a node moving into the group, a reordered rule.
  const next = (await api('POST', '/api/1/policy/plan', {
    directives: [motd('changed\n')], groups: [{ id: 'prod', filter: [{ key: 'tag:env', values: ['prod', 'test'] }] }],
  })).json.data;
  t.same(next.changes.map((c: { action: string; id: string; fields?: string[] }) => [c.action, c.id, c.fields]), [['update', 'motd', ['params']], ['update', 'prod', ['filter']]]);
  t.same(next.nodes.map((n: { node_id: string; added: unknown[]; changed: unknown[]; removed: unknown[] }) => [n.node_id, n.added.length, n.changed.length, n.removed.length]),
    [['web1', 0, 1, 0], ['web2', 2, 0, 0]]);
  const reordered = (await api('POST', '/api/1/policy/plan', { rules: [{ id: 'base', directives: ['ntp', 'motd'], groups: ['prod'] }] })).json.data;
  t.same(reordered.nodes.map((n: { node_id: string; added: unknown[]; changed: unknown[] }) => [n.node_id, n.added.length, n.changed.length]), [['web1', 0, 0]],
    'a reordered rule is a new bundle, with no directive to name');
  t.not(reordered.nodes[0].config_id_after, reordered.nodes[0].config_id_before);

  // Prune: what the request does not name goes, rules before what they name.
  const pruned = (await api('POST', '/api/1/policy/plan', { directives: [ntp], prune: true })).json.data;
  t.same(pruned.changes.map((c: { action: string; kind: string; id: string }) => `${c.action} ${c.kind} ${c.id}`), ['delete rule base', 'delete directive motd', 'delete group prod']);
  t.same(pruned.nodes.map((n: { node_id: string; removed: unknown[] }) => [n.node_id, n.removed.length, (n as unknown as { config_id_after: unknown }).config_id_after]), [['web1', 2, null]]);
  const limited = (await api('POST', '/api/1/policy/plan?max_nodes=1', { directives: [motd('x\n')], groups: [{ id: 'prod', nodes: ['web1', 'web2'] }] })).json.data;
  t.match(limited, { nodes_total: 2, nodes_truncated: true });
  t.same(limited.nodes.map((n: { node_id: string }) => n.node_id), ['web1'], 'max_nodes bounds the list, in node id order');
});

t.test('a plan refuses bad input with coded errors naming the field', async (t) => {
  const { api, node } = await setup(t);
  await node('web1');
  const e = async (body: unknown, query = '') => {
    const r = await api('POST', `/api/1/policy/plan${query}`, body);
    return [r.status, r.json.error.code, r.json.error.field];
  };
  t.same(await e({ directives: [], rulez: [] }), [400, 'ERR_BAD_REQUEST', 'rulez']);
  t.same(await e({ directives: [{ id: 'd', method: 'file_content', params: { path: 'rel', content: '' } }] }), [400, 'ERR_METHOD_PARAMS', 'directives[0].params.path']);
  t.same(await e({ directives: [motd('a'), motd('b')] }), [400, 'ERR_BAD_REQUEST', 'directives[1].id']);
  t.same(await e({ groups: [{ id: 'g', nodes: ['web1', 'ghost'] }] }), [400, 'ERR_BAD_REQUEST', 'groups[0].nodes']);
  t.same(await e({ rules: [{ id: 'r', directives: ['nope'], groups: [] }] }), [400, 'ERR_BAD_REQUEST', 'rules.r.directives']);
  t.same(await e({ prune: 'yes' }), [400, 'ERR_BAD_REQUEST', 'prune']);
  t.equal((await api('POST', '/api/1/policy/plan?max_nodes=0', {})).json.error.code, 'ERR_BAD_REQUEST');
  t.equal((await api('POST', '/api/1/policy/plan?max_node=5', {})).json.error.code, 'ERR_BAD_REQUEST', 'an unknown parameter');
  t.equal((await api('POST', '/api/1/policy/plan?max_nodes=100001', {})).json.error.code, 'ERR_BAD_REQUEST');
});

t.test('a whole policy may exceed the 1 MiB of one object, up to [policy] max_plan_size', async (t) => {
  const big = (id: string) => ({ id, method: 'file_content', params: { path: `/etc/${id}`, content: 'x'.repeat(800_000) } });
  const { api } = await setup(t);
  const r = await api('POST', '/api/1/policy/plan', { directives: [big('a'), big('b')] });
  t.equal(r.status, 200, 'a 1.6 MB plan by default');
  t.equal(r.json.data.changes.length, 2);
  const small = await setup(t, 4096);
  const refused = await small.api('POST', '/api/1/policy/plan', { directives: [{ ...motd('y'.repeat(5000)) }] });
  t.same([refused.status, refused.json.error.code], [413, 'ERR_BODY_TOO_LARGE']);
});

t.test('the built-in groups: rules target them, pruning keeps them, files may not define them', async (t) => {
  const { api, node } = await setup(t);
  await node('web1');
  const desired = { directives: [ntp], groups: [], rules: [{ id: 'everyone', directives: ['ntp'], groups: ['all-nodes'] }], prune: true };
  const r = await api('POST', '/api/1/policy/plan', desired);
  t.equal(r.status, 200, JSON.stringify(r.json));
  t.same(r.json.data.changes.map((c: { action: string; kind: string; id: string }) => `${c.action} ${c.kind} ${c.id}`),
    ['create directive ntp', 'create rule everyone'], 'no built-in group deleted by prune, none counted');
  t.match(r.json.data, { unchanged: 0, nodes_total: 1 });
  const defined = await api('POST', '/api/1/policy/plan', { groups: [{ id: 'all-nodes', filter: [] }] });
  t.equal(defined.status, 409);
  t.match(defined.json.error, { code: 'ERR_CONFLICT', message: /groups\[0\]: all-nodes is a built-in group/ });
});
