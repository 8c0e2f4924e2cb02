/**
 * A rule's nodes read from the kept keys (migration 28: the drill-down from a rule or a directive
 * to its nodes) against the same pages judged afresh over every node under the rule, on both
 * stores: after random policies (some expecting nothing), runs (complete or not, back-filled,
 * with unexpected items), deletions and re-registrations, acceptance, relay and state changes,
 * agentless nodes, expiration policies, clock moves and sweeps; read at the current moment and at
 * others (the readers' correction), for rules, directives and states, both orders, several pages
 * and a page past the end. Keys are kept only for the nodes whose run decides (migration 37):
 * a node applying or silent has none, and a generation that moves it writes none; a key missing
 * by hand is seen, so the comparison can fail. On SQLite the agents out of mode 0 whose rows
 * expect nothing are read through migration 40's index (their plans say so).
 */
import t, { type Test } from 'tap';
import type { ComplianceClock, Store, TargetNodesQuery } from '@capstan/server/store/index';
import { inventory, run, setup, type Backend } from './store-suite.js';
import { postgresBackend, sqliteBackend } from './backends.js';
import { postgresOrSkipFile } from './pg.js';
import { targetKeptSql } from '@capstan/server/store/compliance/kept-targets';
import { complianceClassSql, targetSpec } from '@capstan/server/store/compliance/rows';
import { setAcceptance } from '../helpers/node-changes.js';
import { UNDO_28, UNDO_29, UNDO_30, UNDO_31, UNDO_32, UNDO_33, UNDO_34, UNDO_35, UNDO_36, UNDO_37, UNDO_38, UNDO_39, UNDO_40, UNDO_41, UNDO_42 } from '../helpers/old-schema.js';
import { prng } from '../helpers/prng.js';
import { AGENTS, BASE_S, clockAt, COMPONENTS, iso, keptWalk, OUTCOMES, settled } from '../helpers/kept-walk.js';

const SEED = Number(process.env.KEPT_SEED ?? 20261204);
const STEPS = 140;
const QUERIES: Array<Omit<TargetNodesQuery, 'page'>> = [
  { rule_id: 'r1', per_page: 3 },
  { rule_id: 'r1', order: 'desc', per_page: 4 },
  { rule_id: 'r2', per_page: 2, state: 'error' },
  { rule_id: 'r1', directive_id: 'd1', per_page: 3 },
  { rule_id: 'r2', directive_id: 'd3', order: 'desc', per_page: 2, state: 'success' },
  { rule_id: 'r9', per_page: 5, state: 'unexpected' },
  { rule_id: 'r1', per_page: 4, state: 'applying' },
  { rule_id: 'r3', order: 'desc', per_page: 3, state: 'no_answer' },
  { rule_id: 'r2', per_page: 2, state: 'missing' },
  { rule_id: 'r3', directive_id: 'd4', per_page: 20 },
  { rule_id: 'nope', per_page: 5 },
];
/**
 * A directive's own keys filtered by state (its nodes applying, silent, or by what they ran). Their
 * pages are drawn from a generator of their own, so the walk goes as it did without them.
 */
const DIRECTIVE_STATES: Array<Omit<TargetNodesQuery, 'page'>> = [
  { rule_id: 'r1', directive_id: 'd1', per_page: 3, state: 'applying' },
  { rule_id: 'r1', directive_id: 'd2', order: 'desc', per_page: 2, state: 'no_answer' },
  { rule_id: 'r1', directive_id: 'd1', per_page: 2, state: 'error' },
  { rule_id: 'r2', directive_id: 'd3', per_page: 3, state: 'non_compliant' },
];

/** What each drill-down answers, from the kept keys (`kept`) or afresh, in QUERIES' order then DIRECTIVE_STATES' (read together). */
function reads(store: Store, clock: ComplianceClock, pages: number[], kept: boolean): Promise<unknown[]> {
  return settled([...QUERIES, ...DIRECTIVE_STATES].map((q, i) => {
    const query = { ...q, page: pages[i]! };
    return kept ? store.targetNodes(query, clock) : store.targetNodesFresh(query, clock);
  }));
}

function scenario(t: Test, backend: Backend): void {
  t.test("a rule's nodes from the kept keys equal those judged afresh", async (t) => {
    const { store, db } = await setup(t, backend);
    const r = prng(SEED);
    const rd = prng(SEED + 1);
    let compared = 0;
    let mismatches = 0;
    const seen = { rows: 0, zero: 0, keyless: 0, applying: 0, noAnswer: 0, forcedUnexpected: 0 };
    const compare = async (clock: ComplianceClock, step: number, what: string) => {
      const pages = [...QUERIES.map(() => 1 + r.int(4)), ...DIRECTIVE_STATES.map(() => 1 + rd.int(3))];
      // Every node under r1 on one page (what the pages met), read with them.
      const [k, f, { data: all }] = await settled([reads(store, clock, pages, true), reads(store, clock, pages, false),
        store.targetNodesFresh({ rule_id: 'r1', page: 1, per_page: 100 }, clock)]);
      compared++;
      seen.rows += all.length;
      seen.zero += all.filter((n) => n.counts.success + n.counts.repaired + n.counts.audit_compliant + n.counts.not_applicable === 0).length;
      seen.keyless += all.filter((n) => Object.values(n.counts).every((v) => v === 0)).length;
      seen.applying += all.filter((n) => n.counts.applying > 0).length;
      seen.noAnswer += all.filter((n) => n.counts.no_answer > 0).length;
      if (JSON.stringify(k) !== JSON.stringify(f)) {
        mismatches++;
        if (mismatches === 1) t.same(k, f, `step ${step} (${what}), seed ${SEED}: kept equals fresh`);
      }
    };
    const { now, forcedUnexpected } = await keptWalk(store, r, STEPS, compare);
    seen.forcedUnexpected = forcedUnexpected;

    t.equal(mismatches, 0, `${compared} comparisons, none differ`);
    t.ok(seen.rows > 0 && seen.zero > 0 && seen.keyless > 0, `nodes under r1 met (${seen.rows}), at 0 % (${seen.zero}), without item (${seen.keyless})`);
    t.ok(seen.applying > 0 && seen.noAnswer > 0, `applying (${seen.applying}) and silent (${seen.noAnswer}) nodes met`);
    t.ok(seen.forcedUnexpected > 0, `nodes applying or silent with only unexpected items met (${seen.forcedUnexpected})`);

  });
}

/** The kept keys of `ids`, as rows in a stable order. */
async function keysOf(db: { rows?: (sql: string) => Promise<Array<Record<string, unknown>>> }, ids: readonly string[]) {
  const rows = await db.rows!(`SELECT node_id, rule_id, directive_id, share, states FROM kept_targets
    WHERE node_id IN (${ids.map((i) => `'${i}'`).join(', ')}) ORDER BY node_id, rule_id, directive_id`);
  return rows.map((r) => ({
    node_id: r.node_id as string, rule_id: r.rule_id as string, directive_id: r.directive_id as string,
    share: r.share === null ? null : Number(r.share), states: Number(r.states),
  }));
}

function normalOnly(t: Test, backend: Backend): void {
  t.test('keys are kept while the run decides, dropped when it no longer does, made again when it comes back', async (t) => {
    const { store, db } = await setup(t, backend);
    const items = (cs: ReadonlyArray<readonly [string, string, string]>) => cs.map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
    const A = items(COMPONENTS.slice(0, 3));
    const B = items(COMPONENTS.slice(3));
    const ids = AGENTS.slice(0, 3);
    const ran = (id: string, config: string, list: typeof A, at: number) => store.insertRun(run(id, iso(at), {
      config_id: config, received_at: iso(at), outcomes: list.map((x) => ({ ...x, outcome: 'result_success', count: 1 })),
    }));
    for (const id of ids) {
      await store.upsertFromInventory(inventory(id, { received_at: iso(BASE_S) }));
      await setAcceptance(store, id, 'accepted', iso(BASE_S));
      await store.setExpectations(id, 'cfg-a', A, iso(BASE_S));
      await ran(id, 'cfg-a', A, BASE_S + 60);
    }
    await store.sweepCompliance(clockAt(BASE_S + 120));
    const same = async (at: number, what: string) => {
      const qs: Array<Omit<TargetNodesQuery, 'page'>> = [{ rule_id: 'r1', per_page: 2 }, { rule_id: 'r2', per_page: 5 }, { rule_id: 'r3', directive_id: 'd4', per_page: 5, state: 'applying' },
        { rule_id: 'r1', order: 'desc', per_page: 5, state: 'success' }, { rule_id: 'r2', per_page: 5, state: 'no_answer' }];
      for (const q of qs) t.same(await store.targetNodes({ ...q, page: 1 }, clockAt(at)), await store.targetNodesFresh({ ...q, page: 1 }, clockAt(at)), `${what}: ${JSON.stringify(q)}`);
    };
    const before = await keysOf(db, ids);
    t.equal(before.length, 9, 'each node in mode 0 has its keys: two directives and their rule');
    await same(BASE_S + 150, 'all in mode 0');

    // A new policy, by one node's write and by a generation's batch: applying, their keys dropped
    // and none written for their new rows.
    await store.setExpectations(ids[0]!, 'cfg-b', B, iso(BASE_S + 180));
    await store.putPolicies([{ bundle: { node_id: ids[1]!, config_id: 'cfg-b', generated_at: iso(BASE_S + 180), bundle: '{"config_id":"cfg-b"}' }, expected: B }]);
    t.same(await keysOf(db, ids), before.filter((k) => k.node_id === ids[2]), 'the keys of the nodes that went applying dropped, no other written');
    await same(BASE_S + 200, 'two applying');

    // The first run of the new policy: back in mode 0, the node's keys are its rows' again.
    await ran(ids[0]!, 'cfg-b', B, BASE_S + 240);
    const back = (await keysOf(db, [ids[0]!])).map((k) => `${k.rule_id}/${k.directive_id} ${k.share}`);
    t.same(back, ['r2/ 1', 'r2/d3 1', 'r3/ 1', 'r3/d4 1'], "the returning node's keys made from its rows, the old rules' dropped");
    await same(BASE_S + 260, 'one back');

    // A key missing for a node whose keys are read shows in the comparison.
    await db.exec(`DELETE FROM kept_targets WHERE node_id = '${ids[2]!}' AND rule_id = 'r1' AND directive_id = ''`);
    t.not(JSON.stringify(await store.targetNodes({ rule_id: 'r1', page: 1, per_page: 5 }, clockAt(BASE_S + 270))),
      JSON.stringify(await store.targetNodesFresh({ rule_id: 'r1', page: 1, per_page: 5 }, clockAt(BASE_S + 270))), 'a missing key shows');

    // Silence: every node out of mode 0 at the sweep, and its keys dropped.
    await store.sweepCompliance(clockAt(BASE_S + 2000));
    t.same(await keysOf(db, ids), [], 'no key left for the nodes gone silent');
    await same(BASE_S + 2000, 'all silent');
    await same(BASE_S + 2100, 'all silent, read later');
  });
}

function migration(t: Test, backend: Backend): void {
  t.test('a database from before migration 28 gets its keys from its rows', async (t) => {
    const db = await backend.fresh(t);
    let store = await db.open();
    for (const [i, id] of AGENTS.slice(0, 6).entries()) {
      await store.upsertFromInventory(inventory(id, { received_at: iso(BASE_S) }));
      await setAcceptance(store, id, 'accepted', iso(BASE_S));
      const items = COMPONENTS.slice(i % 3, (i % 3) + 3).map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
      await store.setExpectations(id, 'cfg-m', items, iso(BASE_S + 60));
      if (i % 3 !== 2) {
        await store.insertRun(run(id, iso(BASE_S + 120), {
          config_id: 'cfg-m', received_at: iso(BASE_S + 100 * i),
          outcomes: items.map((x, j) => ({ ...x, outcome: OUTCOMES[(i + j) % OUTCOMES.length]!, count: 1 })),
        }));
      }
    }
    await store.close();
    await db.exec(UNDO_42[db.dialect] + UNDO_41[db.dialect] + UNDO_40[db.dialect] + UNDO_39[db.dialect] + UNDO_38[db.dialect] + UNDO_37[db.dialect] + UNDO_36[db.dialect] + UNDO_35[db.dialect] + UNDO_34[db.dialect] + UNDO_33[db.dialect] + UNDO_32[db.dialect] + UNDO_31[db.dialect] + UNDO_30[db.dialect] + UNDO_29[db.dialect] + UNDO_28[db.dialect]);
    store = await db.open();
    for (const now of [BASE_S + 200, BASE_S + 700, BASE_S + 1500]) {
      const pages = [...QUERIES, ...DIRECTIVE_STATES].map(() => 1);
      t.same(await reads(store, clockAt(now), pages, true), await reads(store, clockAt(now), pages, false), `read at +${now - BASE_S} s: kept equals fresh`);
    }
    t.equal((await store.targetNodes({ rule_id: 'r1', page: 1, per_page: 10 }, clockAt(BASE_S + 200))).total, 6, 'every node under r1 counted');
  });
}

/**
 * SQLite: the agents out of mode 0 whose rows expect nothing are read from migration 40's index,
 * not by walking every such agent: a page read from the end (where that part comes first) is
 * planned through it, for a rule and for a directive. (PostgreSQL has no such index: it would
 * cost every run's update of its directive rows, see the migration.)
 */
function keylessByIndex(t: Test, backend: Backend): void {
  t.test("the silent agents expecting nothing are found by the index of such rows", async (t) => {
    const { store, db } = await setup(t, backend);
    const A = COMPONENTS.map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
    for (const id of AGENTS.slice(0, 4)) {
      await store.upsertFromInventory(inventory(id, { received_at: iso(BASE_S) }));
      await setAcceptance(store, id, 'accepted', iso(BASE_S));
      await store.setExpectations(id, 'cfg-a', A, iso(BASE_S));
    }
    await store.sweepCompliance(clockAt(BASE_S + 2000));
    const [k] = await db.rows!('SELECT silent_before, applying_after FROM kept_sweep WHERE id = 1');
    const kept = { silent_before: Number(k!.silent_before), applying_after: Number(k!.applying_after) };
    const clock = clockAt(BASE_S + 2000);
    for (const q of [{ rule_id: 'r1' }, { rule_id: 'r1', directive_id: 'd1' }]) {
      // The values written into the text, for EXPLAIN without parameters.
      const sql = targetKeptSql((i) => `__v${i}__`, complianceClassSql, targetSpec({ ...q, page: 1, per_page: 2 }), clock, kept, 2, 3, false);
      const page = sql.page(4)!;
      const text = page.text.replace(/__v(\d+)__/g, (_, i: string) => {
        const v = page.values[Number(i) - 1];
        return typeof v === 'number' ? String(v) : `'${String(v).replaceAll("'", "''")}'`;
      });
      const plan = (await db.rows!(`EXPLAIN QUERY PLAN ${text}`)).map((r) => String(r.detail)).join('\n');
      t.match(plan, /node_compliance_directives_nothing_idx/, `${JSON.stringify(q)}: planned through the index`, { plan });
    }
  });
}

// The stores side by side, and each one's tests: separate databases, and the PostgreSQL ones wait
// on the server most of their time.
t.jobs = 2;
t.test('sqlite', async (t) => {
  t.jobs = 2;
  scenario(t, sqliteBackend);
  normalOnly(t, sqliteBackend);
  migration(t, sqliteBackend);
  keylessByIndex(t, sqliteBackend);
});
if (await postgresOrSkipFile(t)) {
  t.test('postgres', async (t) => {
    t.jobs = 2;
    scenario(t, postgresBackend('capstan_targets'));
    normalOnly(t, postgresBackend('capstan_targets'));
    migration(t, postgresBackend('capstan_targets'));
  });
}
