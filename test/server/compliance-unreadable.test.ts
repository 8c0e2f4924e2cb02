/**
 * A node's stored outcomes that cannot be read (its compliance row's packed copy of its last run,
 * damaged on disk or by hand) on both stores: a policy generation's write over the fleet still
 * goes through, the other nodes are judged as before, the damaged node is judged as a run that
 * reported nothing (every component missing, as a node whose run really reported nothing), the
 * store's opener is told which node, the kept counters still agree with a full recomputation,
 * and the node's next run replaces the value.
 */
import t, { type Test } from 'tap';
import type { ComplianceClock, Store, UnreadableValue } from '@capstan/server/store/index';
import { packOutcomes } from '@capstan/server/store/runs/outcomes';
import { bytesLiteral, inventory, run, setup, type Backend, type Db } from './store-suite.js';
import { postgresBackend, sqliteBackend } from './backends.js';
import { postgresOrSkipFile } from './pg.js';
import { setAcceptance } from '../helpers/node-changes.js';
import { BASE_S, clockAt, COMPONENTS, iso } from '../helpers/kept-walk.js';

const A = COMPONENTS.slice(0, 3).map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
/**
 * The lists of three generations, each dropping a component the last one had: a list that only
 * adds components leaves the stored rows as they are, without reading the run again.
 */
const LISTS = [[1, 2, 3, 4, 5], [0, 2, 3, 4, 5], [0, 1, 2, 3, 4]].map((pick) => pick.map((i) => {
  const [rule_id, directive_id, component] = COMPONENTS[i]!;
  return { rule_id, directive_id, component };
}));
const ran = (list: typeof A) => list.map((x) => ({ ...x, outcome: 'result_success', count: 1 }));

async function packedOf(db: Db, nodeId: string): Promise<Buffer> {
  const [row] = await db.rows!(`SELECT outcomes_packed FROM node_compliance WHERE node_id = '${nodeId}'`);
  return Buffer.from(row!.outcomes_packed as Uint8Array);
}

async function countsOf(store: Store, clock: ComplianceClock): Promise<Map<string, unknown>> {
  const rows = await store.complianceNodes(null, 100, clock);
  return new Map(rows.map((r) => [r.node_id, { state: r.state, counts: r.counts }]));
}

/** The kept aggregates against the same summed afresh, at `clock`. */
async function keptEqualsFresh(t: Test, store: Store, clock: ComplianceClock, what: string): Promise<void> {
  t.same(await store.complianceSummary([], clock), await store.complianceSummaryFresh(clock), `${what}: the fleet's kept summary equals a recomputation`);
  for (const by of ['rule', 'directive'] as const) {
    t.same(await store.complianceByRule(by, clock), await store.complianceByRuleFresh(by, clock), `${what}: by ${by}, kept equals fresh`);
  }
  t.same(await store.complianceByGroup(clock), await store.complianceByGroupFresh(clock), `${what}: by group, kept equals fresh`);
}

function scenario(t: Test, backend: Backend): void {
  t.test("a node's unreadable stored outcomes do not stop a generation's write, and read as a run that reported nothing", async (t) => {
    const { db } = await setup(t, backend);
    const told: UnreadableValue[] = [];
    const store = await db.open({ onUnreadable: (u) => told.push(u) });
    // n1 and n3 ran their policy, n2 too (its row is damaged below), n4's run reported nothing.
    const ids = ['n1', 'n2', 'n3', 'n4'];
    for (const id of ids) {
      await store.upsertFromInventory(inventory(id, { received_at: iso(BASE_S) }));
      await setAcceptance(store, id, 'accepted', iso(BASE_S));
      await store.setExpectations(id, 'cfg-a', A, iso(BASE_S));
      await store.insertRun(run(id, iso(BASE_S + 60), { config_id: 'cfg-a', received_at: iso(BASE_S + 60), outcomes: id === 'n4' ? [] : ran(A) }));
    }
    const good = await packedOf(db, 'n2');
    t.ok(good.length > 0, 'n2 holds its packed outcomes');

    const damages: Array<[string, Buffer]> = [
      ['a flipped byte', Buffer.from(good.map((b, i) => (i === good.length - 3 ? b ^ 0xff : b)))],
      ['a truncated frame', good.subarray(0, good.length - 8)],
      ['packed, but not a list of outcomes', packOutcomes('{"rule_id": "r1"}')],
    ];
    for (const [k, [what, bytes]] of damages.entries()) {
      await db.exec(`UPDATE node_compliance SET outcomes_packed = ${bytesLiteral(db, bytes)} WHERE node_id = 'n2'`);
      told.length = 0;
      const at = BASE_S + 120 + k * 60;
      // A generation that changes every node's list under the config its run applied (an
      // expectations' refresh): each node's last run is judged again, and its counts show.
      const written = await store.putPolicies(ids.map((id) => ({
        bundle: { node_id: id, config_id: 'cfg-a', generated_at: iso(at), bundle: '{"config_id":"cfg-a"}' },
        expected: LISTS[k]!,
        expectationsOnly: true,
      })));
      t.equal(written, ids.length, `${what}: the whole write went through`);
      t.same(told.map((u) => u.node_id), ['n2'], `${what}: the opener told which node`);
      t.ok(told[0]!.error.length > 0, `${what}: and why (${told[0]!.error})`);

      const clock = clockAt(at + 10);
      const now = await countsOf(store, clock);
      t.same(now.get('n2'), now.get('n4'), `${what}: n2 judged as n4, whose run reported nothing`);
      t.same(now.get('n1'), now.get('n3'), `${what}: the others judged as before`);
      t.not(JSON.stringify(now.get('n1')), JSON.stringify(now.get('n2')), `${what}: and unlike the damaged node`);
      await keptEqualsFresh(t, store, clock, what);

      // The node's page reads the same: no outcomes, said again.
      told.length = 0;
      const base = await store.getComplianceBase('n2');
      t.same(base?.outcomes, [], `${what}: the node's page reads no outcomes`);
      t.equal(base?.run?.config_id, 'cfg-a', 'and still names the run it holds');
      t.same(told.map((u) => u.node_id), ['n2'], `${what}: told on the page's read too`);

      // One node's own write (setExpectations) judges its run the same way.
      told.length = 0;
      t.equal(await store.setExpectations('n2', 'cfg-a', LISTS[(k + 1) % LISTS.length]!, iso(at + 20)), true, `${what}: one node's write went through`);
      t.same(told.map((u) => u.node_id), ['n2'], `${what}: told on its write`);
      await store.putPolicies(ids.map((id) => ({
        bundle: { node_id: id, config_id: 'cfg-a', generated_at: iso(at + 30), bundle: '{"config_id":"cfg-a"}' }, expected: LISTS[k]!, expectationsOnly: true,
      })));
    }

    // n2's next run replaces the value: read again, and judged as n1's same run.
    told.length = 0;
    const last = BASE_S + 600;
    for (const id of ['n1', 'n2']) {
      await store.insertRun(run(id, iso(last), { config_id: 'cfg-a', received_at: iso(last), outcomes: ran(LISTS[2]!) }));
    }
    const healed = await countsOf(store, clockAt(last + 10));
    t.same(healed.get('n2'), healed.get('n1'), "after its next run, n2 is judged as n1");
    t.same((await store.getComplianceBase('n2'))?.outcomes.length, LISTS[2]!.length, 'its outcomes read again');
    t.same(told, [], 'nothing unreadable left');
    await keptEqualsFresh(t, store, clockAt(last + 10), 'after the next run');
  });
}

t.test('sqlite', async (t) => scenario(t, sqliteBackend));
if (await postgresOrSkipFile(t)) t.test('postgres', async (t) => scenario(t, postgresBackend('capstan_unreadable')));
