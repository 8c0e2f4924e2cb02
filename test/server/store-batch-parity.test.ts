/**
 * insertRuns against insertRun, on both stores: the same random runs (several of one node in a
 * batch, duplicates, back-filled and incomplete runs, repairs, failures) stored in batches into
 * one store and one at a time into another, between the same policy changes, leave the same
 * runs, nodes, compliance, directive rows, changes, findings and events (ids aside), and the
 * batched store's kept counters equal the fresh sums after every step. On PostgreSQL, where a
 * batch is stored one statement per table with the directive cache in front, some steps also
 * rewrite a node's expectations or compliance rows behind the store's back, as another server
 * would: the next batch must not use what it held before.
 */
import t, { type Test } from 'tap';
import type { ComplianceClock, Store } from '@capstan/server/store/index';
import { inventory, run, setup, type Backend } from './store-suite.js';
import { postgresBackend, sqliteTemplateBackend } from './backends.js';
import { postgresOrSkipFile } from './pg.js';
import { setAcceptance } from '../helpers/node-changes.js';
import { prng } from '../helpers/prng.js';

const SEED = Number(process.env.PARITY_SEED ?? 20261202);
const STEPS = 36;
const NODES = ['p0', 'p1', 'p2', 'p3', 'p4', 'p5'];
const COMPONENTS = [
  ['r1', 'd1', 'File /etc/motd'], ['r1', 'd1', 'Service sshd'], ['r1', 'd2', 'Package vim'],
  ['r2', 'd3', 'Command check'], ['r2', 'd3', 'Sysctl'], ['r3', 'd4', 'User ops'], ['r3', 'd5', 'Cron'],
] as const;
const OUTCOMES = ['result_success', 'result_success', 'result_success', 'result_repaired', 'result_error', 'result_na', 'audit_compliant', 'audit_noncompliant'];
const BASE_S = Date.parse('2024-05-01T08:00:00Z') / 1000;
const iso = (s: number) => new Date(s * 1000).toISOString();
const clockAt = (now_s: number): ComplianceClock => ({ now_s, silence_s: 900, applying_s: 600 });

/** JSON with every numeric id left out (each store hands out its own) and object keys sorted. */
function plain(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(plain);
  if (v && typeof v === 'object' && !Buffer.isBuffer(v)) {
    return Object.fromEntries(Object.entries(v as Record<string, unknown>)
      .filter(([k, x]) => !(typeof x === 'number' && /(^|_)id$/.test(k)))
      .sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, x]) => [k, plain(x)]));
  }
  return v;
}
const sorted = (xs: unknown[]) => xs.map((x) => JSON.stringify(plain(x))).sort();

/** Everything a run moves, read back through the store. */
async function snapshot(store: Store, now_s: number) {
  const clock = clockAt(now_s);
  const nodes: Record<string, unknown> = {};
  for (const id of NODES) {
    const runs = (await store.listRuns(id, 1, 1000)).data;
    const logs = [];
    for (const r of runs) logs.push((await store.getRunLog(r.id))?.toString('base64'));
    const base = await store.getComplianceBase(id);
    const node = await store.getNode(id);
    nodes[id] = plain({
      node: node && { last_run_at: node.last_run_at, last_config_id: node.last_config_id, status: node.status, state: node.state, last_contact_at: node.last_contact_at },
      runs, logs, base: base && { ...base, run: base.run && { started_at: base.run.started_at, config_id: base.run.config_id } },
    });
  }
  return {
    nodes,
    compliance: plain(await store.complianceNodes(null, 100, clock)),
    directives: plain(await store.complianceByRuleFresh('directive', clock)),
    summary: plain(await store.complianceSummaryFresh(clock)),
    changes: sorted((await store.listChanges({}, 1, 1000)).data),
    findings: sorted((await store.listFindings({}, 1, 1000)).data),
    events: sorted((await store.listEvents({}, 10_000)).map((e) => ({ type: e.type, node_id: e.node_id, at: e.at, data: e.data }))),
  };
}

async function kept(store: Store, now_s: number) {
  const clock = clockAt(now_s);
  return { directives: await store.complianceByRule('directive', clock), rules: await store.complianceByRule('rule', clock), summary: await store.complianceSummary([], clock) };
}
async function fresh(store: Store, now_s: number) {
  const clock = clockAt(now_s);
  return { directives: await store.complianceByRuleFresh('directive', clock), rules: await store.complianceByRuleFresh('rule', clock), summary: await store.complianceSummaryFresh(clock) };
}

const resultOf = (r: { ok: boolean; result?: { inserted: boolean }; error?: unknown }) =>
  (r.ok ? (r.result!.inserted ? 'inserted' : 'duplicate') : `refused ${(r.error as { code?: string }).code}`);

function scenario(t: Test, backend: Backend): void {
  t.test('runs stored in batches equal the same runs stored one at a time', async (t) => {
    const a = await setup(t, backend);
    const b = await setup(t, backend);
    const stores = [a.store, b.store];
    const r = prng(SEED);
    let now = BASE_S;
    let seq = 0;
    for (const s of stores) {
      for (const id of NODES) {
        await s.upsertFromInventory(inventory(id, { received_at: iso(now) }));
        if (id !== 'p5') await setAcceptance(s, id, 'accepted', iso(now));
      }
    }
    const sent: ReturnType<typeof run>[] = [];
    const seen = { batches: 0, repeated: 0, duplicates: 0, behind: 0, findings: 0, changes: 0 };
    let differences = 0;
    for (let step = 0; step < STEPS; step++) {
      const op = r.int(100);
      let what: string;
      if (op < 20) {
        const id = r.pick(NODES);
        const config = `cfg-${r.int(2)}`;
        const items = COMPONENTS.filter(() => r.next() < 0.7).map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
        what = `policy ${id} ${config}`;
        for (const s of stores) await s.setExpectations(id, config, items, iso(now));
      } else if (op < 30 && a.db.dialect === 'postgres') {
        // Another server's writes between two runs of a node: its expectations and its compliance
        // rows rewritten. The second run differs from the first in one component only, so a
        // store trusting what it held would write that one row and keep the others as rewritten.
        const id = r.pick(NODES.slice(0, 5));
        what = `behind ${id}`;
        seen.behind++;
        const started = (k: number) => `${iso(now + k).slice(0, 19)}.${String(seq++ % 1000).padStart(3, '0')}Z`;
        const config = (await a.store.getNode(id))?.policy_config_id ?? 'cfg-0';
        const outcomes = (last: string) => COMPONENTS.map(([rule_id, directive_id, component]) =>
          ({ rule_id, directive_id, component, outcome: component === 'Cron' ? last : 'result_success', count: 1 }));
        const first = run(id, started(0), { config_id: config, outcomes: outcomes('result_success'), received_at: iso(now) });
        const second = run(id, started(1), { config_id: config, outcomes: outcomes('result_repaired'), received_at: iso(now + 1) });
        await a.store.insertRuns([first]);
        await b.store.insertRun(first);
        const items = COMPONENTS.filter(() => r.next() < 0.6).map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
        for (const db of [a.db, b.db]) {
          const list = `'${JSON.stringify(items)}'::jsonb`;
          await db.exec(`INSERT INTO expectation_lists (digest, components, used_at) VALUES ('rewritten:' || md5(${list}::text), ${list}, now()) ON CONFLICT DO NOTHING;
            UPDATE node_expectations SET list = 'rewritten:' || md5(${list}::text) WHERE node_id = '${id}';
            UPDATE node_compliance SET computed_at = computed_at WHERE node_id = '${id}';
            UPDATE node_compliance_directives SET success = success + 1 WHERE node_id = '${id}';`);
        }
        await a.store.insertRuns([second]);
        await b.store.insertRun(second);
        sent.push(first, second);
      } else {
        what = 'batch';
        seen.batches++;
        const batch: ReturnType<typeof run>[] = [];
        const n = 1 + r.int(10);
        for (let k = 0; k < n; k++) {
          if (sent.length > 0 && r.next() < 0.08) {
            batch.push(r.pick(sent));
            seen.duplicates++;
            continue;
          }
          const id = r.next() < 0.05 ? 'ghost' : r.pick(NODES);
          const at = now - (r.next() < 0.1 ? 3600 : 0) + k;
          const outcomes = COMPONENTS.filter(() => r.next() < 0.8).map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component, outcome: r.pick(OUTCOMES), count: 1 + r.int(2) }));
          const started = `${iso(at).slice(0, 19)}.${String(seq++ % 1000).padStart(3, '0')}Z`;
          const report = (o: (typeof outcomes)[number]) => ({ rule_id: o.rule_id, directive_id: o.directive_id, component: o.component, key_value: '', event_type: o.outcome, message: `${o.outcome} ${o.component}` });
          const changes = outcomes.filter((o) => o.outcome === 'result_repaired').map((o) => ({ ...report(o), at: started, diff: r.next() < 0.5 ? '-a\n+b' : null, diff_truncated: false }));
          const findings = outcomes.filter((o) => o.outcome === 'result_error' || o.outcome === 'audit_noncompliant').map((o) => ({ ...report(o), diff: null, diff_truncated: false }));
          seen.changes += changes.length;
          seen.findings += findings.length;
          const config = r.next() < 0.85 ? (await a.store.getNode(id))?.policy_config_id ?? 'cfg-0' : `cfg-${r.int(3)}`;
          const text = r.next() < 0.6;
          const x = run(id, started, { config_id: config, complete: r.next() < 0.9, outcomes, changes, findings, received_at: iso(now + k) });
          if (text) {
            // Kept against the node-day's base, as the ingest gives runs.
            delete x.log_compressed;
            x.log_text = Buffer.from(`log of ${id} at ${started}\n${outcomes.map((o) => `${o.component} ${o.outcome}`).join('\n')}\n`);
          }
          batch.push(x);
        }
        if (new Set(batch.map((x) => x.node_id)).size < batch.length) seen.repeated++;
        sent.push(...batch.filter((x) => x.node_id !== 'ghost'));
        const batched = (await a.store.insertRuns(batch)).map(resultOf);
        const single: string[] = [];
        for (const x of batch) single.push(await b.store.insertRun(x).then((res) => (res.inserted ? 'inserted' : 'duplicate'), (e: { code?: string }) => `refused ${e.code}`));
        if (JSON.stringify(batched) !== JSON.stringify(single)) {
          differences++;
          t.same(batched, single, `step ${step}: each run's result`);
        }
      }
      now += 60 + r.int(300);
      const [sa, sb] = [await snapshot(a.store, now), await snapshot(b.store, now)];
      if (JSON.stringify(sa) !== JSON.stringify(sb)) {
        differences++;
        if (differences < 3) t.same(sa, sb, `step ${step} (${what}), seed ${SEED}: batched equals one at a time`);
      }
      const [k, f] = [await kept(a.store, now), await fresh(a.store, now)];
      if (JSON.stringify(k) !== JSON.stringify(f)) {
        differences++;
        if (differences < 3) t.same(k, f, `step ${step} (${what}): kept counters equal the fresh sums`);
      }
    }
    t.equal(differences, 0, `${STEPS} steps, no difference`);
    t.ok(seen.batches > 10 && seen.repeated > 0 && seen.duplicates > 0 && seen.changes > 0 && seen.findings > 0, `cases met: ${JSON.stringify(seen)}`);
    if (a.db.dialect === 'postgres') t.ok(seen.behind > 0, 'writes behind the store met');
    const events = (await a.store.listEvents({}, 10_000)).map((e) => e.type);
    t.ok(events.includes('finding.opened'), 'findings were opened');

    // The comparison can fail: a directive row put wrong on one side shows.
    await a.db.exec("UPDATE node_compliance_directives SET success = success + 7 WHERE directive_id = 'd1'");
    t.not(JSON.stringify(await snapshot(a.store, now)), JSON.stringify(await snapshot(b.store, now)), 'a wrong row shows');
  });
}

t.test('sqlite', async (t) => scenario(t, sqliteTemplateBackend));
if (await postgresOrSkipFile(t)) {
  t.test('postgres', async (t) => scenario(t, postgresBackend('capstan_parity')));
}
