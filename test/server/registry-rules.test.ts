/**
 * The registry's pure rules: auto-accept patterns and the enrollment secret, the category of
 * every RUDDER report type, expected-vs-received edge cases, a run's summary, and the server
 * configuration checks that span several keys.
 */
import t from 'tap';
import fc from 'fast-check';
import type { Report } from '@capstan/shared';
import { loadServerConfig } from '@capstan/server/config';
import { computeCompliance, percentages, REPORT_TYPE_STATE, stateOf, summarize, zeroCounts } from '@capstan/shared';
import { autoAcceptCause, enrollmentRules, globMatch } from '@capstan/server/registry/enrollment';
import { runsCutoff } from '@capstan/server/registry/lifecycle';

t.test('globs: * and ? anchored, everything else literal, linear on hostile input', async (t) => {
  const cases: Array<[string, string, boolean]> = [
    ['web-*', 'web-1', true], ['web-*', 'web-', true], ['web-*', 'xweb-1', false], ['*.example.com', 'a.b.example.com', true],
    ['db-??', 'db-12', true], ['db-??', 'db-1', false], ['a.c', 'abc', false], ['a+b', 'a+b', true], ['[x]', '[x]', true],
    ['*', '', true], ['', '', true], ['', 'a', false], ['a*b*c', 'aXbYc', true], ['a*b*c', 'aXbY', false],
    // Found by the property below: a `*` in the text used to match the pattern's `*` as a literal
    // character, so `*` did not match "* ".
    ['*', '* ', true], ['a*', 'a*b', true],
  ];
  for (const [g, s, want] of cases) t.equal(globMatch(g, s), want, `${g} ~ ${s}`);
  const start = process.hrtime.bigint();
  t.equal(globMatch('a*a*a*a*a*a*a*a*b', 'a'.repeat(250)), false);
  t.ok(Number(process.hrtime.bigint() - start) / 1e6 < 1000, 'no exponential backtracking');
  fc.assert(fc.property(fc.string({ maxLength: 20 }), (s) => globMatch(s.replace(/[*?]/g, ''), s.replace(/[*?]/g, '')) && globMatch('*', s)));
});

t.test('auto-accept: secret first, then node-id and hostname patterns; nothing configured accepts nothing', async (t) => {
  const rules = enrollmentRules({ auto_accept_node_ids: 'lab-*, ci-??', auto_accept_hostnames: '*.Example.COM', secret: 's'.repeat(16) });
  const cause = (nodeId: string, hostname: string, secret?: unknown) => autoAcceptCause(rules, { nodeId, hostname, secret });
  t.equal(cause('x', 'y', 's'.repeat(16)), 'auto-accept: enrollment secret');
  t.equal(cause('x', 'y', 's'.repeat(17)), null, 'a wrong secret is no secret');
  t.equal(cause('x', 'y', 42), null);
  t.equal(cause('lab-7', 'y'), 'auto-accept: node id matches lab-*');
  t.equal(cause('ci-12', 'y'), 'auto-accept: node id matches ci-??');
  t.equal(cause('LAB-7', 'y'), null, 'node ids match case-sensitively');
  t.equal(cause('x', 'WEB1.example.com'), 'auto-accept: hostname matches *.example.com', 'hostnames case-insensitively');
  t.equal(cause('x', 'example.com'), null);
  const none = enrollmentRules({ auto_accept_node_ids: '', auto_accept_hostnames: ' , ', secret: '' });
  t.equal(autoAcceptCause(none, { nodeId: 'a', hostname: 'b', secret: '' }), null);
  t.throws(() => enrollmentRules({ auto_accept_node_ids: '', auto_accept_hostnames: '', secret: 'short' }), { code: 'ERR_CONFIG' });
  t.throws(() => enrollmentRules({ auto_accept_node_ids: Array.from({ length: 101 }, (_, i) => `n${i}`).join(','), auto_accept_hostnames: '', secret: '' }), { code: 'ERR_CONFIG' });
});

t.test('configuration checks across keys exit as configuration errors', async (t) => {
  t.throws(() => loadServerConfig({ overrides: { 'lifecycle.missing_after': '10m' } }), { code: 'ERR_CONFIG' }, 'missing before unreachable');
  t.throws(() => loadServerConfig({ overrides: { 'enrollment.secret': 'tooshort' } }), { code: 'ERR_CONFIG' });
  t.throws(() => loadServerConfig({ overrides: { 'retention.runs': '1h' } }), { code: 'ERR_CONFIG' }, 'run retention is whole days');
  t.equal(loadServerConfig({}).lifecycle.purge_after, 30 * 86_400_000, 'purge after 30 days by default');
  t.equal(loadServerConfig({}).retention.runs, 7 * 86_400_000, 'runs kept 7 days by default');
});

t.test('every RUDDER report type has its state; logs and control are information', async (t) => {
  const rudder: Record<string, string | null> = {
    result_success: 'success', audit_compliant: 'audit_compliant', result_repaired: 'repaired', result_error: 'error',
    audit_error: 'error', audit_noncompliant: 'non_compliant', result_na: 'not_applicable', audit_na: 'not_applicable',
    audit_notapplicable: 'not_applicable', control: null, log_info: null, log_warn: null, log_warning: null,
    log_debug: null, log_trace: null, log_repaired: null, log_duration: null,
  };
  for (const [type, state] of Object.entries(rudder)) t.equal(stateOf(type), state, type);
  for (const type of Object.keys(REPORT_TYPE_STATE)) t.ok(type in rudder, `${type} is a RUDDER type`);
  t.equal(stateOf('result_weird'), 'unexpected', 'not a RUDDER type: unexpected');
  t.equal(stateOf('__proto__'), 'unexpected');
});

t.test('a run summary keeps the worst outcome per component; logs never decide one', async (t) => {
  const r = (event_type: string, component: string): Report => ({
    start_datetime: '2024-05-01T10:00:00+00:00', rule_id: 'r', directive_id: 'd', component, key_value: 'None', event_type,
    msg: '', policy: 'p', node_id: 'n', execution_datetime: '2024-05-01T10:00:00+00:00', report_id: '0',
  });
  const s = summarize([r('control', 'start'), r('result_success', 'A'), r('result_error', 'A'), r('log_warn', 'A'),
    r('result_na', 'B'), r('result_repaired', 'B'), r('log_info', 'C'), r('audit_noncompliant', 'D'), r('result_bogus', 'D'), r('__proto__', 'E')]);
  t.same(s.outcomes.map((o) => `${o.component}:${o.outcome}:${o.count}`), ['A:result_error:2', 'B:result_repaired:2', 'D:result_bogus:2', 'E:__proto__:1']);
  t.equal(s.counts.__proto__, 1, 'a type named __proto__ is counted, not a prototype');
  t.equal(s.counts.control, 1);
});

t.test('expected-vs-received: missing, unexpected, duplicates, informational outcomes, percentages', async (t) => {
  const e = (component: string) => ({ rule_id: 'r', directive_id: 'd', component });
  const o = (component: string, outcome: string) => ({ rule_id: 'r', directive_id: 'd', component, outcome, count: 1 });
  t.same(computeCompliance(null, []).counts, zeroCounts());
  t.equal(percentages(computeCompliance(null, []).counts).compliance, null, 'no items: no percentage');
  const c = computeCompliance([e('A'), e('B'), e('A'), e('L')], [o('A', 'audit_compliant'), o('L', 'log_info'), o('X', 'result_success')]);
  t.same(c.items.map((i) => `${i.component}:${i.state}`), ['A:audit_compliant', 'B:missing', 'L:missing', 'X:unexpected'],
    'an expected component that only logged is missing');
  t.same(computeCompliance([], [o('A', 'result_error')]).counts.error, 1, 'an empty expectation list counts what was received');
  t.same(percentages({ ...zeroCounts(), success: 1, repaired: 1, not_applicable: 1 }).compliance, 100);
  t.same(percentages({ ...zeroCounts(), audit_compliant: 1, applying: 1 }).compliance, 50, 'applying is counted, never compliant');
  t.same(percentages({ ...zeroCounts(), success: 1, no_answer: 3 }).compliance, 25);
  t.same(percentages({ ...zeroCounts(), success: 2, error: 1 }).compliance, 66.67);
});

t.test('run retention cuts at a UTC midnight', async (t) => {
  t.equal(runsCutoff(new Date('2024-05-10T12:34:56Z'), 7 * 86_400_000).toISOString(), '2024-05-03T00:00:00.000Z');
  t.equal(runsCutoff(new Date('2024-05-10T00:00:00Z'), 86_400_000).toISOString(), '2024-05-09T00:00:00.000Z');
});
