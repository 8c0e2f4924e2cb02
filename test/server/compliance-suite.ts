/**
 * Compliance and changes, written once for both stores (run by store-sqlite.test.ts and
 * store-postgres.test.ts through the registry suite). Each scenario is one an admin meets:
 * a policy judged against the last run, a new rule that some nodes have not run yet, a silent
 * node under both expiration policies, relays and agentless nodes in the fleet, and the changes
 * the agents report.
 */
import type { Test } from 'tap';
import { computeCompliance, percentages, zeroCounts, type ComplianceCounts } from '@capstan/shared';
import { complianceClock, complianceView } from '@capstan/server/registry/compliance';
import type { ChangeInput, ComplianceClock, Store } from '@capstan/server/store/index';
import { inventory, run, setup, type Backend } from './store-suite.js';
import { setAcceptance } from '../helpers/node-changes.js';

const E = (rule_id: string, directive_id: string, component: string) => ({ rule_id, directive_id, component });
const O = (rule_id: string, directive_id: string, component: string, outcome: string, count = 1) => ({ rule_id, directive_id, component, outcome, count });
const counts = (c: Partial<ComplianceCounts>): ComplianceCounts => ({ ...zeroCounts(), ...c });
/** Five-minute runs, three missed runs before no answer, five minutes of grace while applying. */
const SETTINGS = { runIntervalMs: 300_000, missedRuns: 3, applyingGraceMs: 300_000 };
const at = (iso: string): ComplianceClock => complianceClock(SETTINGS, new Date(iso));

/** An accepted node with an agent (it sent an inventory). */
async function agentNode(store: Store, id: string): Promise<void> {
  await store.upsertFromInventory(inventory(id, { received_at: '2024-05-01T08:00:00Z' }));
  await setAcceptance(store, id, 'accepted', '2024-05-01T08:00:00Z');
}

const change = (over: Partial<ChangeInput> = {}): ChangeInput => ({
  rule_id: 'r1', directive_id: 'd1', component: 'File', key_value: '/etc/motd', event_type: 'result_repaired',
  message: 'content repaired', at: '2024-05-01T10:00:01Z', diff: '--- a\n+++ b\n-old\n+new\n', diff_truncated: false, ...over,
});

export function complianceSuite(t: Test, backend: Backend): void {
  t.test('compliance judges the last complete run against the current policy, per node, rule, directive and globally', async (t) => {
    const { store } = await setup(t, backend);
    for (const id of ['ca', 'cb', 'cc']) await agentNode(store, id);
    await store.upsertFromInventory(inventory('cd')); // pending: in no figure
    t.equal(await store.setExpectations('ca', 'cfg-A', [
      E('r1', 'd1', 'File /etc/motd'), E('r1', 'd1', 'Service sshd'), E('r1', 'd2', 'Package vim'),
      E('r2', 'd3', 'Command check'), E('r2', 'd3', 'Sysctl'), E('r2', 'd3', 'Sysctl'),
    ], '2024-05-01T09:00:00Z'), true);
    // Its run: success, repaired, error, n/a, an item it was not asked for, vim not reported.
    await store.insertRun(run('ca', '2024-05-01T10:00:00Z', { config_id: 'cfg-A', received_at: '2024-05-01T10:00:05Z', outcomes: [
      O('r1', 'd1', 'File /etc/motd', 'result_success'), O('r1', 'd1', 'Service sshd', 'result_repaired', 2),
      O('r2', 'd3', 'Command check', 'result_error'), O('r2', 'd3', 'Sysctl', 'result_na'), O('r9', 'd9', 'Extra', 'audit_noncompliant'),
    ] }));
    // B has no Capstan policy (a RUDDER agent, say): what it received counts as it is.
    await store.insertRun(run('cb', '2024-05-01T10:00:00Z', { config_id: 'rudder-7', received_at: '2024-05-01T10:00:05Z', outcomes: [
      O('r1', 'd1', 'File /etc/motd', 'audit_compliant'), O('r1', 'd1', 'Service sshd', 'audit_noncompliant'), O('r2', 'd3', 'Command check', 'audit_error'),
    ] }));
    const now = at('2024-05-01T10:01:00Z');
    const a = complianceView((await store.getComplianceBase('ca'))!, now);
    t.same(a.summary.counts, counts({ success: 1, repaired: 1, error: 1, missing: 1, unexpected: 1, not_applicable: 1 }));
    t.equal(a.compliance, 50, '(success + repaired + n/a) / 6');
    t.equal(a.time_state, null);
    t.match(a.components.find((i) => i.component === 'Package vim'), { state: 'missing', outcome: null, count: 0 });
    t.match(a.components.find((i) => i.component === 'Service sshd'), { state: 'repaired', count: 2 });
    const b = complianceView((await store.getComplianceBase('cb'))!, now);
    t.same(b.summary.counts, counts({ audit_compliant: 1, non_compliant: 1, error: 1 }));
    t.equal(b.compliance, 33.33);
    t.equal(b.expected, false);

    // C was given a policy a minute ago and has not run it: applying, never 100 %, never dropped.
    await store.setExpectations('cc', 'cfg-C', [E('r1', 'd1', 'File /etc/motd'), E('r2', 'd3', 'Command check')], '2024-05-01T10:00:00Z');
    const global = await store.complianceSummary([], now);
    t.same(global.counts, counts({ success: 1, repaired: 1, error: 2, non_compliant: 1, audit_compliant: 1, missing: 1, unexpected: 1, not_applicable: 1, applying: 2 }));
    t.equal(global.nodes, 3);
    t.equal(percentages(global.counts).total, 11);
    t.same(await store.complianceByRule('rule', now), [
      { rule_id: 'r1', nodes: 3, counts: counts({ success: 1, repaired: 1, audit_compliant: 1, non_compliant: 1, missing: 1, applying: 1 }) },
      { rule_id: 'r2', nodes: 3, counts: counts({ error: 2, not_applicable: 1, applying: 1 }) },
      { rule_id: 'r9', nodes: 1, counts: counts({ unexpected: 1 }) },
    ]);
    t.same((await store.complianceByRule('directive', now)).map((r) => `${r.rule_id}/${r.directive_id} ${r.nodes}`), ['r1/d1 3', 'r1/d2 1', 'r2/d3 3', 'r9/d9 1']);
    t.same((await store.complianceSummary([{ key: 'id', values: ['cb'] }], now)).counts, b.summary.counts, 'filters narrow the set');
    // The export lists every accepted node in id order, pages included.
    const rows = [...await store.complianceNodes(null, 2, now), ...await store.complianceNodes('cb', 2, now)];
    t.same(rows.map((r) => [r.node_id, r.class, percentages(r.counts).total]), [['ca', 'agent', 6], ['cb', 'agent', 3], ['cc', 'agent', 2]]);
    // The console's worst nodes: lowest compliance first, time states applied (C is applying: 0 %).
    const worst = await store.worstNodes(10, now);
    t.same(worst.map((r) => [r.node_id, percentages(r.counts).compliance]), [['cc', 0], ['cb', 33.33], ['ca', 50]]);
    t.same((await store.worstNodes(1, now)).map((r) => r.node_id), ['cc'], 'limited');

    // An incomplete run and a back-filled older complete run leave A's compliance alone.
    await store.insertRun(run('ca', '2024-05-01T11:00:00Z', { config_id: 'cfg-A', complete: false, outcomes: [] }));
    await store.insertRun(run('ca', '2024-05-01T09:00:00Z', { config_id: 'cfg-A', outcomes: [] }));
    t.same((await store.getComplianceBase('ca'))!.run!.started_at, '2024-05-01T10:00:00Z');
    await store.deleteNode('ca');
    t.equal((await store.complianceSummary([], now)).nodes, 2, 'a deleted node takes its compliance with it');
    await t.rejects(store.setExpectations('cb', 'cfg-B', [{ rule_id: 'r', directive_id: 'd' } as never], '2024-05-01T12:00:00Z'), { code: 'ERR_BAD_REQUEST' });
  });

  t.test('a new policy: applying until a run of it arrives, within a run interval and the grace, then judged', async (t) => {
    const { store } = await setup(t, backend);
    for (const id of ['n1', 'n2']) await agentNode(store, id);
    const v1 = [E('sys', 'self', 'Policy'), E('r1', 'd1', 'File')];
    const v2 = [...v1, E('r2', 'd2', 'Package')];
    for (const id of ['n1', 'n2']) {
      await store.setExpectations(id, 'v1', v1, '2024-05-01T09:00:00Z');
      await store.insertRun(run(id, '2024-05-01T09:05:00Z', { config_id: 'v1', received_at: '2024-05-01T09:05:10Z', outcomes: [
        O('sys', 'self', 'Policy', 'result_success'), O('r1', 'd1', 'File', 'result_success'),
      ] }));
    }
    // A rule is added for both at 10:00; n1 runs it at 10:02, n2 has not yet.
    for (const id of ['n1', 'n2']) await store.setExpectations(id, 'v2', v2, '2024-05-01T10:00:00Z');
    await store.insertRun(run('n1', '2024-05-01T10:02:00Z', { config_id: 'v2', received_at: '2024-05-01T10:02:05Z', outcomes: [
      O('sys', 'self', 'Policy', 'result_success'), O('r1', 'd1', 'File', 'result_success'), O('r2', 'd2', 'Package', 'result_repaired'),
    ] }));
    // n2 also ran its old policy meanwhile: still applying (its answer is the old config).
    await store.insertRun(run('n2', '2024-05-01T10:03:00Z', { config_id: 'v1', received_at: '2024-05-01T10:03:05Z', outcomes: [
      O('sys', 'self', 'Policy', 'result_success'), O('r1', 'd1', 'File', 'result_success'),
    ] }));
    const during = at('2024-05-01T10:04:00Z');
    t.same(await store.complianceByRule('rule', during), [
      { rule_id: 'r1', nodes: 2, counts: counts({ success: 1, applying: 1 }) },
      { rule_id: 'r2', nodes: 2, counts: counts({ repaired: 1, applying: 1 }) },
      { rule_id: 'sys', nodes: 2, counts: counts({ success: 1, applying: 1 }) },
    ], 'the node that has not run the new rule is counted, as applying');
    const view = complianceView((await store.getComplianceBase('n2'))!, during);
    t.equal(view.time_state, 'applying');
    t.equal(view.expected, true);
    t.same(view.summary.counts, counts({ applying: 3 }));
    t.equal(view.compliance, 0, 'applying is never compliant');
    t.equal(view.applying_since, '2024-05-01T10:00:00.000Z');
    // After one run interval and the grace (10:10), its last run is judged against v2.
    const after = at('2024-05-01T10:10:00Z');
    t.same(complianceView((await store.getComplianceBase('n2'))!, after).summary.counts, counts({ success: 2, missing: 1 }));
    t.same((await store.complianceSummary([], after)).counts, counts({ success: 4, repaired: 1, missing: 1 }));
    // A run of v2 ends applying for good.
    await store.insertRun(run('n2', '2024-05-01T10:11:00Z', { config_id: 'v2', received_at: '2024-05-01T10:11:05Z', outcomes: [
      O('sys', 'self', 'Policy', 'result_success'), O('r1', 'd1', 'File', 'result_success'), O('r2', 'd2', 'Package', 'result_success'),
    ] }));
    t.same(complianceView((await store.getComplianceBase('n2'))!, at('2024-05-01T10:12:00Z')).summary.counts, counts({ success: 3 }));
    t.equal((await store.getComplianceBase('n2'))!.marks.applying_since_s, null);
    // A node accepted with a policy and no run at all: applying, then missing, then no answer.
    await agentNode(store, 'n3');
    await store.setExpectations('n3', 'v2', v2, '2024-05-01T10:00:00Z');
    const n3 = async (iso: string) => complianceView((await store.getComplianceBase('n3'))!, at(iso)).summary.counts;
    t.same(await n3('2024-05-01T10:05:00Z'), counts({ applying: 3 }));
    t.same(await n3('2024-05-01T10:12:00Z'), counts({ missing: 3 }));
    t.same(await n3('2024-05-01T10:15:00Z'), counts({ no_answer: 3 }));
  });

  t.test('a silent node is no answer after its missed runs, or keeps its last compliance as its groups say', async (t) => {
    const { store } = await setup(t, backend);
    for (const id of ['quiet', 'kept']) {
      await agentNode(store, id);
      await store.setExpectations(id, 'v1', [E('r1', 'd1', 'File'), E('r1', 'd1', 'Service')], '2024-05-01T09:00:00Z');
      await store.insertRun(run(id, '2024-05-01T10:00:00Z', { config_id: 'v1', received_at: '2024-05-01T10:00:00Z', outcomes: [
        O('r1', 'd1', 'File', 'result_success'), O('r1', 'd1', 'Service', 'result_error'), O('rx', 'dx', 'Old', 'result_success'),
      ] }));
    }
    t.equal(await store.setKeepLast(['kept'], 86_400), 1);
    t.equal(await store.setKeepLast(['kept'], 86_400), 0, 'unchanged');
    const last = counts({ success: 1, error: 1, unexpected: 1 });
    const summary = async (iso: string) => (await store.complianceSummary([], at(iso))).counts;
    t.same(await summary('2024-05-01T10:14:59Z'), counts({ success: 2, error: 2, unexpected: 2 }), 'within three run intervals: as run');
    // 15 minutes: expire_immediately makes every expected item no answer (the stale unexpected one goes).
    t.same(complianceView((await store.getComplianceBase('quiet'))!, at('2024-05-01T10:15:00Z')).summary.counts, counts({ no_answer: 2 }));
    t.same(complianceView((await store.getComplianceBase('kept'))!, at('2024-05-01T10:15:00Z')).summary.counts, last);
    t.same(await summary('2024-05-01T10:15:00Z'), counts({ success: 1, error: 1, unexpected: 1, no_answer: 2 }));
    t.same((await store.complianceByRule('directive', at('2024-05-01T10:15:00Z'))).find((r) => r.directive_id === 'd1')!.counts,
      counts({ success: 1, error: 1, no_answer: 2 }));
    // keep_last for one day: then no answer too.
    t.same(await summary('2024-05-02T10:15:00Z'), counts({ no_answer: 4 }));
    // Any run is an answer, an incomplete one included.
    await store.insertRun(run('quiet', '2024-05-02T10:20:00Z', { config_id: 'v1', complete: false, received_at: '2024-05-02T10:20:00Z', outcomes: [] }));
    t.same(complianceView((await store.getComplianceBase('quiet'))!, at('2024-05-02T10:21:00Z')).summary.counts, last);
  });

  t.test('relays and nodes without an agent are summed apart from managed nodes', async (t) => {
    const { store } = await setup(t, backend);
    await agentNode(store, 'agent-1');
    await store.createNode({ id: 'relay-1', hostname: 'relay-1', relay: true, certificate: inventory('x').certificate, certificate_fingerprint: 'f'.repeat(64) });
    await store.createNode({ id: 'cloud-1', hostname: 'cloud-1', address: '10.0.0.9' });
    for (const id of ['agent-1', 'relay-1', 'cloud-1']) await store.setExpectations(id, 'v1', [E('r1', 'd1', 'File')], '2024-05-01T09:00:00Z');
    await store.insertRun(run('agent-1', '2024-05-01T09:01:00Z', { config_id: 'v1', received_at: '2024-05-01T09:01:00Z', outcomes: [O('r1', 'd1', 'File', 'result_success')] }));
    await store.insertRun(run('relay-1', '2024-05-01T09:01:00Z', { config_id: 'v1', received_at: '2024-05-01T09:01:00Z', outcomes: [O('r1', 'd1', 'File', 'result_error')] }));
    const now = at('2024-05-01T09:02:00Z');
    const agg = await store.complianceSummary([], now);
    t.same({ nodes: agg.nodes, counts: agg.counts }, { nodes: 1, counts: counts({ success: 1 }) }, 'managed nodes only');
    t.same(agg.relays, { nodes: 1, counts: counts({ error: 1 }) });
    t.same(agg.agentless, { nodes: 1, counts: counts({ applying: 1 }) });
    t.same(await store.complianceByRule('rule', now), [{ rule_id: 'r1', nodes: 1, counts: counts({ success: 1 }) }]);
    t.match(complianceView((await store.getComplianceBase('relay-1'))!, now), { class: 'relay' });
    t.match(complianceView((await store.getComplianceBase('cloud-1'))!, now), { class: 'agentless' });
    t.same((await store.complianceNodes(null, 10, now)).map((r) => `${r.node_id}:${r.class}`), ['agent-1:agent', 'cloud-1:agentless', 'relay-1:relay']);
  });

  t.test('a run stored before an earlier one of its node relabels the later run\'s changes', async (t) => {
    const { store } = await setup(t, backend);
    await agentNode(store, 'n3');
    await store.insertRun(run('n3', '2024-05-03T09:00:00Z', { config_id: 'v1' }));
    // A relay forwards several run logs at once: the later one (v3 again) may be stored first.
    await store.insertRun(run('n3', '2024-05-03T10:00:05Z', { config_id: 'v3', changes: [change({ at: '2024-05-03T10:00:06Z' })] }));
    t.same((await store.listChanges({ node_ids: ['n3'] }, 1, 10)).data.map((c) => c.label), ['intentional'], 'v3 after v1: intentional');
    await store.insertRun(run('n3', '2024-05-03T10:00:00Z', { config_id: 'v3', changes: [change({ at: '2024-05-03T10:00:01Z' })] }));
    t.same((await store.listChanges({ node_ids: ['n3'] }, 1, 10)).data.map((c) => `${c.at} ${c.label}`),
      ['2024-05-03T10:00:06.000Z corrective', '2024-05-03T10:00:01.000Z intentional'], 'the later run relabelled against its new predecessor');
  });

  t.test('changes are kept with their run, labelled intentional or corrective, filtered, paged and counted', async (t) => {
    const { store } = await setup(t, backend);
    for (const id of ['n1', 'n2']) await agentNode(store, id);
    // n1: first run (intentional: nothing before it), then same config (corrective), then v2 (intentional).
    await store.insertRun(run('n1', '2024-05-01T10:00:00Z', { config_id: 'v1', changes: [change()] }));
    await store.insertRun(run('n1', '2024-05-01T11:00:00Z', { config_id: 'v1', changes: [change({ at: '2024-05-01T11:00:01Z', message: 'drift\u0000repaired' })] }));
    await store.insertRun(run('n1', '2024-05-01T12:00:00Z', { config_id: 'v2', changes: [
      change({ at: '2024-05-01T12:00:01Z', rule_id: 'r2', directive_id: 'd2', diff: null }),
      change({ at: 'not a time', event_type: 'audit_noncompliant', diff: 'mode 0644 → 0600', diff_truncated: true }),
    ] }));
    // A back-filled run between the first two is compared with the run before it: corrective.
    await store.insertRun(run('n1', '2024-05-01T10:30:00Z', { config_id: 'v1', changes: [change({ at: '2024-05-01T10:30:01Z' })] }));
    await store.insertRun(run('n2', '2024-05-02T10:00:00Z', { config_id: 'v1', changes: [change({ at: '2024-05-02T10:00:01Z' })] }));
    // A duplicate run stores nothing twice.
    await store.insertRun(run('n2', '2024-05-02T10:00:00Z', { config_id: 'v1', changes: [change({ at: '2024-05-02T10:00:01Z' })] }));

    const all = await store.listChanges({}, 1, 100);
    t.equal(all.total, 6);
    t.same(all.data.map((c) => `${c.node_id} ${c.at} ${c.label}`), [
      'n2 2024-05-02T10:00:01.000Z intentional',
      'n1 2024-05-01T12:00:01.000Z intentional',
      'n1 2024-05-01T12:00:00.000Z intentional',
      'n1 2024-05-01T11:00:01.000Z corrective',
      'n1 2024-05-01T10:30:01.000Z corrective',
      'n1 2024-05-01T10:00:01.000Z intentional',
    ], 'newest first; an unreadable time is the run start');
    const audit = all.data.find((c) => c.event_type === 'audit_noncompliant')!;
    t.match(audit, { diff: 'mode 0644 → 0600', diff_truncated: true, config_id: 'v2', run_started_at: '2024-05-01T12:00:00Z' });
    t.equal(all.data.find((c) => c.at.startsWith('2024-05-01T11'))!.message, 'drift\ufffdrepaired', 'a NUL does not refuse the run');
    t.type(all.data[0]!.run_id, 'number');
    t.same((await store.listChanges({ node_ids: ['n1'], label: 'corrective' }, 1, 10)).total, 2);
    t.same((await store.listChanges({ rule_ids: ['r2'] }, 1, 10)).data.map((c) => c.directive_id), ['d2']);
    t.same((await store.listChanges({ directive_ids: ['d1'], from: '2024-05-01T10:30:00Z', to: '2024-05-01T12:00:00Z' }, 1, 10)).total, 2);
    t.same((await store.listChanges({ node_ids: [] }, 1, 10)).total, 0);
    // A policy group's members may be many: a long id list is one parameter, not a refusal.
    const many = [...Array.from({ length: 20_000 }, (_, i) => `other-${i}`), 'n2'];
    t.same((await store.listChanges({ node_ids: many }, 1, 10)).total, 1);
    const page2 = await store.listChanges({}, 2, 4);
    t.same(page2.data.map((c) => c.at), ['2024-05-01T10:30:01.000Z', '2024-05-01T10:00:01.000Z']);
    t.same(await store.changesHistogram({ node_ids: ['n1'] }, 'hour'), [
      { at: '2024-05-01T10:00:00.000Z', intentional: 1, corrective: 1 },
      { at: '2024-05-01T11:00:00.000Z', intentional: 0, corrective: 1 },
      { at: '2024-05-01T12:00:00.000Z', intentional: 2, corrective: 0 },
    ]);
    t.same(await store.changesHistogram({}, 'day'), [
      { at: '2024-05-01T00:00:00.000Z', intentional: 3, corrective: 2 },
      { at: '2024-05-02T00:00:00.000Z', intentional: 1, corrective: 0 },
    ]);
    await t.rejects(store.listChanges({ from: 'yesterday' }, 1, 10), { code: 'ERR_BAD_REQUEST' });
    // Retention in batches; deleting a node takes its changes.
    t.equal(await store.deleteChangesBefore('2024-05-01T11:00:00Z', 1), 1);
    t.equal(await store.deleteChangesBefore('2024-05-01T11:00:00Z', 10), 1);
    t.equal((await store.listChanges({}, 1, 10)).total, 4);
    await store.deleteNode('n2');
    t.equal((await store.listChanges({}, 1, 10)).total, 3);
  });

  t.test('the shared computation and the store agree on a node with expectations', async (t) => {
    const { store } = await setup(t, backend);
    await agentNode(store, 'n1');
    const expected = [E('r1', 'd1', 'A'), E('r1', 'd1', 'B'), E('r1', 'd2', 'C')];
    const outcomes = [O('r1', 'd1', 'A', 'audit_compliant'), O('r1', 'd2', 'C', 'result_repaired'), O('r2', 'd9', 'X', 'result_error')];
    await store.setExpectations('n1', 'v1', expected, '2024-05-01T09:00:00Z');
    await store.insertRun(run('n1', '2024-05-01T09:01:00Z', { config_id: 'v1', received_at: '2024-05-01T09:01:00Z', outcomes }));
    t.same((await store.complianceSummary([], at('2024-05-01T09:02:00Z'))).counts, computeCompliance(expected, outcomes).counts);
  });

  t.test('a rule\'s nodes come worst first with their counts for that rule alone; the node list sorts by compliance', async (t) => {
    const { store } = await setup(t, backend);
    for (const id of ['ca', 'cb', 'cc']) await agentNode(store, id);
    await store.upsertFromInventory(inventory('cd')); // pending: no compliance, sorts last
    const expected = [E('r1', 'd1', 'File a'), E('r1', 'd1', 'File b'), E('r2', 'd2', 'Package p')];
    const runOf = (id: string, a: string, b: string) => run(id, '2024-05-01T10:00:00Z', { config_id: 'cfg', received_at: '2024-05-01T10:00:05Z', outcomes: [
      O('r1', 'd1', 'File a', a), O('r1', 'd1', 'File b', b), O('r2', 'd2', 'Package p', 'result_success'),
    ] });
    for (const [id, a, b] of [['ca', 'result_success', 'result_error'], ['cb', 'result_success', 'result_repaired'], ['cc', 'result_error', 'result_error']] as const) {
      await store.setExpectations(id, 'cfg', expected, '2024-05-01T09:00:00Z');
      await store.insertRun(runOf(id, a, b));
    }
    const now = at('2024-05-01T10:01:00Z');
    const r1 = await store.targetNodes({ rule_id: 'r1', page: 1, per_page: 10 }, now);
    t.same(r1.data.map((n) => [n.node_id, n.counts.success + n.counts.repaired, n.counts.error]), [['cc', 0, 2], ['ca', 1, 1], ['cb', 2, 0]], 'worst first, counted over r1 only');
    t.equal(r1.total, 3);
    t.same((await store.targetNodes({ rule_id: 'r1', order: 'desc', page: 1, per_page: 10 }, now)).data.map((n) => n.node_id), ['cb', 'ca', 'cc'], 'best first');
    const failing = await store.targetNodes({ rule_id: 'r1', state: 'error', page: 1, per_page: 10 }, now);
    t.same([failing.data.map((n) => n.node_id), failing.total], [['cc', 'ca'], 2], 'only the nodes with an error under it');
    t.same((await store.targetNodes({ rule_id: 'r2', directive_id: 'd2', page: 1, per_page: 10 }, now)).data.map((n) => n.counts.success), [1, 1, 1], 'one directive');
    const second = await store.targetNodes({ rule_id: 'r1', page: 2, per_page: 1 }, now);
    t.same([second.data.map((n) => n.node_id), second.total], [['ca'], 3], 'paged, with the total');
    t.same(await store.targetNodes({ rule_id: 'r1', page: 9, per_page: 1 }, now), { data: [], total: 3 }, 'past the end: the total still');
    t.same(await store.targetNodes({ rule_id: 'nope', page: 1, per_page: 10 }, now), { data: [], total: 0 });

    const c = now;
    const sorted = await store.listNodes({ sort: 'compliance', compliance_at: { silent_before: c.now_s - c.silence_s, applying_after: c.now_s - c.applying_s }, page: 1, per_page: 10 });
    t.same(sorted.data.map((n) => n.id), ['cc', 'ca', 'cb', 'cd'], 'the node list, worst first, no data last');
    const desc = await store.listNodes({ sort: 'compliance', order: 'desc', page: 1, per_page: 10 });
    t.same(desc.data.map((n) => n.id), ['cb', 'ca', 'cc', 'cd'], 'best first, no data still last');
    // Silent past the missed runs: every item no answer, so it is as bad as the worst.
    const late = at('2024-05-01T12:00:00Z');
    const silent = await store.listNodes({ sort: 'compliance', compliance_at: { silent_before: late.now_s - late.silence_s, applying_after: late.now_s - late.applying_s }, page: 1, per_page: 10 });
    t.same(silent.data.map((n) => n.id), ['ca', 'cb', 'cc', 'cd'], 'all silent: 0 each, then by id');
  });
}
