/**
 * A generation leaves a node's directive rows unread when its new expectation list counts the
 * node's last run into the same rows as the list they were counted against (rows.ts listDelta and
 * sameRowsUnder). Checked against the compliance computation itself over random pairs of lists
 * and runs: whenever the check says "same", computing both gives the same rows (a wrong "same"
 * would leave stale rows in the store); and for the case it is made for (components renamed that
 * the run did not report on) it does say "same".
 */
import t from 'tap';
import { computeCompliance, type ExpectedComponent, type RunOutcome } from '@capstan/shared/compliance/compute';
import { listDelta, sameRowsUnder } from '@capstan/server/store/compliance/rows';
import { prng } from '../helpers/prng.js';

const RULES = ['r1', 'r2'];
const DIRECTIVES = ['d1', 'd2', 'd3'];
const COMPONENTS = ['File', 'Package', 'Service', 'User'];
// Known types, an informational one (no state) and one compliance does not know (unexpected).
const TYPES = ['result_success', 'result_repaired', 'result_error', 'audit_noncompliant', 'result_na', 'log_info', 'result_weird'];

const universe: ExpectedComponent[] = RULES.flatMap((rule_id) => DIRECTIVES.flatMap((directive_id) =>
  COMPONENTS.map((component) => ({ rule_id, directive_id, component }))));

/** The directive rows as a comparable text, in key order. */
function rows(expected: ExpectedComponent[], outcomes: RunOutcome[]): string {
  return JSON.stringify(computeCompliance(expected, outcomes).directives
    .map((d) => [d.rule_id, d.directive_id, d.counts])
    .sort((a, b) => (`${a[0]}/${a[1]}` < `${b[0]}/${b[1]}` ? -1 : 1)));
}

t.test('whenever two lists are said to count a run the same, they do', async (t) => {
  const r = prng(20261203);
  let said = 0;
  let renamedUnreported = 0;
  for (let i = 0; i < 4000; i++) {
    const a = universe.filter(() => r.next() < 0.4);
    // The new list: a random one, or this one with components renamed, added, removed or repeated.
    const kind = r.int(5);
    const b = kind === 0 ? universe.filter(() => r.next() < 0.4)
      : kind === 1 ? a.map((c) => (r.next() < 0.3 ? { ...c, component: `${c.component} v2` } : c))
        : kind === 2 ? [...a, r.pick(universe)]
          : kind === 3 ? a.filter(() => r.next() < 0.8)
            : [...a, ...a.filter(() => r.next() < 0.3)].reverse();
    const outcomes: RunOutcome[] = universe.concat(b).filter(() => r.next() < 0.35)
      .map((c) => ({ ...c, outcome: r.pick(TYPES), count: 1 + r.int(3) }));
    const same = sameRowsUnder(outcomes, listDelta(a, b));
    if (same) {
      said++;
      if (rows(a, outcomes) !== rows(b, outcomes)) {
        t.fail(`said the same but counted differently (case ${i})`, { a, b, outcomes });
        return;
      }
    }
    // Renamed components none of which the run reported on: the case the check is for.
    if (kind === 1 && a.length > 0) {
      const renamed = b.filter((c) => !a.some((x) => x.component === c.component && x.directive_id === c.directive_id && x.rule_id === c.rule_id));
      const before = a.filter((c) => !b.some((x) => x.component === c.component && x.directive_id === c.directive_id && x.rule_id === c.rule_id));
      const reported = (c: ExpectedComponent) => outcomes.some((o) => o.rule_id === c.rule_id && o.directive_id === c.directive_id && o.component === c.component);
      if (![...renamed, ...before].some(reported)) {
        renamedUnreported++;
        t.ok(same, `renamed components the run did not report on count the same (case ${i})`);
      }
    }
  }
  t.ok(said > 400, `the check said "same" often enough to mean something (${said} of 4000)`);
  t.ok(renamedUnreported > 100, `renamed, unreported cases met (${renamedUnreported})`);
});

t.test('an empty list counts a run another way: never the same as a list that expects something', async (t) => {
  const a: ExpectedComponent[] = [];
  const b = universe.slice(0, 2);
  t.equal(listDelta(a, b), null);
  t.equal(listDelta(b, a), null);
  t.equal(sameRowsUnder([], listDelta(a, b)), false);
  t.equal(sameRowsUnder([], listDelta(b, [...b].reverse())), true, 'the same components in another order are the same list');
});
