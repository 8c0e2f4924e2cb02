/**
 * A list that only adds components to a node's previous one: the node's rows made from its
 * stored rows (additions.ts) must be the rows its run gives when judged against the new list,
 * whenever they are made at all; they are not made when the run may have reported on an added
 * component. Checked over random lists and runs against computeCompliance, the judge itself.
 */
import t from 'tap';
import fc from 'fast-check';
import { computeCompliance, type ExpectedComponent, type RunOutcome } from '@capstan/shared';
import { countsOfRows, countsWithAdditions, listAdditions, rowsWithAdditions } from '@capstan/server/store/compliance/additions';
import { DIRECTIVE_ROW_COLUMNS } from '@capstan/server/store/compliance/rows';

const POOL: ExpectedComponent[] = [
  ['r1', 'd1', 'File /etc/motd'], ['r1', 'd1', 'Service sshd'], ['r1', 'd2', 'Package vim'], ['r2', 'd3', 'Command check'],
  ['r2', 'd3', 'Sysctl'], ['r3', 'd4', 'User ops'], ['r3', 'd5', 'Cron'], ['r3', 'd5', 'Mount /srv'],
].map(([rule_id, directive_id, component]) => ({ rule_id: rule_id!, directive_id: directive_id!, component: component! }));
const TYPES = ['result_success', 'result_repaired', 'result_na', 'audit_compliant', 'log_info'];

/** A node's stored rows as the store reads them: arrays in DIRECTIVE_ROW_COLUMNS order. */
const storedOf = (directives: ReturnType<typeof computeCompliance>['directives']) =>
  directives.map((d) => DIRECTIVE_ROW_COLUMNS.map((c) => (c === 'rule_id' ? d.rule_id : c === 'directive_id' ? d.directive_id : d.counts[c])));
const sorted = <T extends { rule_id: string; directive_id: string }>(rows: T[]) => [...rows].sort((a, b) => `${a.rule_id} ${a.directive_id}`.localeCompare(`${b.rule_id} ${b.directive_id}`));

const scenario = fc.record({
  before: fc.subarray(POOL, { minLength: 1 }),
  extra: fc.subarray(POOL),
  reported: fc.array(fc.record({ at: fc.integer({ min: 0, max: POOL.length - 1 }), type: fc.constantFrom(...TYPES), count: fc.integer({ min: 1, max: 3 }) }), { maxLength: 12 }),
});

t.test('rows made from the stored ones are the run judged again', async (t) => {
  let made = 0;
  let refused = 0;
  fc.assert(fc.property(scenario, ({ before, extra, reported }) => {
    const after = [...before, ...extra.filter((c) => !before.includes(c))];
    const outcomes: RunOutcome[] = reported.map(({ at, type, count }) => ({ ...POOL[at]!, outcome: type, count }));
    const added = listAdditions(before, after);
    t.not(added, null, 'a list with more components only adds');
    const previous = computeCompliance(before, outcomes);
    const stored = storedOf(previous.directives);
    const rows = rowsWithAdditions(stored, added!);
    const judged = computeCompliance(after, outcomes);
    if (rows === null) {
      refused++;
      // Refused only when the run reported something unexpected under a directive that gains components.
      t.ok(computeCompliance(before, outcomes).directives.some((d) => d.counts.unexpected > 0 && added!.has(`${d.rule_id}\u0000${d.directive_id}`)));
      return;
    }
    made++;
    t.same(sorted(rows), sorted(judged.directives));
    t.same(countsOfRows(rows), judged.counts);
    // As the SQLite writer makes them: from the rows of the directives that gain components
    // alone, and the node's stored counts.
    const gains = (r: { rule_id: string; directive_id: string }) => added!.has(`${r.rule_id}\u0000${r.directive_id}`);
    t.same(sorted(rowsWithAdditions(stored.filter((r) => gains({ rule_id: r[0] as string, directive_id: r[1] as string })), added!)!), sorted(judged.directives.filter(gains)));
    t.same(countsWithAdditions(previous.counts, added!), judged.counts);
  }), { numRuns: 500 });
  t.ok(made > 50 && refused > 10, `both ways met (${made} made, ${refused} refused)`);
});

t.test('a list that drops or renames a component does not only add', async (t) => {
  const [a, b, c] = POOL as [ExpectedComponent, ExpectedComponent, ExpectedComponent];
  t.equal(listAdditions([a, b], [a, c]), null, 'b dropped');
  t.equal(listAdditions([a, b], [a, { ...b, component: 'renamed' }]), null, 'b renamed');
  t.equal(listAdditions([], [a]), null, 'no expectations before: a run counts another way');
  t.equal(listAdditions([a], []), null, 'none after');
  t.same([...listAdditions([a, b], [b, a])!.values()], [], 'the same components in another order add nothing');
  t.same([...listAdditions([a], [a, b, c, c])!.values()], [{ rule_id: 'r1', directive_id: 'd1', added: 1 }, { rule_id: 'r1', directive_id: 'd2', added: 1 }],
    'counted by directive, each component once');
});
