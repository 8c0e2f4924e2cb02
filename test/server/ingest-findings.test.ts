/**
 * What the ingest takes from a run log's reports: its repairs are changes (with the diff the
 * agent wrote after each), an audit's non-compliance is not; each failing component gives one
 * finding input, its worst report (an error over a non-compliance), with an audit's diff, within
 * the limits of a run's changes.
 */
import t from 'tap';
import type { Report } from '@capstan/shared';
import { diffMessage } from '@capstan/shared/runlog/diff';
import { DEFAULT_CHANGE_LIMITS, extractChanges } from '@capstan/server/ingest/changes';
import { extractFindings } from '@capstan/server/ingest/findings';

const r = (event_type: string, component: string, msg: string, key_value = 'k'): Report => ({
  execution_datetime: '2024-05-01T10:00:00Z', policy: 'p', event_type, rule_id: 'r1', directive_id: 'd1', report_id: 'x',
  component, key_value, start_datetime: '2024-05-01T10:00:00Z', node_id: 'n1', msg,
} as Report);

t.test('repairs are changes; an audit non-compliance is a finding with its diff; the worse report of a component wins', async (t) => {
  const reports = [
    r('result_repaired', 'File', 'repaired'), r('log_info', 'File', diffMessage({ diff: '-a\n+b\n', truncated: false })),
    r('audit_noncompliant', 'Package', 'telnetd is installed', 'telnetd'), r('log_info', 'Package', diffMessage({ diff: 'would remove telnetd', truncated: false }), 'telnetd'),
    r('audit_noncompliant', 'Service', 'sshd is stopped'), r('result_error', 'Service', 'sshd cannot be checked'),
    r('result_success', 'Other', 'fine'),
  ];
  t.match(extractChanges(reports), [{ event_type: 'result_repaired', component: 'File', diff: '-a\n+b\n' }]);
  t.equal(extractChanges(reports).length, 1, 'the audit run\'s non-compliance is no change');
  t.match(extractFindings(reports, DEFAULT_CHANGE_LIMITS), [
    { component: 'Package', key_value: 'telnetd', event_type: 'audit_noncompliant', message: 'telnetd is installed', diff: 'would remove telnetd' },
    { component: 'Service', event_type: 'result_error', message: 'sshd cannot be checked', diff: null },
  ]);
});

t.test('findings are bounded as changes are: a count per run, a message length, a diff length', async (t) => {
  const limits = { maxPerRun: 2, maxMessageChars: 5, maxDiffChars: 3 };
  const reports = [
    r('audit_noncompliant', 'A', 'a long message'), r('log_info', 'A', diffMessage({ diff: 'abcdef', truncated: false })),
    r('audit_error', 'B', 'b'), r('result_error', 'C', 'c'),
  ];
  const got = extractFindings(reports, limits);
  t.equal(got.length, 2, 'at most maxPerRun components');
  t.match(got[0], { message: 'a lon…', diff: 'abc', diff_truncated: true });
});
