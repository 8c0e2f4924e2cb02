/**
 * The changes histogram read from its kept counters (migration 26, store/changes/kept.ts) against
 * the same histogram counted afresh, on both stores: after random runs with changes stored one
 * at a time and in batches (back-filled ones relabel their successor's changes), retention
 * deletions in batches, node deletions (their changes go by cascade) and re-registrations, and
 * sweeps that fold PostgreSQL's log — with every filter the API takes (time bounds on and off
 * the hour, rules, label; nodes and directives, which are counted afresh), by hour and by day.
 * A database from before the migration gets its counters from its changes; a counter put wrong
 * by hand shows.
 */
import t, { type Test } from 'tap';
import type { ChangeQuery, ComplianceClock, RunInsert, Store } from '@capstan/server/store/index';
import { inventory, run, setup, type Backend } from './store-suite.js';
import { postgresBackend, sqliteBackend } from './backends.js';
import { pgAdmin, postgresOrSkipFile } from './pg.js';
import { setAcceptance } from '../helpers/node-changes.js';
import { UNDO_26, UNDO_27, UNDO_28, UNDO_29, UNDO_30, UNDO_31, UNDO_32, UNDO_33, UNDO_34, UNDO_35, UNDO_36, UNDO_37, UNDO_38, UNDO_39, UNDO_40, UNDO_41, UNDO_42 } from '../helpers/old-schema.js';
import { prng } from '../helpers/prng.js';
import { settled } from '../helpers/kept-walk.js';

const SEED = Number(process.env.CHANGES_SEED ?? 20261202);
const STEPS = 60;
const NODES = ['c0', 'c1', 'c2', 'c3', 'c4', 'c5'];
const COMPONENTS = [
  ['r1', 'd1', 'File /etc/motd'], ['r1', 'd2', 'Service sshd'], ['r2', 'd3', 'Package vim'], ['r2', 'd3', 'Sysctl'], ['r3', 'd4', 'Cron'],
] as const;
const HOUR = 3600;
/** The changes' times spread over three days from here (whole hours and days cut through them). */
const BASE_S = Date.parse('2024-05-01T06:00:00Z') / 1000;
const SPAN_S = 3 * 24 * HOUR;
const iso = (s: number) => new Date(s * 1000).toISOString();
const clockAt = (now_s: number): ComplianceClock => ({ now_s, silence_s: 900, applying_s: 600 });

/** The time bounds a query may take: none, on an hour, inside an hour (and past either end). */
function bounds(r: ReturnType<typeof prng>): Array<string | undefined> {
  const hour = BASE_S + HOUR * r.int(SPAN_S / HOUR);
  return [undefined, iso(hour), iso(hour + 1 + r.int(HOUR - 1)), iso(BASE_S - 2 * HOUR), iso(BASE_S + SPAN_S + 2 * HOUR)];
}

/** Every combination of the filters the API takes, with `from`/`to` drawn from `r`. */
function queries(r: ReturnType<typeof prng>, all: boolean): ChangeQuery[] {
  const out: ChangeQuery[] = [];
  const rules: Array<string[] | undefined> = [undefined, ['r1'], ['r1', 'r3'], [], ['r9']];
  const labels = [undefined, 'intentional', 'corrective'] as const;
  const nodes: Array<string[] | undefined> = [undefined, ['c1', 'c4']];
  const directives: Array<string[] | undefined> = [undefined, ['d3']];
  const froms = bounds(r);
  const tos = bounds(r);
  for (const from of froms) {
    for (const to of tos) {
      for (const rule_ids of rules) {
        for (const label of labels) {
          for (const node_ids of nodes) {
            for (const directive_ids of directives) {
              if (!all && r.next() > 0.03) continue;
              out.push({
                ...(from !== undefined && { from }), ...(to !== undefined && { to }), ...(rule_ids && { rule_ids }), ...(label && { label }),
                ...(node_ids && { node_ids }), ...(directive_ids && { directive_ids }),
              });
            }
          }
        }
      }
    }
  }
  // A range within one hour, and one ending where it starts.
  const h = BASE_S + HOUR * (1 + r.int(SPAN_S / HOUR - 2));
  out.push({ from: iso(h + 60), to: iso(h + 1800) }, { from: iso(h), to: iso(h) }, { from: iso(h + 1800), to: iso(h + 2 * HOUR + 60) });
  return out;
}

/**
 * Each query by hour and by day, kept and afresh, compared in that order. The reads run together
 * (on PostgreSQL, over the pool's connections: most of a read is waiting for the server); nothing
 * is written while they run.
 */
async function differences(store: Store, qs: ChangeQuery[], report: (q: ChangeQuery, by: string, kept: unknown, fresh: unknown) => void): Promise<number> {
  const pairs = qs.flatMap((q) => (['hour', 'day'] as const).map((by) => ({ q, by })));
  const answers = await settled(pairs.map(({ q, by }) => settled([store.changesHistogram(q, by), store.changesHistogramFresh(q, by)])));
  let n = 0;
  for (const [i, { q, by }] of pairs.entries()) {
    const [k, f] = answers[i]!;
    if (JSON.stringify(k) !== JSON.stringify(f)) {
      n++;
      report(q, by, k, f);
    }
  }
  return n;
}

function scenario(t: Test, backend: Backend): void {
  t.test('the kept histogram equals the fresh count through random ingests and deletions', async (t) => {
    const { store, db } = await setup(t, backend);
    const r = prng(SEED);
    const present = new Set<string>();
    const register = async (id: string) => {
      await store.upsertFromInventory(inventory(id, { received_at: iso(BASE_S) }));
      await setAcceptance(store, id, 'accepted', iso(BASE_S));
      present.add(id);
    };
    for (const id of NODES) await register(id);
    let seq = 0;
    /** A run of `id` at a random time of the span (so some are back-filled), with its changes at and after its start. */
    const randomRun = (id: string): RunInsert => {
      const start = BASE_S + r.int(SPAN_S);
      const started = `${iso(start).slice(0, 19)}.${String(seq++ % 1000).padStart(3, '0')}Z`;
      const repaired = COMPONENTS.filter(() => r.next() < 0.5);
      const changes = repaired.map(([rule_id, directive_id, component]) => ({
        rule_id, directive_id, component, key_value: '', event_type: 'result_repaired', message: `repaired ${component}`,
        // Mostly seconds after the start; now and then across the next hour.
        at: iso(start + (r.next() < 0.2 ? HOUR - 30 + r.int(120) : r.int(90))), diff: null, diff_truncated: false,
      }));
      return run(id, started, {
        config_id: `cfg-${r.int(2)}`, received_at: iso(start + 5), changes,
        outcomes: COMPONENTS.map(([rule_id, directive_id, component]) =>
          ({ rule_id, directive_id, component, outcome: repaired.some((x) => x[2] === component) ? 'result_repaired' : 'result_success', count: 1 })),
      });
    };

    const seen = { runs: 0, batches: 0, retention: 0, deleted: 0, sweeps: 0, intentional: 0, corrective: 0, compared: 0 };
    let mismatches = 0;
    const report = (step: number, what: string) => (q: ChangeQuery, by: string, kept: unknown, fresh: unknown) => {
      mismatches++;
      if (mismatches <= 2) t.same(kept, fresh, `step ${step} (${what}), seed ${SEED}: ${by} ${JSON.stringify(q)}`);
    };
    for (let step = 0; step < STEPS; step++) {
      const op = r.int(100);
      let what: string;
      const live = [...present];
      if (op < 35 && live.length > 0) {
        what = 'run';
        await store.insertRun(randomRun(r.pick(live)));
        seen.runs++;
      } else if (op < 65) {
        // A batch: several runs of one node among them, a node deleted meanwhile refused.
        what = 'batch';
        const batch = Array.from({ length: 1 + r.int(8) }, () => randomRun(r.pick(NODES)));
        await store.insertRuns(batch);
        seen.batches++;
      } else if (op < 77) {
        what = 'retention';
        seen.retention += await store.deleteChangesBefore(iso(BASE_S + r.int(SPAN_S)), 1 + r.int(20));
      } else if (op < 87 && live.length > 0) {
        const id = r.pick(live);
        what = `delete ${id}`;
        await store.deleteNode(id, iso(BASE_S + SPAN_S));
        present.delete(id);
        seen.deleted++;
      } else if (op < 93) {
        what = 'register';
        for (const id of NODES) if (!present.has(id)) await register(id);
      } else {
        what = 'sweep';
        await store.sweepCompliance(clockAt(BASE_S + SPAN_S));
        seen.sweeps++;
      }
      const qs = queries(r, false);
      seen.compared += qs.length * 2;
      const [, all] = await settled([differences(store, qs, report(step, what)), store.changesHistogramFresh({}, 'day')]);
      seen.intentional += all.reduce((s, b) => s + b.intentional, 0);
      seen.corrective += all.reduce((s, b) => s + b.corrective, 0);
    }
    // Every combination once at the end, before and after a sweep (PostgreSQL: log, then counters).
    for (const when of ['before the last sweep', 'after it']) {
      const qs = queries(r, true);
      seen.compared += qs.length * 2;
      await differences(store, qs, report(STEPS, when));
      await store.sweepCompliance(clockAt(BASE_S + SPAN_S));
    }
    t.equal(mismatches, 0, `${seen.compared} comparisons, none differ`);
    t.ok(seen.runs > 5 && seen.batches > 5 && seen.retention > 0 && seen.deleted > 0 && seen.sweeps > 0 && seen.intentional > 0 && seen.corrective > 0,
      `cases met: ${JSON.stringify(seen)}`);
    if (db.dialect === 'postgres') {
      const left = await pgAdmin(async (c) => (await c.query(`SELECT (SELECT count(*) FROM kept_changes_log) AS log,
        (SELECT count(*) FROM kept_changes WHERE n = 0) + (SELECT count(*) FROM kept_change_rules WHERE n = 0) AS zero`)).rows[0] as { log: string; zero: string }, db.schema);
      t.same([Number(left.log), Number(left.zero)], [0, 0], 'the sweep folded the log and dropped the counters at zero');
    }

    // A counter put wrong shows: the comparison can fail.
    const q: ChangeQuery = { from: iso(BASE_S), to: iso(BASE_S + SPAN_S) };
    t.same(await store.changesHistogram(q, 'day'), await store.changesHistogramFresh(q, 'day'));
    await db.exec('UPDATE kept_changes SET n = n + 1');
    t.not(JSON.stringify(await store.changesHistogram(q, 'day')), JSON.stringify(await store.changesHistogramFresh(q, 'day')), 'a wrong counter shows');
    await db.exec("UPDATE kept_change_rules SET n = n + 1 WHERE rule_id = 'r2'");
    const byRule: ChangeQuery = { ...q, rule_ids: ['r2'] };
    t.not(JSON.stringify(await store.changesHistogram(byRule, 'hour')), JSON.stringify(await store.changesHistogramFresh(byRule, 'hour')), 'a wrong rule counter shows');
  });
}

function migration(t: Test, backend: Backend): void {
  t.test('a database from before migration 26 gets its counters from its changes', async (t) => {
    const db = await backend.fresh(t);
    let store = await db.open();
    const r = prng(SEED + 1);
    for (const id of ['m1', 'm2']) {
      await store.upsertFromInventory(inventory(id, { received_at: iso(BASE_S) }));
      await setAcceptance(store, id, 'accepted', iso(BASE_S));
      for (let k = 0; k < 6; k++) {
        const start = BASE_S + r.int(SPAN_S);
        const [rule_id, directive_id, component] = r.pick(COMPONENTS);
        await store.insertRun(run(id, iso(start), {
          config_id: `cfg-${r.int(2)}`, received_at: iso(start),
          changes: [{ rule_id, directive_id, component, key_value: '', event_type: 'result_repaired', message: 'repaired', at: iso(start + 1), diff: null, diff_truncated: false }],
        }));
      }
    }
    await store.close();
    // The migrations after it undone first: the database is then at 25.
    await db.exec(UNDO_42[db.dialect] + UNDO_41[db.dialect] + UNDO_40[db.dialect] + UNDO_39[db.dialect] + UNDO_38[db.dialect] + UNDO_37[db.dialect] + UNDO_36[db.dialect] + UNDO_35[db.dialect] + UNDO_34[db.dialect] + UNDO_33[db.dialect] + UNDO_32[db.dialect] + UNDO_31[db.dialect] + UNDO_30[db.dialect] + UNDO_29[db.dialect] + UNDO_28[db.dialect] + UNDO_27[db.dialect] + UNDO_26[db.dialect]);
    store = await db.open();
    const qs: ChangeQuery[] = [{}, { rule_ids: ['r1', 'r2'] }, { from: iso(BASE_S + 1800), label: 'corrective' }, { to: iso(BASE_S + 2 * 24 * HOUR) }];
    for (const q of qs) {
      for (const by of ['hour', 'day'] as const) t.same(await store.changesHistogram(q, by), await store.changesHistogramFresh(q, by), `${by} ${JSON.stringify(q)}`);
    }
    const all = await store.changesHistogram({}, 'day');
    t.equal(all.reduce((s, b) => s + b.intentional + b.corrective, 0), 12, 'every change counted');
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
    scenario(t, postgresBackend('capstan_changes_kept'));
    migration(t, postgresBackend('capstan_changes_kept'));
  });
}
