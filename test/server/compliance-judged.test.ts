/**
 * A policy write's runs judged once per outcome set (store/compliance/judged.ts): the same packed
 * bytes give the same outcomes, parsed once; the same outcomes under the same list give the same
 * rows, judged once; what is shared is read-only; a row without a packed form, or more sets than
 * the judge remembers, is parsed again and judged as before.
 */
import t from 'tap';
import { MAX_SETS, RunJudge } from '@capstan/server/store/compliance/judged';
import { complianceRows, type ComplianceInput } from '@capstan/server/store/compliance/rows';
import { packOutcomes } from '@capstan/server/store/runs/outcomes';
import type { RunSummaryOutcome } from '@capstan/server/store/runs/types';

const list = Object.freeze([
  { rule_id: 'r1', directive_id: 'd1', component: 'File /etc/motd' },
  { rule_id: 'r1', directive_id: 'd2', component: 'Package vim' },
  { rule_id: 'r2', directive_id: 'd3', component: 'Service sshd' },
]) as ComplianceInput['expected'] & object;
const other = Object.freeze([list[0]!, { rule_id: 'r3', directive_id: 'd4', component: 'Cron' }]) as typeof list;

const outcomes = (failing: boolean): RunSummaryOutcome[] => [
  { rule_id: 'r1', directive_id: 'd1', component: 'File /etc/motd', outcome: 'result_success', count: 1 },
  { rule_id: 'r1', directive_id: 'd2', component: 'Package vim', outcome: failing ? 'result_error' : 'result_repaired', count: 2 },
  { rule_id: 'r9', directive_id: 'd9', component: 'Stray', outcome: 'result_success', count: 1 },
];
const packed = (failing: boolean) => packOutcomes(JSON.stringify(outcomes(failing)));
const input = (o: RunSummaryOutcome[], expected = list): ComplianceInput => ({
  nodeId: 'n1', run: { id: 1, started_at: '2026-12-07T00:00:00Z', started_utc: '2026-12-07T00:00:00.000Z', config_id: 'c1' },
  outcomes: o, expected, marks: { applying_since_s: null, answered_s: 1, keep_last_s: 0 },
});

t.test('the same packed bytes are parsed once, and their outcomes are shared and read-only', async (t) => {
  const judge = new RunJudge();
  // Two buffers of the same bytes, as two nodes' rows read them.
  const a = judge.outcomes('n1', packed(false), '[]');
  const b = judge.outcomes('n2', Buffer.from(packed(false)), '[]');
  const c = judge.outcomes('n3', packed(true), '[]');
  t.equal(a, b, 'the same array for the same bytes');
  t.not(a, c, 'another for other bytes');
  t.same(a, outcomes(false));
  t.same(c, outcomes(true));
  t.same(judge.stats, { parsed: 2, shared: 1, judged: 0, reused: 0 });
  t.throws(() => (a as RunSummaryOutcome[]).push(a[0]!), TypeError, 'the array cannot grow');
  t.throws(() => ((a[1] as { outcome: string }).outcome = 'result_success'), TypeError, 'an outcome cannot change');
});

t.test('the same outcomes under the same list are judged once, as complianceRows judges them', async (t) => {
  const judge = new RunJudge();
  const ok = judge.outcomes('n1', packed(false), '[]');
  const failing = judge.outcomes('n3', packed(true), '[]');
  const first = judge.rows(input(ok));
  t.equal(judge.rows(input(ok)), first, 'the same rows for the same list and outcomes');
  t.same(first, complianceRows(input(outcomes(false))), 'what complianceRows gives');
  const underOther = judge.rows(input(ok, other));
  t.not(underOther, first, 'another list, other rows');
  t.same(underOther, complianceRows(input(outcomes(false), other)));
  t.same(judge.rows(input(failing)), complianceRows(input(outcomes(true))), 'other outcomes, other rows');
  t.same(judge.stats, { parsed: 2, shared: 0, judged: 3, reused: 1 });
  t.equal(first.counts.unexpected, 1, 'the stray outcome counts as unexpected');
  t.throws(() => ((first.counts as { success: number }).success = 9), TypeError, 'counts cannot change');
  t.throws(() => ((first.directives[0]!.counts as { success: number }).success = 9), TypeError, 'a directive row cannot change');
  t.throws(() => ((first.items[0] as { state: string }).state = 'error'), TypeError, 'an item cannot change');
  t.throws(() => first.items.push(first.items[0]!), TypeError, 'the items cannot grow');
});

t.test('outcomes the judge did not hand out, and rows without a packed form, are not shared', async (t) => {
  const judge = new RunJudge();
  const own = outcomes(false);
  const rows = judge.rows(input(own));
  t.same(rows, complianceRows(input(outcomes(false))));
  t.not(judge.rows(input(own)), rows, 'judged each time');
  t.notOk(Object.isFrozen(rows), 'and left as complianceRows gives them');
  const legacy = JSON.stringify(outcomes(true));
  const x = judge.outcomes('n1', null, legacy);
  const y = judge.outcomes('n1', null, legacy);
  t.not(x, y, 'an unpacked row is parsed each time');
  t.same(x, outcomes(true));
  t.same(judge.outcomes('n1', null, '[]'), []);
  t.same(judge.stats, { parsed: 0, shared: 0, judged: 0, reused: 0 });
});

t.test('past its bound the judge parses again and stays right', async (t) => {
  const judge = new RunJudge();
  const set = (i: number) => packOutcomes(JSON.stringify([{ rule_id: 'r1', directive_id: 'd1', component: 'File /etc/motd', outcome: 'result_success', count: i + 1 }]));
  const early = judge.outcomes('n1', set(0), '[]');
  for (let i = 1; i < MAX_SETS + 10; i++) judge.outcomes('n1', set(i), '[]');
  t.equal(judge.outcomes('n1', set(0), '[]'), early, 'a set remembered before the bound is still shared');
  const late = judge.outcomes('n1', set(MAX_SETS + 5), '[]');
  t.not(judge.outcomes('n1', set(MAX_SETS + 5), '[]'), late, 'a set past the bound is parsed each time');
  t.same(late, [{ rule_id: 'r1', directive_id: 'd1', component: 'File /etc/motd', outcome: 'result_success', count: MAX_SETS + 6 }]);
  t.same(judge.rows(input(late)), complianceRows(input([...late])), 'and judged as complianceRows judges it');
  t.equal(judge.stats.parsed, MAX_SETS + 12, 'each set once, and the one past the bound each time');
});

t.test('a stored value that cannot be read is no outcomes, told for each node that holds it, and not shared', async (t) => {
  const told: Array<{ node_id: string; error: string }> = [];
  const judge = new RunJudge((u) => told.push(u));
  const good = packed(true);
  const flipped = Buffer.from(good);
  flipped[flipped.length - 3]! ^= 0xff;
  const damaged = [
    flipped, // the frame's checksum or its decoding fails
    good.subarray(0, good.length - 8), // truncated
    packOutcomes('{"rule_id": "r1"}'), // packed, but not a list
    packOutcomes('[1, 2]'), // a list of what is not an outcome
    packOutcomes('[{"rule_id": '), // not JSON
  ];
  for (const [i, bytes] of damaged.entries()) {
    const a = judge.outcomes(`bad-${i}`, bytes, '[]');
    t.same(a, [], `damaged value ${i}: read as no outcomes`);
    t.not(judge.outcomes(`again-${i}`, Buffer.from(bytes), '[]'), a, 'not remembered: each node holding it is told');
  }
  t.same(told.map((u) => u.node_id), damaged.flatMap((_, i) => [`bad-${i}`, `again-${i}`]), 'each node told, in order');
  t.ok(told.every((u) => u.error.length > 0), 'with the reason');
  t.same(judge.outcomes('n1', null, '{not json'), [], 'an old row whose JSON column cannot be parsed');
  t.equal(told.at(-1)!.node_id, 'n1');
  // The readable value beside them is shared as before; judged, the unreadable ones make every component missing.
  t.same(judge.outcomes('n9', good, '[]'), outcomes(true));
  const rows = judge.rows(input(judge.outcomes('bad-0', flipped, '[]')));
  t.same(rows, complianceRows(input([])), 'judged as a run that reported nothing');
  t.equal(rows.counts.missing, list.length, 'every expected component missing');
});
