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
import { setAcceptance, setState, updateNode } from '../helpers/node-changes.js';
import { UNDO_27, UNDO_28 } from '../helpers/old-schema.js';
import { prng } from '../helpers/prng.js';

const SEED = Number(process.env.KEPT_SEED ?? 20261203);
const STEPS = 140;
const AGENTS = Array.from({ length: 14 }, (_, i) => `w${String(i).padStart(2, '0')}`);
const MANUAL = ['m0', 'm1', 'm2'];
const NODES = [...AGENTS, ...MANUAL];
const COMPONENTS = [
  ['r1', 'd1', 'File /etc/motd'], ['r1', 'd1', 'Service sshd'], ['r1', 'd2', 'Package vim'],
  ['r2', 'd3', 'Command check'], ['r2', 'd3', 'Sysctl'], ['r3', 'd4', 'User ops'],
] as const;
const OUTCOMES = ['result_success', 'result_repaired', 'result_error', 'result_na', 'audit_compliant', 'audit_noncompliant'];
const BASE_S = Date.parse('2024-05-01T08:00:00Z') / 1000;
const clockAt = (now_s: number): ComplianceClock => ({ now_s, silence_s: 900, applying_s: 600 });
const iso = (s: number) => new Date(s * 1000).toISOString();
const LIMITS = [1, 3, 8, 40];
const LISTS: Array<Omit<NodeListQuery, 'page' | 'compliance_at'>> = [
  { sort: 'compliance', order: 'asc', per_page: 5 },
  { sort: 'compliance', order: 'desc', per_page: 4 },
  { sort: 'compliance', order: 'asc', per_page: 3, filters: [{ key: 'accepted', values: ['accepted'] }] },
  { sort: 'compliance', order: 'desc', per_page: 6, filters: [{ key: 'state', values: ['stopped', 'missing'], exclude: true }, { key: 'hostname', values: ['w*'] }] },
  { sort: 'compliance', per_page: 4, filters: [{ key: 'has_agent', values: ['false'] }] as NodeFilter[] },
];

/** What each read answers, from the kept shares (`kept`) or afresh. */
async function reads(store: Store, clock: ComplianceClock, pages: number[], kept: boolean) {
  const at = { silent_before: clock.now_s - clock.silence_s, applying_after: clock.now_s - clock.applying_s };
  const out: unknown[] = [];
  for (const limit of LIMITS) out.push(kept ? await store.worstNodes(limit, clock) : await store.worstNodesFresh(limit, clock));
  for (const [i, q] of LISTS.entries()) {
    const query = { ...q, page: pages[i]!, compliance_at: at };
    out.push(kept ? await store.listNodes(query) : await store.listNodesFresh(query));
  }
  return out;
}

function scenario(t: Test, backend: Backend): void {
  t.test('the nodes sorted by compliance from the kept shares equal those computed afresh', async (t) => {
    const { store, db } = await setup(t, backend);
    const r = prng(SEED);
    let now = BASE_S;
    const present = new Set<string>();
    let started = 0;
    const register = async (id: string) => {
      if (MANUAL.includes(id)) await store.createNode({ id, hostname: `${id}.example.com` });
      else await store.upsertFromInventory(inventory(id, { received_at: iso(now) }));
      if (r.next() < 0.85) await setAcceptance(store, id, 'accepted', iso(now));
      present.add(id);
    };
    for (const id of NODES) await register(id);

    let compared = 0;
    let mismatches = 0;
    const seen = { zero: 0, worst: 0, forcedUnexpected: 0 };
    const compare = async (clock: ComplianceClock, step: number, what: string) => {
      const pages = LISTS.map(() => 1 + r.int(4));
      const [k, f] = [await reads(store, clock, pages, true), await reads(store, clock, pages, false)];
      compared++;
      const all = f[LIMITS.length - 1] as Array<{ counts: Record<string, number> }>;
      seen.worst += all.length;
      seen.zero += all.filter((n) => n.counts.success + n.counts.repaired + n.counts.audit_compliant + n.counts.not_applicable === 0).length;
      if (JSON.stringify(k) !== JSON.stringify(f)) {
        mismatches++;
        if (mismatches === 1) t.same(k, f, `step ${step} (${what}), seed ${SEED}: kept equals fresh`);
      }
    };
    // Nodes the two sorts treat apart: applying or silent at `clock` with unexpected items alone.
    const forcedUnexpected = async (clock: ComplianceClock) => {
      const stored = await store.complianceNodes(null, 100, { now_s: clock.now_s, silence_s: 1e10, applying_s: -1e10 });
      const judged = new Map((await store.complianceNodes(null, 100, clock)).map((n) => [n.node_id, n]));
      return stored.filter((n) => n.class === 'agent' && n.counts.unexpected > 0
        && Object.values(n.counts).reduce((a, b) => a + b, 0) === n.counts.unexpected
        && judged.get(n.node_id)!.counts.unexpected === 0).length;
    };

    for (let step = 0; step < STEPS; step++) {
      const id = r.pick(NODES);
      const op = r.int(100);
      let what: string;
      if (!present.has(id)) {
        what = `register ${id}`;
        await register(id);
      } else if (op < 25) {
        what = `policy ${id}`;
        // Now and then a policy expecting nothing: a run's items are then all unexpected.
        const items = r.next() < 0.15 ? [] : COMPONENTS.filter(() => r.next() < 0.6).map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
        await store.setExpectations(id, `cfg-${r.int(3)}`, items, iso(now), r.next() < 0.2 ? { keep_last_s: r.pick([0, 600, 3600]) } : {});
      } else if (op < 62) {
        what = `run ${id}`;
        const at = now - (r.next() < 0.15 ? 3600 : 0) - r.int(30);
        const outcomes: Array<{ rule_id: string; directive_id: string; component: string; outcome: string; count: number }> = COMPONENTS.filter(() => r.next() < 0.6)
          .map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component, outcome: r.pick(OUTCOMES), count: 1 }));
        if (r.next() < 0.3) outcomes.push({ rule_id: 'r9', directive_id: 'd9', component: 'Extra', outcome: r.pick(OUTCOMES), count: 1 });
        // Now and then a report type that is not RUDDER's alone: unexpected, even with nothing expected.
        if (r.next() < 0.15) outcomes.splice(0, outcomes.length, { rule_id: 'r9', directive_id: 'd9', component: 'Odd', outcome: 'result_odd', count: 1 });
        const config = (await store.getNode(id))?.policy_config_id ?? null;
        await store.insertRun(run(id, `${iso(at).slice(0, 19)}.${String(started++ % 1000).padStart(3, '0')}Z`, {
          config_id: r.next() < 0.8 ? config ?? 'cfg-x' : `cfg-${r.int(3)}`, complete: r.next() < 0.9, outcomes, received_at: iso(now),
        }));
      } else if (op < 68) {
        what = `delete ${id}`;
        await store.deleteNode(id, iso(now));
        present.delete(id);
      } else if (op < 76) {
        const to = r.pick(['accepted', 'refused', 'pending'] as const);
        what = `acceptance ${id} ${to}`;
        await setAcceptance(store, id, to, iso(now)).catch(() => undefined);
      } else if (op < 82) {
        what = `relay ${id}`;
        await updateNode(store, id, { relay: r.next() < 0.5 }, iso(now)).catch(() => undefined);
      } else if (op < 86) {
        const to = r.pick(['running', 'stopped', 'missing']);
        what = `state ${id} ${to}`;
        await setState(store, id, to, iso(now)).catch(() => undefined);
      } else if (op < 89) {
        what = 'keep last';
        await store.setKeepLast(NODES.filter(() => r.next() < 0.5), r.pick([0, 300, 1800]));
      } else if (op < 95) {
        what = 'sweep';
        await store.sweepCompliance(clockAt(now + r.int(1200) - 300));
      } else {
        what = 'clock';
      }
      // Time goes by, mostly a little, now and then past the silence window.
      now += r.next() < 0.1 ? 1200 + r.int(2400) : r.int(240);
      await compare(clockAt(now), step, what);
      if (step % 3 === 0) await compare(clockAt(now + r.int(4000) - 2000), step, `${what}, read at another moment`);
      seen.forcedUnexpected += await forcedUnexpected(clockAt(now));
    }
    await store.sweepCompliance(clockAt(now));
    await compare(clockAt(now), STEPS, 'last sweep');

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
    await db.exec(UNDO_28[db.dialect] + UNDO_27[db.dialect]);
    store = await db.open();
    for (const now of [BASE_S + 200, BASE_S + 700, BASE_S + 1500]) {
      const pages = LISTS.map(() => 1);
      t.same(await reads(store, clockAt(now), pages, true), await reads(store, clockAt(now), pages, false), `read at +${now - BASE_S} s: kept equals fresh`);
    }
    t.equal((await store.worstNodes(10, clockAt(BASE_S + 200))).length, 6, 'every node with items listed');
  });
}

t.test('sqlite', async (t) => {
  scenario(t, sqliteBackend);
  migration(t, sqliteBackend);
});
if (await postgresOrSkipFile(t)) {
  t.test('postgres', async (t) => {
    scenario(t, postgresBackend('capstan_worst'));
    migration(t, postgresBackend('capstan_worst'));
  });
}
