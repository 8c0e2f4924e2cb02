/**
 * A generation's batch (putPolicies) recomputes its nodes' compliance set-based on SQLite: the
 * rows, findings, events and kept counters must be what one setExpectations per node gives. Two
 * stores take the same random registrations, runs (some failing, so findings open and close) and
 * policies, one through putPolicies batches and one node by node; every policy has a config id
 * new to the node, so both recompute every node. The kept counters must also equal the fresh sums.
 */
import t from 'tap';
import type { ComplianceClock, PolicyWrite, Store } from '@capstan/server/store/index';
import { inventory, run, setup } from './store-suite.js';
import { sqliteBackend } from './backends.js';
import { setAcceptance } from '../helpers/node-changes.js';
import { prng } from '../helpers/prng.js';

const NODES = Array.from({ length: 24 }, (_, i) => `b${String(i).padStart(2, '0')}`);
const COMPONENTS = [
  ['r1', 'd1', 'File /etc/motd'], ['r1', 'd1', 'Service sshd'], ['r1', 'd2', 'Package vim'],
  ['r2', 'd3', 'Command check'], ['r2', 'd3', 'Sysctl'], ['r3', 'd4', 'User ops'], ['r3', 'd5', 'Cron'],
] as const;
const OUTCOMES = ['result_success', 'result_repaired', 'result_error', 'result_na', 'audit_compliant', 'audit_noncompliant'];
const BASE_S = Date.parse('2024-05-01T08:00:00Z') / 1000;
const clockAt = (now_s: number): ComplianceClock => ({ now_s, silence_s: 900, applying_s: 600 });
const iso = (s: number) => new Date(s * 1000).toISOString();

async function snapshot(store: Store, clock: ComplianceClock) {
  const nodes = [];
  for (const id of NODES) nodes.push(await store.getComplianceBase(id));
  return {
    nodes,
    list: await store.complianceNodes(null, 1000, clock),
    directives: await store.complianceByRule('directive', clock),
    rules: await store.complianceByRule('rule', clock),
    summary: await store.complianceSummary([], clock),
    findings: (await store.listFindings({}, 1, 1000)).data,
    events: (await store.listEvents({}, 1000)).map(({ id: _id, ...e }) => e),
  };
}

/** Drive one store; `batch` chooses putPolicies or setExpectations per node. Returns a snapshot per round. */
async function drive(store: Store, batch: boolean) {
  const r = prng(20261202);
  let now = BASE_S;
  let started = 0;
  for (const id of NODES) {
    await store.upsertFromInventory(inventory(id, { received_at: iso(now) }));
    if (r.next() < 0.9) await setAcceptance(store, id, 'accepted', iso(now));
  }
  const out = [];
  for (let round = 0; round < 6; round++) {
    // Runs: most nodes report, some with failures (findings), some reporting an older config.
    for (const id of NODES) {
      if (r.next() < 0.3) continue;
      const outcomes = COMPONENTS.filter(() => r.next() < 0.7).map(([rule_id, directive_id, component]) =>
        ({ rule_id, directive_id, component, outcome: r.pick(OUTCOMES), count: 1 + r.int(2) }));
      const config = (await store.getNode(id))?.policy_config_id ?? null;
      await store.insertRun(run(id, `${iso(now - r.int(60)).slice(0, 19)}.${String(started++ % 1000).padStart(3, '0')}Z`, {
        config_id: r.next() < 0.7 ? config ?? 'cfg-x' : 'cfg-old', complete: r.next() < 0.9, outcomes, received_at: iso(now),
      }));
    }
    now += 60 + r.int(300);
    // Policies: a config id new to each node (both stores recompute it), some nodes left out,
    // one unknown node (skipped by both).
    const writes: PolicyWrite[] = [];
    for (const id of [...NODES, 'gone']) {
      if (r.next() < 0.25) continue;
      const expected = COMPONENTS.filter(() => r.next() < 0.6).map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
      const configId = `cfg-${round}-${r.int(3)}`;
      writes.push({ bundle: { node_id: id, config_id: configId, generated_at: iso(now), bundle: `{"node_id":"${id}"}` }, expected });
    }
    if (batch) await store.putPolicies(writes);
    else for (const w of writes) await store.setExpectations(w.bundle.node_id, w.bundle.config_id, w.expected, w.bundle.generated_at);
    now += r.int(900);
    const clock = clockAt(now);
    out.push({
      writes: writes.length,
      snap: await snapshot(store, clock),
      fresh: { directives: await store.complianceByRuleFresh('directive', clock), summary: await store.complianceSummaryFresh(clock) },
    });
  }
  return out;
}

t.test('putPolicies on SQLite: the same compliance, findings, events and counters as one setExpectations per node', async (t) => {
  const a = await setup(t, sqliteBackend);
  const b = await setup(t, sqliteBackend);
  const batched = await drive(a.store, true);
  const single = await drive(b.store, false);
  let findings = 0;
  let items = 0;
  for (const [i, s] of batched.entries()) {
    t.same(s.snap, single[i]!.snap, `round ${i}: ${s.writes} policies written`);
    t.same({ directives: s.snap.directives, summary: s.snap.summary }, s.fresh, `round ${i}: kept counters equal the fresh sums`);
    findings += s.snap.findings.length;
    items += s.snap.summary.counts.missing + s.snap.summary.counts.error + s.snap.summary.counts.success;
  }
  t.ok(findings > 0, `findings met (${findings})`);
  t.ok(items > 0, 'compliance items met');
});
