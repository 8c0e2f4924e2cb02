/**
 * Policy generation keeps each policy group's members (migration 25), on SQLite and PostgreSQL:
 * after a full generation, group changes (a group no rule uses included), a node no longer
 * accepted and a node deleted, every group's kept compliance counts exactly the members
 * generation finds (PolicyGenerator.groupMembers) and equals the same figures summed afresh; a
 * generation that changes nothing writes no membership.
 */
import t, { type Test } from 'tap';
import { silentLogger } from '@capstan/shared';
import { PolicyGenerator } from '@capstan/server/policy/generate';
import type { ComplianceClock, Store } from '@capstan/server/store/index';
import { inventory, run, setup, type Backend } from './store-suite.js';
import { postgresBackend, sqliteBackend } from './backends.js';
import { postgresOrSkipFile } from './pg.js';
import { setAcceptance, updateNode } from '../helpers/node-changes.js';

const AT = '2024-05-01T08:00:00Z';
const AT_S = Date.parse(AT) / 1000;
const clock: ComplianceClock = { now_s: AT_S + 600, silence_s: 900, applying_s: 300 };
const dir = (id: string) => ({ id, name: id, method: 'file_content', mode: 'enforce', params: { path: `/etc/${id}`, content: 'x\n' } });

/** Members per group as the kept counters count them (every accepted member, whatever its class). */
async function counted(store: Store): Promise<Record<string, number>> {
  return Object.fromEntries((await store.complianceByGroup(clock)).map((g) => [g.group_id, g.nodes + g.relays + g.agentless]));
}

/** Members per group as generation finds them now (groups without an accepted member left out, as the counters do). */
async function found(store: Store, gen: PolicyGenerator, groups: string[]): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const g of groups) {
    const m = (await gen.groupMembers(g)) ?? [];
    if (m.length) out[g] = m.length;
  }
  return out;
}

function suite(t: Test, backend: Backend): void {
  t.test('generation keeps the groups\' members, and the kept group counters follow them', async (t) => {
    const { store } = await setup(t, backend);
    for (let i = 0; i < 12; i++) {
      const id = `n${String(i).padStart(2, '0')}`;
      await store.upsertFromInventory(inventory(id, { hostname: `${i % 3 === 0 ? 'web' : 'db'}-${i}`, received_at: AT }));
      if (i !== 11) await setAcceptance(store, id, 'accepted', AT);
    }
    await updateNode(store, 'n04', { relay: true }, AT);
    const gen = new PolicyGenerator({ store, log: silentLogger, clock: () => new Date(AT) });
    await store.putPolicyObject('directive', 'a', dir('a'), AT);
    await store.putPolicyObject('group', 'web', { id: 'web', name: 'web', filter: [{ key: 'hostname', values: ['web*'] }] }, AT);
    await store.putPolicyObject('group', 'some', { id: 'some', name: 'some', nodes: ['n01', 'n02', 'n11', 'gone'] }, AT);
    // Used by no rule: its members get no policy from it, but are counted.
    await store.putPolicyObject('group', 'db', { id: 'db', name: 'db', filter: [{ key: 'hostname', values: ['db*'] }] }, AT);
    await store.putPolicyObject('rule', 'r1', { id: 'r1', name: 'r1', directives: ['a'], groups: ['web', 'some'] }, AT);
    await gen.regenerateAll();
    const groups = ['web', 'some', 'db', 'all-nodes', 'all-nodes-with-agent', 'all-relays'];
    t.same(await counted(store), await found(store, gen, groups), 'after a full generation');
    t.match(await counted(store), { web: 4, some: 2, db: 7 }, 'the static group counts its accepted members only; the unused group is counted');

    // Runs of the web nodes: their groups' counts follow the runs' outcomes.
    for (const id of ['n00', 'n03']) {
      const config = (await store.getNode(id))!.policy_config_id!;
      await store.insertRun(run(id, '2024-05-01T08:05:00Z', { config_id: config, received_at: '2024-05-01T08:05:01Z',
        outcomes: [{ rule_id: 'r1', directive_id: 'a', component: 'File content', outcome: id === 'n00' ? 'result_error' : 'result_success', count: 1 }] }));
    }
    t.same(await store.complianceByGroup(clock), await store.complianceByGroupFresh(clock), 'kept equals fresh after runs');
    const web = (await store.complianceByGroup(clock)).find((g) => g.group_id === 'web')!;
    t.ok(web.counts.error >= 1, `the web group counts the error (${JSON.stringify(web.counts)})`);

    // The unused group's filter changes: its old and new members are regenerated.
    await gen.change('group', 'db', () => store.putPolicyObject('group', 'db', { id: 'db', name: 'db', filter: [{ key: 'hostname', values: ['db-1*'] }] }, AT));
    t.same(await counted(store), await found(store, gen, groups), 'after the unused group changed');
    t.match(await counted(store), { db: 2 }, 'db-1 and db-10');
    // A used group gains a node by hand.
    await gen.change('group', 'some', () => store.putPolicyObject('group', 'some', { id: 'some', name: 'some', nodes: ['n01', 'n02', 'n05'] }, AT));
    t.match(await counted(store), { some: 3 });
    // A node no longer accepted, a node deleted.
    await setAcceptance(store, 'n05', 'refused', AT);
    await gen.nodeChanged('n05');
    await store.deleteNode('n03', AT);
    t.same(await counted(store), await found(store, gen, groups), 'after a refusal and a deletion');
    t.match(await counted(store), { some: 2, web: 3 });
    // A deleted group leaves nothing counted.
    await gen.change('group', 'db', () => store.deletePolicyObject('group', 'db'));
    t.notOk('db' in await counted(store), 'the deleted group is not counted');
    t.same(await store.complianceByGroup(clock), await store.complianceByGroupFresh(clock), 'kept equals fresh at the end');

    // Nothing changed: no membership written.
    const ids = ['n00', 'n01', 'n04'];
    const explained = new Map<string, string[]>();
    for (const id of ids) explained.set(id, (await gen.explain(id)).groups);
    t.ok(explained.get('n04')!.includes('all-relays'), 'the relay is in the built-in relays group');
    t.equal(await store.putGroupMembers(ids, explained), 0, 'the memberships generation wrote are found as they are');
    t.match(await gen.regenerateAll(), { changed: 0 }, 'a generation that changes nothing');
    t.same(await store.complianceByGroup(clock), await store.complianceByGroupFresh(clock));
  });
}

t.test('sqlite', async (t) => suite(t, sqliteBackend));
if (await postgresOrSkipFile(t)) {
  t.test('postgres', async (t) => suite(t, postgresBackend('capstan_members')));
}
