/**
 * computeCompliance judges a run by looking each outcome up in an index of the expectation list
 * (kept for a frozen list, made each time for one that may change). These properties hold it to
 * the rules written out plainly below, one joined key per component, over random lists and
 * outcomes drawn from small pools of ids so that they collide: components listed twice, reported
 * twice, reported with information-only or unknown types, reported by nobody, reported without
 * being expected, under a directive the list has or one it has not, and ids such as
 * `__proto__`. Item order, counts and the directives' order must all be the same.
 */
import t from 'tap';
import fc from 'fast-check';
import { computeCompliance, REPORT_TYPE_STATE, stateOf, type ComplianceItem, type ExpectedComponent, type RunOutcome } from '@capstan/shared';

/** The rules, plainly: what computeCompliance must return. */
function plainly(expected: readonly ExpectedComponent[] | null, outcomes: readonly RunOutcome[]) {
  const key = (r: string, d: string, c: string) => JSON.stringify([r, d, c]);
  const received = new Map<string, RunOutcome>();
  for (const o of outcomes) received.set(key(o.rule_id, o.directive_id, o.component), o);
  const items: ComplianceItem[] = [];
  const push = (o: RunOutcome, state: ComplianceItem['state'] | null) => {
    if (state !== null) items.push({ rule_id: o.rule_id, directive_id: o.directive_id, component: o.component, state, outcome: o.outcome, count: o.count });
  };
  if (expected !== null && expected.length > 0) {
    const wanted = new Set<string>();
    for (const e of expected) {
      const k = key(e.rule_id, e.directive_id, e.component);
      if (wanted.has(k)) continue;
      wanted.add(k);
      const got = received.get(k);
      if (got && stateOf(got.outcome) !== null) push(got, stateOf(got.outcome));
      else items.push({ ...e, state: 'missing', outcome: null, count: 0 });
    }
    for (const [k, o] of received) if (!wanted.has(k)) push(o, 'unexpected');
  } else {
    for (const o of received.values()) push(o, stateOf(o.outcome));
  }
  const counts: Record<string, number> = { success: 0, repaired: 0, error: 0, non_compliant: 0, audit_compliant: 0, not_applicable: 0, unexpected: 0, missing: 0, applying: 0, no_answer: 0 };
  const directives = new Map<string, { rule_id: string; directive_id: string; counts: Record<string, number> }>();
  for (const it of items) {
    counts[it.state]!++;
    const dk = JSON.stringify([it.rule_id, it.directive_id]);
    if (!directives.has(dk)) directives.set(dk, { rule_id: it.rule_id, directive_id: it.directive_id, counts: Object.fromEntries(Object.keys(counts).map((c) => [c, 0])) });
    directives.get(dk)!.counts[it.state]!++;
  }
  return { items, counts, directives: [...directives.values()] };
}

const ids = fc.constantFrom('r1', 'r2', '__proto__', 'constructor', 'd1', 'd2', '');
const components = fc.constantFrom('File /etc/a', 'File /etc/b', 'Service x', 'hasOwnProperty', 'Package p');
const types = fc.constantFrom('result_success', 'result_repaired', 'result_error', 'audit_noncompliant', 'audit_compliant', 'result_na', 'log_info', 'control', 'result_weird');
const component = fc.record({ rule_id: ids, directive_id: ids, component: components });
const outcome = fc.record({ rule_id: ids, directive_id: ids, component: components, outcome: types, count: fc.integer({ min: 1, max: 5 }) });
/** Outcomes for some of the list's components (as a run of it reports them) and some of nobody's. */
const case_ = fc.array(component, { maxLength: 25 }).chain((list) => fc.record({
  list: fc.constant(list),
  outcomes: fc.array(fc.oneof(
    outcome,
    ...(list.length > 0 ? [fc.record({ at: fc.integer({ min: 0, max: list.length - 1 }), outcome: types, count: fc.integer({ min: 1, max: 5 }) })
      .map(({ at, outcome: o, count }) => ({ ...list[at]!, outcome: o, count }))] : []),
  ), { maxLength: 40 }),
}));

t.test('a run is judged as the rules say, against a list that may change or a frozen one', async (t) => {
  fc.assert(fc.property(case_, ({ list, outcomes }) => {
    const want = plainly(list, outcomes);
    t.same(computeCompliance([...list], outcomes), want);
    const kept = Object.freeze([...list]);
    // Twice: the second call reads the index the first one kept.
    t.same(computeCompliance(kept, outcomes), want);
    t.same(computeCompliance(kept, outcomes), want);
  }), { numRuns: 400 });
});

t.test('without expectations, the outcomes count as they are', async (t) => {
  fc.assert(fc.property(fc.array(outcome, { maxLength: 30 }), (outcomes) => {
    t.same(computeCompliance(null, outcomes), plainly(null, outcomes));
    t.same(computeCompliance([], outcomes), plainly([], outcomes));
  }), { numRuns: 200 });
});

t.test('a list that is not frozen is indexed again after it changes', async (t) => {
  const list: ExpectedComponent[] = [{ rule_id: 'r1', directive_id: 'd1', component: 'File /etc/a' }];
  const outcomes: RunOutcome[] = [
    { rule_id: 'r1', directive_id: 'd1', component: 'File /etc/a', outcome: 'result_success', count: 1 },
    { rule_id: 'r1', directive_id: 'd2', component: 'File /etc/b', outcome: 'result_error', count: 1 },
  ];
  t.same(computeCompliance(list, outcomes).counts, plainly(list, outcomes).counts);
  t.equal(computeCompliance(list, outcomes).counts.unexpected, 1);
  list.push({ rule_id: 'r1', directive_id: 'd2', component: 'File /etc/b' });
  const after = computeCompliance(list, outcomes);
  t.equal(after.counts.unexpected, 0, 'the component added to the list is expected now');
  t.equal(after.counts.error, 1);
  t.same(after, plainly(list, outcomes));
});

t.test('every report type has the state its table gives', async (t) => {
  for (const [type, state] of Object.entries(REPORT_TYPE_STATE)) t.equal(stateOf(type), state, type);
  for (const type of ['control', 'log_info', 'log_warn', 'log_debug']) t.equal(stateOf(type), null, `${type} is information`);
  for (const type of ['result_weird', '__proto__', 'toString', 'hasOwnProperty', '', 'RESULT_SUCCESS']) t.equal(stateOf(type), 'unexpected', `${JSON.stringify(type)} is no RUDDER type`);
});
