/**
 * A node's policy page (PolicyGenerator.explain, GET /api/1/nodes/<id>/policy) names the groups
 * its last generation found it in (policy_group_members), on SQLite and PostgreSQL: a change no
 * generation has seen yet does not show before the node is generated again, as its bundle does
 * not; a node never generated has its groups' filters evaluated for it alone. It used to evaluate
 * every group's filter for the node at each view, a query per group (400 ms with 20 groups on
 * PostgreSQL at 100,000 nodes), and named groups its bundle was not made from.
 */
import t, { type Test } from 'tap';
import { silentLogger } from '@capstan/shared';
import { PolicyGenerator } from '@capstan/server/policy/generate';
import { inventory, setup, type Backend } from './store-suite.js';
import { postgresBackend, sqliteBackend } from './backends.js';
import { postgresOrSkipFile } from './pg.js';
import { setAcceptance, setState } from '../helpers/node-changes.js';

const AT = '2024-05-01T08:00:00Z';
const dir = (id: string) => ({ id, name: id, method: 'file_content', mode: 'enforce', params: { path: `/etc/${id}`, content: 'x\n' } });

function suite(t: Test, backend: Backend): void {
  t.test("a node's groups are those its last generation found", async (t) => {
    const { store } = await setup(t, backend);
    for (const id of ['n0', 'n1', 'n2']) await store.upsertFromInventory(inventory(id, { received_at: AT }));
    for (const id of ['n0', 'n1']) await setAcceptance(store, id, 'accepted', AT);
    await store.putPolicyObject('directive', 'a', dir('a'), AT);
    await store.putPolicyObject('group', 'stopped', { id: 'stopped', name: 'stopped', filter: [{ key: 'state', values: ['stopped'] }] }, AT);
    await store.putPolicyObject('group', 'byid', { id: 'byid', name: 'byid', filter: [{ key: 'id', values: ['n0', 'n2'] }] }, AT);
    await store.putPolicyObject('group', 'some', { id: 'some', name: 'some', nodes: ['n1'] }, AT);
    await store.putPolicyObject('rule', 'r1', { id: 'r1', name: 'r1', directives: ['a'], groups: ['stopped', 'byid'] }, AT);
    await setState(store, 'n1', 'stopped', AT);
    const gen = new PolicyGenerator({ store, log: silentLogger, clock: () => new Date(AT) });
    await gen.regenerateAll();
    const n0 = await gen.explain('n0');
    t.same(n0.groups, ['all-nodes', 'all-nodes-with-agent', 'byid'], 'as generated');
    t.match(n0.rules, [{ id: 'r1', via: ['byid'] }]);
    t.same((await gen.explain('n1')).groups, ['all-nodes', 'all-nodes-with-agent', 'some', 'stopped']);

    // n0 stops: no generation has seen it yet, so its policy (and its page) do not either.
    await setState(store, 'n0', 'stopped', AT);
    t.same((await gen.explain('n0')).groups, ['all-nodes', 'all-nodes-with-agent', 'byid'], 'the change waits for the generation');
    await gen.nodeChanged('n0');
    t.same((await gen.explain('n0')).groups, ['all-nodes', 'all-nodes-with-agent', 'byid', 'stopped'], 'then shows');

    // Accepted, never generated: its filters evaluated for it.
    await setAcceptance(store, 'n2', 'accepted', AT);
    t.same(await store.groupMembersOf('n2'), [], 'nothing recorded');
    t.same((await gen.explain('n2')).groups, ['all-nodes', 'all-nodes-with-agent', 'byid'], 'evaluated');
    // Not accepted: in no group, whatever was recorded.
    await setAcceptance(store, 'n1', 'refused', AT);
    t.same(await gen.explain('n1'), { groups: [], rules: [] });
  });
}

t.test('sqlite', async (t) => suite(t, sqliteBackend));
if (await postgresOrSkipFile(t)) {
  t.test('postgres', async (t) => suite(t, postgresBackend('capstan_explain')));
}
