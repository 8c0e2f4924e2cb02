/**
 * A generation's batch (putPolicies) recomputes its nodes' compliance set-based, on SQLite and on
 * PostgreSQL: the rows, findings, events and kept counters must be what one setExpectations per
 * node gives. Two stores of a kind take the same random registrations, runs (some failing, so
 * findings open and close) and policies, one through putPolicies batches and one node by node.
 * Most policies have a config id new to the node, some of them with the node's expectations as
 * they were, with one component renamed or with components added; some write the node's policy
 * again, with the same expectations (their keys in another order) or with new ones (an older
 * server's, brought up to date). The kept thresholds are swept to each round's moment first, so
 * policies move nodes between kept time modes. The kept counters must also equal the fresh sums. On PostgreSQL,
 * writing the same policy again must leave the compliance rows alone, and two generations at once
 * beside the ingest's batches must not deadlock.
 */
import t, { type Test } from 'tap';
import type { ComplianceClock, PolicyWrite, Store } from '@capstan/server/store/index';
import { RUN_STATES } from '@capstan/shared/compliance/compute';
import { inventory, run, setup, type Backend, type Db } from './store-suite.js';
import { postgresBackend, sqliteTemplateBackend } from './backends.js';
import { pgAdmin, pgUnavailable } from './pg.js';
import { setAcceptance } from '../helpers/node-changes.js';
import { prng } from '../helpers/prng.js';
import { batchedAgainstSingle, roundOf } from './policy-snapshot.js';

const NODES = Array.from({ length: 24 }, (_, i) => `b${String(i).padStart(2, '0')}`);
const COMPONENTS = [
  ['r1', 'd1', 'File /etc/motd'], ['r1', 'd1', 'Service sshd'], ['r1', 'd2', 'Package vim'],
  ['r2', 'd3', 'Command check'], ['r2', 'd3', 'Sysctl'], ['r3', 'd4', 'User ops'], ['r3', 'd5', 'Cron'],
] as const;
/** Components only ever added to a list, never reported by a run: under a directive runs report on, and under one of their own. */
const ADDED_ONLY = [['r1', 'd2', 'Package git'], ['r4', 'd6', 'Firewall']] as const;
const OUTCOMES = ['result_success', 'result_repaired', 'result_error', 'result_na', 'audit_compliant', 'audit_noncompliant'];
const BASE_S = Date.parse('2024-05-01T08:00:00Z') / 1000;
const clockAt = (now_s: number): ComplianceClock => ({ now_s, silence_s: 900, applying_s: 600 });
const iso = (s: number) => new Date(s * 1000).toISOString();

/**
 * Drive one store; `batch` chooses putPolicies or setExpectations per node. Returns a snapshot per
 * round. `shared`: runs report one of a few outcome sets and new policies one of a few lists, so
 * that a batch's nodes share them (as a fleet's do: store/compliance/judged.ts judges each once).
 */
async function drive(store: Store, db: Db, batch: boolean, shared = false) {
  const r = prng(shared ? 20261207 : 20261202);
  const draw = <T>(make: () => T, n: number) => Array.from({ length: n }, make);
  const component = ([rule_id, directive_id, component]: (typeof COMPONENTS)[number]) => ({ rule_id, directive_id, component });
  const outcomeSets = draw(() => COMPONENTS.filter(() => r.next() < 0.8).map((c) => ({ ...component(c), outcome: r.next() < 0.7 ? 'result_success' : r.pick(OUTCOMES), count: 1 + r.int(2) })), 3);
  const lists = draw(() => COMPONENTS.filter(() => r.next() < 0.7).map(component), 2);
  let now = BASE_S;
  let started = 0;
  for (const id of NODES) {
    await store.upsertFromInventory(inventory(id, { received_at: iso(now) }));
    if (r.next() < 0.9) await setAcceptance(store, id, 'accepted', iso(now));
  }
  const out = [];
  const written = new Map<string, { configId: string; expected: PolicyWrite['expected'] }>();
  for (let round = 0; round < 6; round++) {
    // Runs: most nodes report, some with failures (findings), some reporting an older config.
    for (const id of NODES) {
      if (r.next() < 0.3) continue;
      const outcomes = shared ? r.pick(outcomeSets) : COMPONENTS.filter(() => r.next() < 0.7).map(([rule_id, directive_id, component]) =>
        ({ rule_id, directive_id, component, outcome: r.pick(OUTCOMES), count: 1 + r.int(2) }));
      const config = (await store.getNode(id))?.policy_config_id ?? null;
      await store.insertRun(run(id, `${iso(now - r.int(60)).slice(0, 19)}.${String(started++ % 1000).padStart(3, '0')}Z`, {
        config_id: r.next() < 0.7 ? config ?? 'cfg-x' : 'cfg-old', complete: r.next() < 0.9, outcomes, received_at: iso(now),
      }));
    }
    now += 60 + r.int(300);
    // The kept thresholds at this moment, so that a node's kept time mode is live: a policy moves
    // a node that ran its previous one from mode 0 to applying (its counters move with it), on
    // the marks-only path too.
    await store.sweepCompliance(clockAt(now));
    // Policies: mostly a config id new to the node (both stores recompute it); some the node's
    // policy again, with the same expectations written with their keys in another order, or with
    // new ones; some nodes left out, one unknown node (skipped by both).
    const writes: PolicyWrite[] = [];
    for (const id of [...NODES, 'gone']) {
      if (r.next() < 0.25) continue;
      const had = written.get(id);
      const pick = r.next();
      if (had && pick < 0.2) {
        const expected = had.expected.map(({ rule_id, directive_id, component }) => ({ component, directive_id, rule_id }));
        writes.push({ bundle: { node_id: id, config_id: had.configId, generated_at: iso(now), bundle: `{"node_id":"${id}"}` }, expected, expectationsOnly: true });
        continue;
      }
      // Some a new config id with the same components (a template's new values): the node's
      // stored directive rows are kept as they were counted, only its marks move. Some with a
      // component renamed (a method's new name): the rows stay when the run had not reported on
      // it (missing either way) and move when it had (its report now unexpected).
      // Some with components added (a directive added to a rule): the rows follow from the
      // stored ones when the run reported on none of them, else from the run.
      const added = () => [...COMPONENTS, ...ADDED_ONLY].filter(([rule_id, directive_id, component]) => !had!.expected.some((c) => c.rule_id === rule_id && c.directive_id === directive_id && c.component === component))
        .filter(() => r.next() < 0.6).map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
      const expected = had && pick >= 0.35 && pick < 0.55 ? had.expected
        : had && had.expected.length > 0 && pick >= 0.55 && pick < 0.7 ? had.expected.map((c, k) => (k === 0 ? { ...c, component: `${c.component} (renamed)` } : c))
          : had && had.expected.length > 0 && pick >= 0.7 && pick < 0.85 ? [...had.expected, ...added()]
            : shared ? r.pick(lists) : COMPONENTS.filter(() => r.next() < 0.6).map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
      const configId = had && pick < 0.35 ? had.configId : `cfg-${round}-${r.int(3)}`;
      writes.push({ bundle: { node_id: id, config_id: configId, generated_at: iso(now), bundle: `{"node_id":"${id}"}` }, expected, ...(configId === had?.configId && { expectationsOnly: true }) });
      written.set(id, { configId, expected });
    }
    if (batch) await store.putPolicies(writes);
    else for (const w of writes) await store.setExpectations(w.bundle.node_id, w.bundle.config_id, w.expected, w.bundle.generated_at);
    now += r.int(900);
    out.push({ writes: writes.length, ...(await roundOf(store, db, clockAt(now), NODES)) });
  }
  return out;
}

async function parity(t: Test, backend: Backend, shared = false) {
  const batched = await batchedAgainstSingle(t, backend, (store, db, batch) => drive(store, db, batch, shared), (i, s) => `round ${i}: ${s.writes} policies written`);
  let findings = 0;
  let items = 0;
  for (const s of batched) {
    findings += s.snap.findings.length;
    items += s.snap.summary.counts.missing + s.snap.summary.counts.error + s.snap.summary.counts.success;
  }
  t.ok(findings > 0, `findings met (${findings})`);
  t.ok(items > 0, 'compliance items met');
}

t.test('putPolicies on SQLite: the same compliance, findings, events and counters as one setExpectations per node', (t) => parity(t, sqliteTemplateBackend));

const why = await pgUnavailable();
const pgOnly = { skip: why ?? false };
const postgres = postgresBackend('capstan_pbatch');

t.test('putPolicies on PostgreSQL: the same compliance, findings, events and counters as one setExpectations per node', pgOnly, (t) => parity(t, postgres));

// Nodes whose runs reported the same outcomes under the same list are judged once a batch: each
// must still get its own rows, findings and events.
t.test('putPolicies on SQLite, runs and lists shared by many nodes: as one setExpectations per node', (t) => parity(t, sqliteTemplateBackend, true));
t.test('putPolicies on PostgreSQL, runs and lists shared by many nodes: as one setExpectations per node', pgOnly, (t) => parity(t, postgres, true));

/** The versions of a node's compliance row and directive rows (any write makes new ones). */
async function versions(db: Db, nodeId: string): Promise<string[]> {
  return pgAdmin(async (c) => (await c.query(`SELECT 'c' || xmin::text AS v FROM node_compliance WHERE node_id = $1
    UNION ALL (SELECT 'd' || xmin::text FROM node_compliance_directives WHERE node_id = $1 ORDER BY rule_id, directive_id)`, [nodeId])).rows.map((r) => r.v as string), db.schema);
}

/**
 * A row without an answer time (written before answer times were kept): a new policy starts its
 * wait for an answer, so its answer time moves with the applying mark, on the marks-only path of
 * a kept or same-rows list too.
 */
async function unanswered(t: Test, backend: Backend) {
  const items = [{ rule_id: 'r1', directive_id: 'd1', component: 'File /etc/motd' }, { rule_id: 'r2', directive_id: 'd3', component: 'Sysctl' }];
  const renamed = [{ ...items[0]!, component: 'File /etc/issue' }, items[1]!];
  const drive = async (batch: boolean) => {
    const { store, db } = await setup(t, backend);
    for (const id of ['n1', 'n2']) {
      await store.upsertFromInventory(inventory(id, { received_at: '2024-05-01T10:00:00Z' }));
      await setAcceptance(store, id, 'accepted', '2024-05-01T10:00:00Z');
      await store.setExpectations(id, 'cfg-1', items, '2024-05-01T10:01:00Z');
      // Its run reported on the second component only: the renamed one is missing either way.
      await store.insertRun(run(id, '2024-05-01T10:02:00Z', {
        config_id: 'cfg-1', received_at: '2024-05-01T10:03:00Z', outcomes: [{ ...items[1]!, outcome: 'result_success', count: 1 }],
      }));
    }
    await db.exec('UPDATE node_compliance SET answered_s = NULL');
    const writes: PolicyWrite[] = [
      { bundle: { node_id: 'n1', config_id: 'cfg-2', generated_at: '2024-05-01T10:10:00Z', bundle: '{}' }, expected: items },
      { bundle: { node_id: 'n2', config_id: 'cfg-2', generated_at: '2024-05-01T10:10:00Z', bundle: '{}' }, expected: renamed },
    ];
    if (batch) await store.putPolicies(writes);
    else for (const w of writes) await store.setExpectations(w.bundle.node_id, w.bundle.config_id, w.expected, w.bundle.generated_at);
    return {
      bases: [await store.getComplianceBase('n1'), await store.getComplianceBase('n2')],
      rows: await db.rows!(`SELECT node_id, answered_s, applying_since_s, keep_last_s, ${RUN_STATES.join(', ')} FROM node_compliance ORDER BY node_id`),
    };
  };
  const batched = await drive(true);
  t.same(batched, await drive(false), 'putPolicies as one setExpectations per node');
  const at = Date.parse('2024-05-01T10:10:00Z') / 1000;
  t.same(batched.rows.map((r) => [Number(r.answered_s), Number(r.applying_since_s)]), [[at, at], [at, at]], 'the wait for an answer starts with the policy');
  t.same(batched.rows.map((r) => [Number(r.success), Number(r.missing)]), [[1, 1], [1, 1]], 'the counts as they were');
}

t.test('putPolicies on SQLite: a row without an answer time gets one with its new policy', (t) => unanswered(t, sqliteTemplateBackend));
t.test('putPolicies on PostgreSQL: a row without an answer time gets one with its new policy', pgOnly, (t) => unanswered(t, postgres));

t.test('postgres: the same policy written again leaves the compliance rows alone', pgOnly, async (t) => {
  const { store, db } = await setup(t, postgres);
  const AT = '2024-05-01T10:00:00Z';
  for (const id of ['n1', 'n2']) {
    await store.upsertFromInventory(inventory(id, { received_at: AT }));
    await store.insertRun(run(id, '2024-05-01T10:01:00Z', { config_id: 'cfg-1', received_at: '2024-05-01T10:02:00Z' }));
  }
  const items = [{ rule_id: 'r1', directive_id: 'd1', component: 'File' }, { rule_id: 'r2', directive_id: 'd2', component: 'Package vim' }];
  // The same list with its keys in another order: jsonb stores neither order, so neither counts.
  const again = items.map(({ rule_id, directive_id, component }) => ({ component, directive_id, rule_id }));
  t.ok(await store.setExpectations('n1', 'cfg-1', items, '2024-05-01T10:03:00Z'));
  const before = await versions(db, 'n1');
  t.ok(before.length > 1, 'a compliance row and directive rows');
  // This used to compare the JSON text sent with the text jsonb gives back (its own key order
  // and spacing): never equal, so every write recomputed and rewrote every row.
  t.ok(await store.setExpectations('n1', 'cfg-1', again, '2024-05-01T10:04:00Z'));
  t.same(await versions(db, 'n1'), before, 'setExpectations: no row rewritten');
  t.same(await store.getExpectations('n1', 'cfg-1'), items);
  await store.putPolicies([{ bundle: { node_id: 'n2', config_id: 'cfg-1', generated_at: '2024-05-01T10:03:00Z', bundle: '{}' }, expected: items }]);
  const before2 = await versions(db, 'n2');
  t.equal(await store.putPolicies([{ bundle: { node_id: 'n2', config_id: 'cfg-1', generated_at: '2024-05-01T10:04:00Z', bundle: '{}' }, expected: again, expectationsOnly: true }]), 1);
  t.same(await versions(db, 'n2'), before2, 'putPolicies: no row rewritten');
  // New expectations for the same policy are recomputed.
  await store.setExpectations('n1', 'cfg-1', items.slice(0, 1), '2024-05-01T10:05:00Z');
  t.not((await versions(db, 'n1'))[0], before[0], 'changed expectations recompute');
});

t.test('postgres: two generations at once beside the ingest\'s batches do not deadlock', pgOnly, async (t) => {
  const { store, db } = await setup(t, postgres);
  // A second server on the same database.
  const other = await db.open();
  // More nodes than one chunk of putPolicies (500), so a batch spans several.
  const ids = Array.from({ length: 1100 }, (_, i) => `g${String(i).padStart(4, '0')}`);
  const r = prng(7);
  await pgAdmin((c) => c.query(`INSERT INTO nodes (id, hostname, accepted, status, state, created_at, updated_at, state_changed_at)
    SELECT unnest($1::text[]), 'h', 'accepted', 'reachable', 'running', now(), now(), now()`, [ids]), db.schema);
  const expected = COMPONENTS.map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
  const writes = (configId: string, order: string[]): PolicyWrite[] => order.map((id) => ({
    bundle: { node_id: id, config_id: configId, generated_at: '2024-05-01T10:00:00Z', bundle: `{"c":"${configId}"}` }, expected,
  }));
  let started = 0;
  const ingest = async (round: number) => {
    for (let k = 0; k < 6; k++) {
      const batch = Array.from({ length: 40 }, () => ids[r.int(ids.length)]!);
      await store.insertRuns([...new Set(batch)].map((id) => run(id, `2024-05-01T10:${String(10 + round).padStart(2, '0')}:${String(k).padStart(2, '0')}.${String(started++ % 1000).padStart(3, '0')}Z`, {
        config_id: `cfg-${round}`, received_at: '2024-05-01T10:30:00Z',
        outcomes: [{ rule_id: 'r1', directive_id: 'd1', component: 'File /etc/motd', outcome: r.pick(['result_success', 'result_error']), count: 1 }],
      })));
    }
  };
  for (let round = 0; round < 3; round++) {
    // One server walks the nodes up, the other down (one statement per node locked them in the
    // order given: the two met in the middle and PostgreSQL failed one with 40P01, deadlock).
    const results = await Promise.allSettled([
      store.putPolicies(writes(`cfg-${round}-a`, ids)),
      other.putPolicies(writes(`cfg-${round}-b`, [...ids].reverse())),
      ingest(round),
    ]);
    const failed = results.filter((x): x is PromiseRejectedResult => x.status === 'rejected');
    t.same(failed.map((x) => String((x.reason as Error).message)), [], `round ${round}: all three done`);
  }
  const clock = clockAt(Date.parse('2024-05-01T10:40:00Z') / 1000);
  t.same(await store.complianceByRule('directive', clock), await store.complianceByRuleFresh('directive', clock), 'kept counters equal the fresh sums');
  t.same(await store.complianceSummary([], clock), await store.complianceSummaryFresh(clock));
});
