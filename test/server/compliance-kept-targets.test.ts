/**
 * A rule's nodes read from the kept keys (migration 28: the drill-down from a rule or a directive
 * to its nodes) against the same pages judged afresh over every node under the rule, on both
 * stores: after random policies (some expecting nothing), runs (complete or not, back-filled,
 * with unexpected items), deletions and re-registrations, acceptance, relay and state changes,
 * agentless nodes, expiration policies, clock moves and sweeps; read at the current moment and at
 * others (the readers' correction), for rules, directives and states, both orders, several pages
 * and a page past the end. A key put wrong by hand is seen: the comparison can fail.
 */
import t, { type Test } from 'tap';
import type { ComplianceClock, Store, TargetNodesQuery } from '@capstan/server/store/index';
import { inventory, run, setup, type Backend } from './store-suite.js';
import { postgresBackend, sqliteBackend } from './backends.js';
import { postgresOrSkipFile } from './pg.js';
import { setAcceptance, setState, updateNode } from '../helpers/node-changes.js';
import { UNDO_28 } from '../helpers/old-schema.js';
import { prng } from '../helpers/prng.js';

const SEED = Number(process.env.KEPT_SEED ?? 20261204);
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

/** What each drill-down answers, from the kept keys (`kept`) or afresh. */
async function reads(store: Store, clock: ComplianceClock, pages: number[], kept: boolean) {
  const out: unknown[] = [];
  for (const [i, q] of QUERIES.entries()) {
    const query = { ...q, page: pages[i]! };
    out.push(kept ? await store.targetNodes(query, clock) : await store.targetNodesFresh(query, clock));
  }
  return out;
}

function scenario(t: Test, backend: Backend): void {
  t.test("a rule's nodes from the kept keys equal those judged afresh", async (t) => {
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
    const seen = { rows: 0, zero: 0, keyless: 0, applying: 0, noAnswer: 0, forcedUnexpected: 0 };
    const compare = async (clock: ComplianceClock, step: number, what: string) => {
      const pages = QUERIES.map(() => 1 + r.int(4));
      const [k, f] = [await reads(store, clock, pages, true), await reads(store, clock, pages, false)];
      compared++;
      // Every node under r1 on one page: what the pages met.
      const all = (await store.targetNodesFresh({ rule_id: 'r1', page: 1, per_page: 100 }, clock)).data;
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
    t.ok(seen.rows > 0 && seen.zero > 0 && seen.keyless > 0, `nodes under r1 met (${seen.rows}), at 0 % (${seen.zero}), without item (${seen.keyless})`);
    t.ok(seen.applying > 0 && seen.noAnswer > 0, `applying (${seen.applying}) and silent (${seen.noAnswer}) nodes met`);
    t.ok(seen.forcedUnexpected > 0, `nodes applying or silent with only unexpected items met (${seen.forcedUnexpected})`);

    // The comparison sees a share put wrong.
    const clock = clockAt(now);
    const pages = QUERIES.map(() => 1);
    t.same(await reads(store, clock, pages, true), await reads(store, clock, pages, false), 'equal before');
    // The first node of r1's first page moved last (every key may be equal: ties go by id).
    await db.exec(`UPDATE kept_targets SET share = 2 WHERE rule_id = 'r1' AND directive_id = '' AND node_id = (SELECT node_id FROM kept_targets
      WHERE rule_id = 'r1' AND directive_id = '' AND share IS NOT NULL ORDER BY share, node_id LIMIT 1)`);
    t.not(JSON.stringify(await reads(store, clock, pages, true)), JSON.stringify(await reads(store, clock, pages, false)), 'a wrong key shows');
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
    await db.exec(UNDO_28[db.dialect]);
    store = await db.open();
    for (const now of [BASE_S + 200, BASE_S + 700, BASE_S + 1500]) {
      const pages = QUERIES.map(() => 1);
      t.same(await reads(store, clockAt(now), pages, true), await reads(store, clockAt(now), pages, false), `read at +${now - BASE_S} s: kept equals fresh`);
    }
    t.equal((await store.targetNodes({ rule_id: 'r1', page: 1, per_page: 10 }, clockAt(BASE_S + 200))).total, 6, 'every node under r1 counted');
  });
}

t.test('sqlite', async (t) => {
  scenario(t, sqliteBackend);
  migration(t, sqliteBackend);
});
if (await postgresOrSkipFile(t)) {
  t.test('postgres', async (t) => {
    scenario(t, postgresBackend('capstan_targets'));
    migration(t, postgresBackend('capstan_targets'));
  });
}
