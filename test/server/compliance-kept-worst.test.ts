/**
 * The nodes sorted by compliance read from the kept shares (migration 27: the worst nodes, the
 * node list's compliance sort) against the same answers computed afresh over every node, on
 * both stores: after random policies (some expecting nothing), runs (complete or not, back-filled,
 * with unexpected items), deletions and re-registrations, acceptance, relay and state changes,
 * agentless nodes, expiration policies, clock moves and sweeps; read at the current moment and at
 * others (the readers' correction), at several limits, pages, orders and filters. A share put
 * wrong by hand is seen: the comparison can fail.
 */
import t, { type Test } from 'tap';
import type { ComplianceClock, NodeFilter, NodeListQuery, Store } from '@capstan/server/store/index';
import { inventory, run, setup, type Backend } from './store-suite.js';
import { postgresBackend, sqliteBackend } from './backends.js';
import { postgresOrSkipFile } from './pg.js';
import { setAcceptance } from '../helpers/node-changes.js';
import { UNDO_27, UNDO_28, UNDO_29, UNDO_30, UNDO_31, UNDO_32, UNDO_33, UNDO_34, UNDO_35, UNDO_36, UNDO_37, UNDO_38, UNDO_39, UNDO_40, UNDO_41, UNDO_42 } from '../helpers/old-schema.js';
import { prng } from '../helpers/prng.js';
import { AGENTS, BASE_S, clockAt, COMPONENTS, iso, keptWalk, OUTCOMES, settled } from '../helpers/kept-walk.js';

const SEED = Number(process.env.KEPT_SEED ?? 20261203);
const STEPS = 140;
const LIMITS = [1, 3, 8, 40];
const LISTS: Array<Omit<NodeListQuery, 'page' | 'compliance_at'>> = [
  { sort: 'compliance', order: 'asc', per_page: 5 },
  { sort: 'compliance', order: 'desc', per_page: 4 },
  { sort: 'compliance', order: 'asc', per_page: 3, filters: [{ key: 'accepted', values: ['accepted'] }] },
  { sort: 'compliance', order: 'desc', per_page: 6, filters: [{ key: 'state', values: ['stopped', 'missing'], exclude: true }, { key: 'hostname', values: ['w*'] }] },
  { sort: 'compliance', per_page: 4, filters: [{ key: 'has_agent', values: ['false'] }] as NodeFilter[] },
];

/** What each read answers, from the kept shares (`kept`) or afresh: LIMITS', then LISTS' (read together). */
function reads(store: Store, clock: ComplianceClock, pages: number[], kept: boolean): Promise<unknown[]> {
  const at = { silent_before: clock.now_s - clock.silence_s, applying_after: clock.now_s - clock.applying_s };
  return settled<unknown[]>([
    ...LIMITS.map((limit) => (kept ? store.worstNodes(limit, clock) : store.worstNodesFresh(limit, clock))),
    ...LISTS.map((q, i) => {
      const query = { ...q, page: pages[i]!, compliance_at: at };
      return kept ? store.listNodes(query) : store.listNodesFresh(query);
    }),
  ]);
}

function scenario(t: Test, backend: Backend): void {
  t.test('the nodes sorted by compliance from the kept shares equal those computed afresh', async (t) => {
    const { store, db } = await setup(t, backend);
    const r = prng(SEED);
    let compared = 0;
    let mismatches = 0;
    const seen = { zero: 0, worst: 0, forcedUnexpected: 0 };
    const compare = async (clock: ComplianceClock, step: number, what: string) => {
      const pages = LISTS.map(() => 1 + r.int(4));
      const [k, f] = await settled([reads(store, clock, pages, true), reads(store, clock, pages, false)]);
      compared++;
      const all = f[LIMITS.length - 1] as Array<{ counts: Record<string, number> }>;
      seen.worst += all.length;
      seen.zero += all.filter((n) => n.counts.success + n.counts.repaired + n.counts.audit_compliant + n.counts.not_applicable === 0).length;
      if (JSON.stringify(k) !== JSON.stringify(f)) {
        mismatches++;
        if (mismatches === 1) t.same(k, f, `step ${step} (${what}), seed ${SEED}: kept equals fresh`);
      }
    };
    const { now, forcedUnexpected } = await keptWalk(store, r, STEPS, compare);
    seen.forcedUnexpected = forcedUnexpected;

    t.equal(mismatches, 0, `${compared} comparisons, none differ`);
    t.ok(seen.worst > 0 && seen.zero > 0, `worst nodes met (${seen.worst}), at 0 % among them (${seen.zero})`);
    t.ok(seen.forcedUnexpected > 0, `nodes applying or silent with only unexpected items met (${seen.forcedUnexpected})`);

    // The comparison sees a share put wrong.
    const clock = clockAt(now);
    const pages = LISTS.map(() => 1);
    t.same(await reads(store, clock, pages, true), await reads(store, clock, pages, false), 'equal before');
    await db.exec("UPDATE kept_nodes SET share = 2 WHERE class = 'agent' AND share = (SELECT min(share) FROM kept_nodes WHERE class = 'agent')");
    t.not(JSON.stringify(await reads(store, clock, pages, true)), JSON.stringify(await reads(store, clock, pages, false)), 'a wrong share shows');
  });
}

function migration(t: Test, backend: Backend): void {
  t.test('a database from before migration 27 gets its shares from its rows', async (t) => {
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
    await db.exec(UNDO_42[db.dialect] + UNDO_41[db.dialect] + UNDO_40[db.dialect] + UNDO_39[db.dialect] + UNDO_38[db.dialect] + UNDO_37[db.dialect] + UNDO_36[db.dialect] + UNDO_35[db.dialect] + UNDO_34[db.dialect] + UNDO_33[db.dialect] + UNDO_32[db.dialect] + UNDO_31[db.dialect] + UNDO_30[db.dialect] + UNDO_29[db.dialect] + UNDO_28[db.dialect] + UNDO_27[db.dialect]);
    store = await db.open();
    for (const now of [BASE_S + 200, BASE_S + 700, BASE_S + 1500]) {
      const pages = LISTS.map(() => 1);
      t.same(await reads(store, clockAt(now), pages, true), await reads(store, clockAt(now), pages, false), `read at +${now - BASE_S} s: kept equals fresh`);
    }
    t.equal((await store.worstNodes(10, clockAt(BASE_S + 200))).length, 6, 'every node with items listed');
  });
}

// The stores side by side, and each one's tests: separate databases, and the PostgreSQL ones wait
// on the server most of their time.
t.jobs = 2;
t.test('sqlite', async (t) => {
  t.jobs = 2;
  scenario(t, sqliteBackend);
  migration(t, sqliteBackend);
});
if (await postgresOrSkipFile(t)) {
  t.test('postgres', async (t) => {
    t.jobs = 2;
    scenario(t, postgresBackend('capstan_worst'));
    migration(t, postgresBackend('capstan_worst'));
  });
}
