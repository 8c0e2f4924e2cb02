/**
 * Findings, compliance transitions, events and the notification outbox, written once for both
 * stores (run by store-sqlite.test.ts and store-postgres.test.ts). Each case is what an admin
 * meets: one failing audit directive over many runs, a repair, a directive removed, a node going
 * from compliant to error and back, a burst of events read by id, and messages sent, retried,
 * given up and retried by hand.
 */
import type { Test } from 'tap';
import type { EventRecord, RunInsert, Store } from '@capstan/server/store/index';
import { inventory, run, setup, type Backend } from './store-suite.js';
import { setAcceptance } from '../helpers/node-changes.js';

const E = (rule_id: string, directive_id: string, component: string) => ({ rule_id, directive_id, component });
const O = (rule_id: string, directive_id: string, component: string, outcome: string) => ({ rule_id, directive_id, component, outcome, count: 1 });
const PKG = 'Package absent telnetd';
const EXPECTED = [E('r1', 'd1', PKG), E('r1', 'd2', 'File /etc/motd'), E('r2', 'd3', 'Service sshd')];
const minute = (i: number) => `2024-05-01T10:${String(i).padStart(2, '0')}:00.000Z`;

async function agentNode(store: Store, id: string): Promise<void> {
  await store.upsertFromInventory(inventory(id, { received_at: '2024-05-01T08:00:00Z' }));
  await setAcceptance(store, id, 'accepted', '2024-05-01T08:00:00Z');
  await store.setExpectations(id, 'v1', EXPECTED, '2024-05-01T09:00:00Z');
}

/** A complete run of config v1: the package's outcome as given, the others compliant. */
function auditRun(id: string, i: number, pkg: string, over: Partial<RunInsert> = {}): RunInsert {
  return run(id, minute(i), {
    config_id: 'v1', received_at: minute(i).replace(':00.000Z', ':05.000Z'),
    outcomes: [O('r1', 'd1', PKG, pkg), O('r1', 'd2', 'File /etc/motd', 'audit_compliant'), O('r2', 'd3', 'Service sshd', 'audit_compliant')],
    changes: [],
    findings: pkg === 'audit_compliant' ? [] : [{
      rule_id: 'r1', directive_id: 'd1', component: PKG, key_value: 'telnetd', event_type: pkg, message: `telnetd is installed (run ${i})`,
      diff: pkg === 'audit_noncompliant' ? 'would remove telnetd' : null, diff_truncated: false,
    }],
    ...over,
  });
}

const types = (events: EventRecord[]) => events.map((e) => e.type);

export function findingsSuite(t: Test, backend: Backend): void {
  t.test('a failing audit directive is one finding over its runs, closed by the run that is compliant again; no change is recorded', async (t) => {
    const { store } = await setup(t, backend);
    await agentNode(store, 'n1');
    const ids: number[] = [];
    for (let i = 1; i <= 5; i++) ids.push((await store.insertRun(auditRun('n1', i, 'audit_noncompliant'))).id);
    let list = await store.listFindings({}, 1, 10);
    t.equal(list.total, 1, 'one finding, not one per run');
    t.match(list.data[0], {
      node_id: 'n1', rule_id: 'r1', directive_id: 'd1', component: PKG, key_value: 'telnetd', kind: 'non_compliant', event_type: 'audit_noncompliant',
      status: 'open', message: 'telnetd is installed (run 1)', diff: 'would remove telnetd', runs: 5,
      first_seen_at: minute(1), first_run_id: ids[0], last_seen_at: minute(5), last_run_id: ids[4], closed_at: null, close_reason: null,
    });
    t.equal((await store.listChanges({}, 1, 10)).total, 0, 'an audit finding is not a change');
    // Fixed by hand: the next run is compliant.
    const fixed = (await store.insertRun(auditRun('n1', 6, 'audit_compliant'))).id;
    list = await store.listFindings({}, 1, 10);
    t.match(list.data[0], { status: 'closed', close_reason: 'fixed', closed_at: minute(6), closed_run_id: fixed, runs: 5, last_seen_at: minute(5), last_run_id: ids[4] });
    t.equal((await store.listFindings({ status: 'open' }, 1, 10)).total, 0);
    // Back again: a new finding, the old one stays closed.
    await store.insertRun(auditRun('n1', 7, 'audit_noncompliant'));
    list = await store.listFindings({}, 1, 10);
    t.same(list.data.map((f) => `${f.status} ${f.runs}`), ['open 1', 'closed 5']);
    const events = await store.listEvents({ node_ids: ['n1'] }, 100);
    t.same(types(events), ['finding.opened', 'compliance.changed', 'finding.closed', 'compliance.changed', 'finding.opened', 'compliance.changed']);
    t.match(events[0], { severity: 'warning', at: minute(1), data: { finding_id: list.data[1]!.id, component: PKG, kind: 'non_compliant', run_id: ids[0] } });
    t.match(events[1], { severity: 'warning', data: { cause: 'run', run_id: ids[0], from: 'compliant', to: 'non_compliant', rules: [{ rule_id: 'r1', from: 'compliant', to: 'non_compliant' }] } });
    t.match(events[2], { severity: 'info', data: { reason: 'fixed', runs: 5, run_id: fixed } });
    t.match(events[3], { severity: 'info', data: { from: 'non_compliant', to: 'compliant', because: [{ directive_id: 'd1', state: 'closed' }] } });
  });

  t.test('a repair closes an error as repaired, kind changes keep one finding, a removed directive closes as removed', async (t) => {
    const { store } = await setup(t, backend);
    await agentNode(store, 'n1');
    await store.insertRun(auditRun('n1', 1, 'result_error'));
    await store.insertRun(auditRun('n1', 2, 'audit_noncompliant'));
    let [f] = (await store.listFindings({}, 1, 10)).data;
    t.match(f, { kind: 'non_compliant', event_type: 'audit_noncompliant', runs: 2, message: 'telnetd is installed (run 1)' }, 'error then non-compliant: one finding');
    await store.insertRun(auditRun('n1', 3, 'result_repaired', { changes: [] }));
    [f] = (await store.listFindings({}, 1, 10)).data;
    t.match(f, { status: 'closed', close_reason: 'repaired', runs: 2 });
    await store.insertRun(auditRun('n1', 4, 'result_error'));
    t.match((await store.listFindings({ status: 'open' }, 1, 10)).data, [{ kind: 'error' }]);
    // The directive leaves the node's policy: its finding closes with the policy change.
    await store.setExpectations('n1', 'v2', EXPECTED.slice(1), minute(5));
    t.match((await store.listFindings({}, 1, 1)).data, [{ status: 'closed', close_reason: 'removed', closed_at: minute(5), closed_run_id: null, runs: 1 }]);
    const last = (await store.listEvents({ node_ids: ['n1'], types: ['compliance.*'] }, 100)).at(-1)!;
    t.match(last, { severity: 'info', data: { cause: 'policy', run_id: null, from: 'error', to: 'compliant' } });
  });

  t.test('a node and its rules move from compliant to error and back; a back-filled run moves nothing', async (t) => {
    const { store } = await setup(t, backend);
    await agentNode(store, 'n1');
    await store.insertRun(auditRun('n1', 1, 'audit_compliant'));
    t.equal((await store.listEvents({}, 100)).length, 0, 'a compliant node makes no event');
    const bad = await store.insertRun(auditRun('n1', 2, 'audit_compliant', {
      outcomes: [O('r1', 'd1', PKG, 'audit_compliant'), O('r1', 'd2', 'File /etc/motd', 'audit_compliant'), O('r2', 'd3', 'Service sshd', 'result_error')],
      findings: [{ rule_id: 'r2', directive_id: 'd3', component: 'Service sshd', key_value: 'sshd', event_type: 'result_error', message: 'sshd would not start', diff: null, diff_truncated: false }],
    }));
    const changed = (await store.listEvents({ types: ['compliance.changed'] }, 10))[0]!;
    t.match(changed, {
      node_id: 'n1', severity: 'error', at: minute(2),
      data: { run_id: bad.id, from: 'compliant', to: 'error', rules: [{ rule_id: 'r2', from: 'compliant', to: 'error' }], because: [{ directive_id: 'd3', state: 'error' }] },
    });
    // A run of 10:01 arriving late (the relay was down) judges nothing: the newest run decides.
    await store.insertRun(auditRun('n1', 1, 'audit_noncompliant', { started_at: '2024-05-01T10:01:30.000Z', file_name: 'late.log', received_at: minute(3) }));
    t.equal((await store.listFindings({ status: 'open' }, 1, 10)).total, 1);
    t.equal((await store.listEvents({ types: ['compliance.changed'] }, 10)).length, 1);
    await store.insertRun(auditRun('n1', 3, 'audit_compliant'));
    t.match((await store.listEvents({ types: ['compliance.changed'] }, 10))[1], { severity: 'info', data: { from: 'error', to: 'compliant' } });
  });

  t.test('drift repaired is an event; the first run of a new policy is not drift', async (t) => {
    const { store } = await setup(t, backend);
    await agentNode(store, 'n1');
    const repair = { rule_id: 'r1', directive_id: 'd2', component: 'File /etc/motd', key_value: '/etc/motd', event_type: 'result_repaired', message: 'repaired', at: minute(1), diff: null, diff_truncated: false };
    await store.insertRun(auditRun('n1', 1, 'audit_compliant', { changes: [repair] }));
    const second = await store.insertRun(auditRun('n1', 2, 'audit_compliant', { changes: [repair, { ...repair, component: 'Other' }] }));
    const drift = await store.listEvents({ types: ['drift.repaired'] }, 10);
    t.equal(drift.length, 1, 'the first run (intentional) is the policy reaching the node');
    t.match(drift[0], { node_id: 'n1', severity: 'warning', data: { run_id: second.id, count: 2, changes: [{ component: 'File /etc/motd', key: '/etc/motd' }, { component: 'Other' }] } });
  });

  t.test('events are read after an id, by type, severity and node filter, in the order they were written; retention takes the oldest', async (t) => {
    const { store } = await setup(t, backend);
    await agentNode(store, 'web1');
    await agentNode(store, 'db1');
    const ids = await store.insertEvents([
      { at: '2024-05-01T10:00:00Z', type: 'node.no_answer', severity: 'warning', node_id: 'web1', data: { hostname: 'web1' } },
      { at: '2024-05-01T10:00:01Z', type: 'job.finished', severity: 'info', node_id: null, data: { job_id: 'j1' } },
      { at: '2024-05-01T10:00:02Z', type: 'finding.opened', severity: 'error', node_id: 'db1', data: { kind: 'error' } },
    ]);
    t.same(ids, [...ids].sort((a, b) => a - b));
    t.equal(await store.lastEventId(), ids[2]);
    t.same((await store.listEvents({ after: ids[0] }, 10)).map((e) => e.id), ids.slice(1));
    t.same(types(await store.listEvents({ types: ['node.*', 'job.finished'] }, 10)), ['node.no_answer', 'job.finished']);
    t.same(types(await store.listEvents({ min_severity: 'warning' }, 10)), ['node.no_answer', 'finding.opened']);
    t.same(types(await store.listEvents({ filters: [{ key: 'q', values: ['hostname = db*'] }] }, 10)), ['finding.opened'], 'the filter language chooses nodes');
    t.same((await store.listEvents({ node_ids: ['web1'] }, 10)).map((e) => e.data), [{ hostname: 'web1' }]);
    t.same(await store.getEvents([ids[2]!, ids[0]!]), [(await store.listEvents({}, 10))[0], (await store.listEvents({}, 10))[2]]);
    await t.rejects(store.listEvents({ after: -1 }, 10), { code: 'ERR_BAD_REQUEST' });
    await t.rejects(store.insertEvents([{ at: 'soon', type: 'x', severity: 'info', node_id: null, data: {} }]), { code: 'ERR_BAD_REQUEST' });
    t.equal(await store.countNodeEvents('web1', ['node.no_answer'], '2024-05-01T09:00:00Z', 10), 1);
    t.equal(await store.deleteEventsBefore('2024-05-01T10:00:01.500Z', 1), 1);
    t.equal(await store.deleteEventsBefore('2024-05-01T10:00:01.500Z', 10), 1);
    t.same((await store.listEvents({}, 10)).map((e) => e.id), [ids[2]]);
    // Ids never go back, even once every event is gone.
    t.equal(await store.deleteEventsBefore('2030-01-01T00:00:00Z', 10), 1);
    const [next] = await store.insertEvents([{ at: '2024-05-02T00:00:00Z', type: 'job.finished', severity: 'info', node_id: null, data: {} }]);
    t.ok(next! > ids[2]!, 'a new event gets a higher id');
  });

  t.test('findings are listed by status, kind, node filter, rule and first sighting; retention and node deletion take them', async (t) => {
    const { store } = await setup(t, backend);
    for (const id of ['web1', 'db1']) await agentNode(store, id);
    await store.insertRun(auditRun('web1', 1, 'audit_noncompliant'));
    await store.insertRun(auditRun('db1', 2, 'result_error'));
    await store.insertRun(auditRun('db1', 3, 'audit_compliant'));
    t.same((await store.listFindings({ status: 'open' }, 1, 10)).data.map((f) => f.node_id), ['web1']);
    t.same((await store.listFindings({ kind: 'error' }, 1, 10)).data.map((f) => f.node_id), ['db1']);
    t.same((await store.listFindings({ filters: [{ key: 'q', values: ['hostname = db*'] }] }, 1, 10)).data.map((f) => f.status), ['closed']);
    t.equal((await store.listFindings({ rule_ids: ['r2'] }, 1, 10)).total, 0);
    t.equal((await store.listFindings({ first_seen_from: minute(2) }, 1, 10)).total, 1);
    t.equal((await store.listFindings({ first_seen_to: minute(2) }, 1, 10)).total, 1);
    await t.rejects(store.listFindings({ status: 'maybe' as 'open' }, 1, 10), { code: 'ERR_BAD_REQUEST' });
    await t.rejects(store.listFindings({ filters: [{ key: 'q', values: ['hostname ='] }] }, 1, 10), { code: 'ERR_FILTER_SYNTAX' });
    t.equal(await store.deleteClosedFindingsBefore('2030-01-01T00:00:00Z', 10), 1, 'closed ones only');
    await store.deleteNode('web1');
    t.equal((await store.listFindings({}, 1, 10)).total, 0);
  });

  t.test('a finished job is an event in the transaction of its last task', async (t) => {
    const { store } = await setup(t, backend);
    await store.createNode({ id: 'm1', hostname: 'h' });
    await store.jobs.createJob({
      id: 'j1', name: 'restart', type: 'run', nodes: ['m1'], node_selectors: [], conditions: [], keep_output: false, timeout_ms: 1000,
      created_at: '2024-05-01T10:00:00Z', deadline_at: '2024-05-01T11:00:00Z',
    }, ['m1'], new Map([['m1', { reason: 'no_agent', message: 'no agent' }]]));
    t.match(await store.listEvents({ types: ['job.finished'] }, 10), [{ severity: 'error', node_id: null, data: { job_id: 'j1', name: 'restart', progress: { failed: 1, total: 1 } } }]);
  });

  t.test('the outbox: messages gather within their window, are claimed with a lease, retried, given up and retried by hand', async (t) => {
    const { store } = await setup(t, backend);
    const ev = await store.insertEvents(Array.from({ length: 5 }, (_, i) => ({ at: minute(i), type: 'node.no_answer', severity: 'warning' as const, node_id: `n${i}`, data: {} })));
    const sub = await store.notify.createSubscription({
      id: 'ops', name: 'Ops', kind: 'webhook', target: 'http://127.0.0.1:9/hook', secret_sealed: 'sealed', types: ['node.*'], min_severity: 'info',
      filter: null, group_window_ms: 60_000, enabled: true,
    }, minute(0));
    t.equal(sub.cursor, ev[4], 'a new subscription starts after the newest event');
    await t.rejects(store.notify.createSubscription({ ...sub }, minute(0)), { code: 'ERR_CONFLICT' });
    const collect = (from: number, to: number, ids: number[], now: string, held: Record<string, number> = {}) =>
      store.notify.collect({ subscription_id: 'ops', from, to, event_ids: ids, held, now, window_ms: 60_000, max_events: 3 });
    t.equal(await collect(0, 5, [1], minute(10)), false, 'a stale cursor writes nothing');
    t.equal(await collect(sub.cursor, sub.cursor + 2, [101, 102], minute(10)), true);
    t.equal(await collect(sub.cursor + 2, sub.cursor + 4, [103, 104], minute(10), { n9: 4 }), true);
    let list = await store.notify.listDeliveries({ subscription_id: 'ops' }, 1, 10);
    t.same(list.data.map((d) => d.event_ids).reverse(), [[101, 102, 103], [104]], 'the waiting message takes what fits, the rest starts another');
    t.same(list.data.at(-1)!.held, { n9: 4 });
    t.equal((await store.notify.getSubscription('ops'))!.cursor, sub.cursor + 4);
    t.same(await store.notify.claimDeliveries('a', minute(10), minute(12), 10), [], 'nothing due within the window');
    const claimed = await store.notify.claimDeliveries('a', minute(11), minute(12), 10);
    t.same(claimed.map((d) => d.event_ids), [[101, 102, 103], [104]]);
    t.same(await store.notify.claimDeliveries('b', minute(11), minute(13), 10), [], 'claimed: not twice');
    // The claimer dies; its lease lapses and another server takes the messages.
    const again = await store.notify.claimDeliveries('b', minute(12), minute(13), 10);
    t.equal(again.length, 2);
    await store.notify.finishDelivery(again[0]!.id, 'b', { delivered: true, status: 200 }, minute(12));
    await store.notify.finishDelivery(again[1]!.id, 'a', { delivered: false, status: 500, error: 'HTTP 500', next_at: minute(20) }, minute(12));
    t.match(await store.notify.getDelivery(again[1]!.id), { attempts: 0 }, 'an outcome from a lapsed claim is ignored');
    await store.notify.finishDelivery(again[1]!.id, 'b', { delivered: false, status: 500, error: 'HTTP 500', next_at: minute(20) }, minute(12));
    t.match(await store.notify.getDelivery(again[1]!.id), { state: 'pending', attempts: 1, last_status: 500, last_error: 'HTTP 500', next_at: minute(20) });
    const [retry] = await store.notify.claimDeliveries('b', minute(20), minute(21), 10);
    await store.notify.finishDelivery(retry!.id, 'b', { delivered: false, status: null, error: 'ECONNREFUSED', next_at: null }, minute(20));
    t.match(await store.notify.getDelivery(retry!.id), { state: 'dead', attempts: 2, finished_at: minute(20) });
    t.same((await store.notify.listDeliveries({ state: 'dead' }, 1, 10)).data.map((d) => d.id), [retry!.id]);
    t.match(await store.notify.retryDelivery(retry!.id, minute(30)), { state: 'pending', attempts: 0, next_at: minute(30), finished_at: null });
    t.equal(await store.notify.retryDelivery(again[0]!.id, minute(30)), null, 'only a dead one');
    t.equal(await store.notify.deleteDeliveriesBefore('2030-01-01T00:00:00Z', 10), 1, 'done ones only');
    t.match(await store.notify.updateSubscription('ops', { enabled: false, types: [] }, minute(31)), { enabled: false, types: [] });
    t.equal(await store.notify.deleteSubscription('ops'), true);
    list = await store.notify.listDeliveries({}, 1, 10);
    t.equal(list.total, 0, 'its messages went with it');
  });
}
