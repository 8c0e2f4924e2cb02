/**
 * The kept fleet compliance counters (store/compliance/kept.ts) against the same figures summed
 * afresh from every node's rows, on both stores: after random policies (one node's, or a
 * generation's batch of several), runs (complete or not, back-filled), deletions and
 * re-registrations, acceptance and relay changes, expiration policies, clock moves forward and
 * back, and sweeps — read at the current moment and at others (the readers' correction), by policy
 * group through random memberships (what generation writes), and the nodes per status, state and
 * acceptance; sweeps of one or a few nodes a step. A counter put wrong by hand is seen: the
 * comparison can fail.
 */
import t, { type Test } from 'tap';
import type { ComplianceClock, Store } from '@capstan/server/store/index';
import { inventory, run, setup, type Backend } from './store-suite.js';
import { postgresBackend, sqliteBackend } from './backends.js';
import pg from 'pg';
import { PG_URL, pgAdmin, postgresOrSkipFile } from './pg.js';
import { setAcceptance, setState, updateNode } from '../helpers/node-changes.js';
import { KEPT_LOCK_ARGS } from '@capstan/server/store/migrations/0025_kept_groups';
import { UNDO_24, UNDO_25, UNDO_26, UNDO_27, UNDO_28, UNDO_29, UNDO_30, UNDO_31, UNDO_32, UNDO_33, UNDO_34, UNDO_35, UNDO_36, UNDO_37, UNDO_38, UNDO_39, UNDO_40, UNDO_41, UNDO_42 } from '../helpers/old-schema.js';
import { prng } from '../helpers/prng.js';
import { settled } from '../helpers/kept-walk.js';

const SEED = Number(process.env.KEPT_SEED ?? 20261202);
const STEPS = 160;
const NODES = ['k00', 'k01', 'k02', 'k03', 'k04', 'k05', 'k06', 'k07', 'k08', 'k09'];
const COMPONENTS = [
  ['r1', 'd1', 'File /etc/motd'], ['r1', 'd1', 'Service sshd'], ['r1', 'd2', 'Package vim'],
  ['r2', 'd3', 'Command check'], ['r2', 'd3', 'Sysctl'], ['r3', 'd4', 'User ops'], ['r3', 'd5', 'Cron'],
] as const;
const GROUPS = ['g1', 'g2', 'g3', 'g4'];
const OUTCOMES = ['result_success', 'result_repaired', 'result_error', 'result_na', 'audit_compliant', 'audit_noncompliant'];
const BASE_S = Date.parse('2024-05-01T08:00:00Z') / 1000;
/** Five-minute runs, three missed before no answer, five minutes of grace while applying. */
const clockAt = (now_s: number): ComplianceClock => ({ now_s, silence_s: 900, applying_s: 600 });
const iso = (s: number) => new Date(s * 1000).toISOString();

// Each side's reads run together (on PostgreSQL, over the pool's connections): nothing is written meanwhile.
async function kept(store: Store, clock: ComplianceClock) {
  const [rules, directives, summary, groups, counts] = await settled([
    store.complianceByRule('rule', clock), store.complianceByRule('directive', clock), store.complianceSummary([], clock),
    store.complianceByGroup(clock), store.counts(),
  ]);
  return { rules, directives, summary, groups, counts };
}

async function fresh(store: Store, clock: ComplianceClock) {
  const [rules, directives, summary, groups, counts] = await settled([
    store.complianceByRuleFresh('rule', clock), store.complianceByRuleFresh('directive', clock), store.complianceSummaryFresh(clock),
    store.complianceByGroupFresh(clock), store.countsFresh(),
  ]);
  return { rules, directives, summary, groups, counts };
}

function scenario(t: Test, backend: Backend): void {
  t.test('kept counters equal the fresh sums through random changes', async (t) => {
    const { store, db } = await setup(t, backend);
    const r = prng(SEED);
    const states = prng(SEED + 1);
    // How many nodes a sweep moves per step: its own generator, so the walk is the same whatever it draws.
    const sweepSteps = prng(SEED + 2);
    // Whether a policy is one node's or a batch's, and the batch's other nodes: a generator of their own too.
    const batches = prng(SEED + 3);
    let now = BASE_S;
    const present = new Set<string>();
    let started = 0;
    const register = async (id: string) => {
      await store.upsertFromInventory(inventory(id, { received_at: iso(now) }));
      if (r.next() < 0.85) await setAcceptance(store, id, 'accepted', iso(now));
      present.add(id);
    };
    for (const id of NODES) await register(id);

    let compared = 0;
    let mismatches = 0;
    const seen = { applying: 0, no_answer: 0, relays: 0, moved: 0, members: 0, groups: 0 };
    const compare = async (clock: ComplianceClock, step: number, what: string) => {
      const [k, f] = await settled([kept(store, clock), fresh(store, clock)]);
      compared++;
      seen.applying += f.summary.counts.applying;
      seen.no_answer += f.summary.counts.no_answer;
      seen.relays += f.summary.relays.nodes;
      seen.groups += f.groups.length;
      if (JSON.stringify(k) !== JSON.stringify(f)) {
        mismatches++;
        if (mismatches === 1) t.same(k, f, `step ${step} (${what}), seed ${SEED}: kept equals fresh`);
      }
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
        const items = COMPONENTS.filter(() => r.next() < 0.6).map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
        const config = `cfg-${r.int(3)}`;
        const opts = r.next() < 0.2 ? { keep_last_s: r.pick([0, 600, 3600]) } : {};
        if (batches.next() < 0.5) {
          await store.setExpectations(id, config, items, iso(now), opts);
        } else {
          // A generation's batch (putPolicies): several nodes' policies in one write, whose
          // directive counters the writer moves itself on SQLite, summed by key (migration 38).
          const others = [...present].filter((o) => o !== id && batches.next() < 0.3);
          what = `policies ${[id, ...others].join(' ')}`;
          await store.putPolicies([id, ...others].map((node_id, k) => {
            const mine = k === 0 ? items : COMPONENTS.filter(() => batches.next() < 0.6).map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
            const config_id = k === 0 ? config : `cfg-${batches.int(3)}`;
            return { bundle: { node_id, config_id, generated_at: iso(now), bundle: `{"config_id":"${config_id}"}` }, expected: mine };
          }));
        }
      } else if (op < 60) {
        what = `run ${id}`;
        // Mostly new runs; now and then an older one (back-filled) or an incomplete one.
        const at = now - (r.next() < 0.15 ? 3600 : 0) - r.int(30);
        const outcomes: Array<{ rule_id: string; directive_id: string; component: string; outcome: string; count: number }> = COMPONENTS.filter(() => r.next() < 0.7).map(([rule_id, directive_id, component]) =>
          ({ rule_id, directive_id, component, outcome: r.pick(OUTCOMES), count: 1 + r.int(2) }));
        if (r.next() < 0.1) outcomes.push({ rule_id: 'r9', directive_id: 'd9', component: 'Extra', outcome: 'result_success', count: 1 });
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
      } else if (op < 84) {
        what = `relay ${id}`;
        await updateNode(store, id, { relay: r.next() < 0.5 }, iso(now)).catch(() => undefined);
      } else if (op < 87) {
        what = 'keep last';
        await store.setKeepLast(NODES.filter(() => r.next() < 0.5), r.pick([0, 300, 1800]));
      } else if (op < 91) {
        // A regeneration: some nodes' groups as generation finds them (none for a node it drops).
        const ids = NODES.filter(() => r.next() < 0.4);
        const groups = new Map(ids.filter(() => r.next() < 0.9).map((n) => [n, GROUPS.filter(() => r.next() < 0.5)]));
        what = `members of ${ids.join(' ')}`;
        seen.members += Math.max(0, await store.putGroupMembers(ids, groups));
      } else if (op < 96) {
        what = 'sweep';
        const s = await store.sweepCompliance(clockAt(now + r.int(1200) - 300), sweepSteps.pick([1, 2, 2000]));
        seen.moved += s.checked;
      } else {
        // Time alone, or a node's state changed (its own generator: the other steps' draws stay as they were).
        const to = states.pick(['running', 'stopped', 'missing', 'clock'] as const);
        what = to === 'clock' ? 'clock' : `state ${id} ${to}`;
        if (to !== 'clock') await setState(store, id, to, iso(now)).catch(() => undefined);
      }
      // Time goes by, mostly a little, now and then past the silence window.
      now += r.next() < 0.1 ? 1200 + r.int(2400) : r.int(240);
      // Both moments read together: compare draws nothing from `r`, so the walk is the same.
      const reads = [compare(clockAt(now), step, what)];
      if (step % 4 === 0) reads.push(compare(clockAt(now + r.int(4000) - 2000), step, `${what}, read at another moment`));
      await settled(reads);
    }
    await store.sweepCompliance(clockAt(now));
    await compare(clockAt(now), STEPS, 'last sweep');

    t.equal(mismatches, 0, `${compared} comparisons, none differ`);
    t.ok(seen.applying > 0 && seen.no_answer > 0, `time states met (applying ${seen.applying}, no answer ${seen.no_answer})`);
    t.ok(seen.relays > 0, 'relays met');
    t.ok(seen.moved > 0, `sweeps touched nodes (${seen.moved})`);
    t.ok(seen.members > 0 && seen.groups > 0, `memberships moved (${seen.members}) and groups counted (${seen.groups})`);

    // The comparison sees a counter put wrong.
    const before = await kept(store, clockAt(now));
    t.ok(before.directives.length > 0, 'some directive is counted');
    await db.exec("UPDATE kept_directives SET success = success + 5 WHERE class = 'agent' AND mode = 0");
    const after = await kept(store, clockAt(now));
    t.not(JSON.stringify(after), JSON.stringify(await fresh(store, clockAt(now))), 'a wrong counter shows');
    await db.exec("UPDATE kept_directives SET success = success - 5 WHERE class = 'agent' AND mode = 0");
    t.same(await kept(store, clockAt(now)), await fresh(store, clockAt(now)), 'put back, it equals again');
    await db.exec("UPDATE kept_groups SET error = error + 1 WHERE class = 'agent' AND mode = 0");
    t.not(JSON.stringify((await kept(store, clockAt(now))).groups), JSON.stringify((await fresh(store, clockAt(now))).groups), 'a wrong group counter shows');
    await db.exec("UPDATE kept_node_counts SET nodes = nodes + 1 WHERE field = 'status'");
    t.not(JSON.stringify((await kept(store, clockAt(now))).counts), JSON.stringify((await fresh(store, clockAt(now))).counts), 'a wrong node count shows');
  });
}

/** Migration 23 undone: what a database of version 22 holds (its rows, no counters). */
const UNDO_23 = {
  sqlite: `${['kept_nodes_insert', 'kept_nodes_delete', 'kept_nodes_class', 'kept_compliance_insert', 'kept_compliance_update', 'kept_compliance_delete',
    'kept_directive_insert', 'kept_directive_update', 'kept_directive_delete'].map((n) => `DROP TRIGGER ${n};`).join('\n')}
    DROP TABLE kept_sweep; DROP TABLE kept_nodes; DROP TABLE kept_fleet; DROP TABLE kept_directives; DROP TABLE kept_rules;
    DROP INDEX node_compliance_silence_idx; DROP INDEX node_compliance_applying_idx; DELETE FROM schema_version WHERE version = 23;`,
  postgres: `DROP FUNCTION kept_nodes_trg, kept_compliance_trg, kept_directives_added, kept_directives_changed, kept_directives_removed CASCADE;
    DROP FUNCTION kept_node_class;
    DROP TABLE kept_sweep, kept_nodes, kept_fleet, kept_directives, kept_rules, kept_fleet_log, kept_directives_log, kept_rules_log;
    DROP INDEX node_compliance_silence_idx, node_compliance_applying_idx; DELETE FROM schema_version WHERE version = 23;`,
};

/**
 * A sweep that moves more nodes than its step moves them in several transactions, each at most
 * `step` nodes unless one second holds more, and ends where one sweep would: the counters equal
 * the fresh sums at every moment read.
 */
function steppedSweep(t: Test, backend: Backend): void {
  t.test('a sweep moves its nodes a step at a time', async (t) => {
    const { store } = await setup(t, backend);
    await store.sweepCompliance(clockAt(BASE_S));
    const ids = ['s0', 's1', 's2', 's3', 's4', 's5', 's6'];
    for (const [i, id] of ids.entries()) {
      await store.upsertFromInventory(inventory(id, { received_at: iso(BASE_S) }));
      await setAcceptance(store, id, 'accepted', iso(BASE_S));
      const items = COMPONENTS.slice(i % 3, i % 3 + 3).map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
      await store.setExpectations(id, 'cfg-s', items, iso(BASE_S));
      // Answers a minute apart, the last two in the same second.
      const answered = BASE_S + 60 + 60 * Math.min(i, 5);
      await store.insertRun(run(id, iso(answered - 5), {
        config_id: 'cfg-s', received_at: iso(answered), outcomes: items.map((x, j) => ({ ...x, outcome: OUTCOMES[(i + j) % OUTCOMES.length]!, count: 1 })),
      }));
    }
    // Every node silent: 900 s after its answer.
    const later = clockAt(BASE_S + 60 + 300 + 900 + 1);
    t.same(await kept(store, later), await fresh(store, later), 'read ahead of the sweep, corrected');
    const s = await store.sweepCompliance(later, 2);
    t.ok(s.done, 'swept to now');
    t.ok(s.steps >= 4, `in steps (${s.steps}) of at most two nodes, the last second's two together`);
    t.ok(s.checked >= ids.length, `every node moved (${s.checked} touches)`);
    const k = await kept(store, later);
    t.equal(k.summary.nodes, ids.length);
    t.equal(k.summary.counts.no_answer, ids.length * 3, 'every expected item of every node without an answer: all silent');
    t.same(k, await fresh(store, later), 'kept equals fresh after the steps');
    t.match(await store.sweepCompliance(later, 2), { checked: 0, done: true, steps: 0, longest_step_ms: 0 }, 'a second sweep to the same moment moves nothing');
  });
}

function migration(t: Test, backend: Backend): void {
  t.test('a database from before migration 23 gets its counters from its rows', async (t) => {
    const db = await backend.fresh(t);
    let store = await db.open();
    const ids = ['m1', 'm2', 'm3', 'm4'];
    for (const id of ids) {
      await store.upsertFromInventory(inventory(id, { received_at: iso(BASE_S) }));
      if (id !== 'm4') await setAcceptance(store, id, 'accepted', iso(BASE_S));
    }
    await updateNode(store, 'm3', { relay: true }, iso(BASE_S));
    for (const [i, id] of ids.entries()) {
      const items = COMPONENTS.slice(i, i + 4).map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
      await store.setExpectations(id, 'cfg-m', items, iso(BASE_S + 60));
      if (i % 2 === 0) {
        await store.insertRun(run(id, iso(BASE_S + 120), {
          config_id: 'cfg-m', received_at: iso(BASE_S + 100 * i),
          outcomes: items.map((x, j) => ({ ...x, outcome: OUTCOMES[(i + j) % OUTCOMES.length]!, count: 1 })),
        }));
      }
    }
    await store.close();
    await db.exec(UNDO_42[db.dialect] + UNDO_41[db.dialect] + UNDO_40[db.dialect] + UNDO_39[db.dialect] + UNDO_38[db.dialect] + UNDO_37[db.dialect] + UNDO_36[db.dialect] + UNDO_35[db.dialect] + UNDO_34[db.dialect] + UNDO_33[db.dialect] + UNDO_32[db.dialect] + UNDO_31[db.dialect] + UNDO_30[db.dialect] + UNDO_29[db.dialect] + UNDO_28[db.dialect] + UNDO_27[db.dialect] + UNDO_26[db.dialect] + UNDO_25[db.dialect] + UNDO_24[db.dialect] + UNDO_23[db.dialect]);
    store = await db.open();
    for (const now of [BASE_S + 200, BASE_S + 1100, BASE_S + 5000]) {
      const k = await kept(store, clockAt(now));
      t.same(k, await fresh(store, clockAt(now)), `read at +${now - BASE_S} s`);
      t.ok(k.directives.length > 0 && k.summary.nodes === 2 && k.summary.relays.nodes === 1, 'the counters hold the stored rows');
    }
  });
}

function groupsMigration(t: Test, backend: Backend): void {
  t.test('a database from before migration 25 counts its groups from the next generation on', async (t) => {
    const db = await backend.fresh(t);
    let store = await db.open();
    const ids = ['p1', 'p2', 'p3'];
    for (const [i, id] of ids.entries()) {
      await store.upsertFromInventory(inventory(id, { received_at: iso(BASE_S) }));
      await setAcceptance(store, id, 'accepted', iso(BASE_S));
      const items = COMPONENTS.slice(i, i + 3).map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
      await store.setExpectations(id, 'cfg-p', items, iso(BASE_S + 60));
      await store.insertRun(run(id, iso(BASE_S + 120), {
        config_id: 'cfg-p', received_at: iso(BASE_S + 130), outcomes: items.map((x, j) => ({ ...x, outcome: OUTCOMES[(i + j) % OUTCOMES.length]!, count: 1 })),
      }));
    }
    await store.close();
    await db.exec(UNDO_42[db.dialect] + UNDO_41[db.dialect] + UNDO_40[db.dialect] + UNDO_39[db.dialect] + UNDO_38[db.dialect] + UNDO_37[db.dialect] + UNDO_36[db.dialect] + UNDO_35[db.dialect] + UNDO_34[db.dialect] + UNDO_33[db.dialect] + UNDO_32[db.dialect] + UNDO_31[db.dialect] + UNDO_30[db.dialect] + UNDO_29[db.dialect] + UNDO_28[db.dialect] + UNDO_27[db.dialect] + UNDO_26[db.dialect] + UNDO_25[db.dialect]);
    store = await db.open();
    const at = clockAt(BASE_S + 200);
    t.same(await store.complianceByGroup(at), [], 'no membership yet: no group counted');
    t.same(await store.counts(), await store.countsFresh(), 'the node counts made from the stored nodes');
    t.match(await store.counts(), { by_acceptance: { accepted: 3 } });
    t.equal(await store.putGroupMembers(ids, new Map([['p1', ['g1', 'g2']], ['p2', ['g2']], ['p3', ['g1']]])), 4, 'four memberships written');
    t.equal(await store.putGroupMembers(ids, new Map([['p1', ['g2', 'g1']], ['p2', ['g2']], ['p3', ['g1']]])), 0, 'the same again writes nothing');
    const k = await store.complianceByGroup(at);
    t.same(k, await store.complianceByGroupFresh(at), 'kept equals fresh');
    t.same(k.map((g) => [g.group_id, g.nodes]), [['g1', 2], ['g2', 2]]);
    await store.deleteNode('p1', iso(BASE_S + 300));
    t.same(await store.counts(), await store.countsFresh(), 'node counts after a deletion');
    t.same((await store.complianceByGroup(at)).map((g) => [g.group_id, g.nodes]), [['g1', 1], ['g2', 1]], 'a deleted node leaves its groups');
    t.same(await store.complianceByGroup(at), await store.complianceByGroupFresh(at));
  });
}

/**
 * PostgreSQL: a membership write locks the rows of the nodes it moves, not the whole fleet. A
 * transaction holding one node's row and the kept lock shared (an ingest batch in flight) keeps
 * that node's membership waiting until it commits, and nobody else's.
 */
function membershipLocks(t: Test, backend: Backend): void {
  t.test('a membership write waits for the nodes it moves, not for the fleet', async (t) => {
    const db = await backend.fresh(t);
    const store = await db.open();
    const ids = ['p1', 'p2', 'p3'];
    for (const id of ids) {
      await store.upsertFromInventory(inventory(id, { received_at: iso(BASE_S) }));
      await setAcceptance(store, id, 'accepted', iso(BASE_S));
    }
    const other = new pg.Client({ connectionString: PG_URL, options: `-c search_path=${db.schema!}` });
    await other.connect();
    t.teardown(() => other.end());
    const otherPid = Number((await other.query('SELECT pg_backend_pid() AS pid')).rows[0].pid);
    await other.query('BEGIN');
    await other.query("SELECT id FROM nodes WHERE id = 'p2' FOR NO KEY UPDATE");
    await other.query(`SELECT pg_advisory_xact_lock_shared(${KEPT_LOCK_ARGS})`);
    t.equal(await store.putGroupMembers(['p1', 'p3'], new Map([['p1', ['g1']], ['p3', ['g1', 'g2']]])), 3,
      'the memberships of nodes nobody holds are written while another writer is in flight');
    let done = false;
    const held = store.putGroupMembers(['p2'], new Map([['p2', ['g2']]])).finally(() => {
      done = true;
    });
    // Bounded poll: the write is seen waiting on p2's row before that row is let go.
    const until = Date.now() + 10_000;
    let waiting = false;
    while (!waiting && Date.now() < until) {
      const { rows } = await pgAdmin((c) => c.query('SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))', [otherPid]));
      waiting = rows.length > 0;
      if (!waiting) await new Promise((r) => setImmediate(r));
    }
    t.ok(waiting && !done, "the write of the held node's membership waits for its row");
    await other.query('COMMIT');
    t.equal(await held, 1, 'and is written once the row is let go');
    const at = clockAt(BASE_S + 200);
    t.same(await store.complianceByGroup(at), await store.complianceByGroupFresh(at), 'kept equals fresh');
    t.same((await store.complianceByGroup(at)).map((g) => [g.group_id, g.nodes]), [['g1', 2], ['g2', 2]]);
  });
}

// The stores side by side, and each one's tests: separate databases, and the PostgreSQL ones wait
// on the server most of their time.
t.jobs = 2;
t.test('sqlite', async (t) => {
  t.jobs = 3;
  scenario(t, sqliteBackend);
  steppedSweep(t, sqliteBackend);
  migration(t, sqliteBackend);
  groupsMigration(t, sqliteBackend);
});
if (await postgresOrSkipFile(t)) {
  t.test('postgres', async (t) => {
    t.jobs = 4;
    scenario(t, postgresBackend('capstan_kept'));
    steppedSweep(t, postgresBackend('capstan_kept'));
    migration(t, postgresBackend('capstan_kept'));
    groupsMigration(t, postgresBackend('capstan_kept'));
    membershipLocks(t, postgresBackend('capstan_kept'));
  });
}
