/**
 * The pieces of a compliance write that were made cheaper for the ingest: `zeroCounts` is a
 * literal that must hold every state in the module's order, and `directiveChangesRaw` (rows read
 * as arrays) must pick exactly the directives whose counts changed, are new or are gone.
 */
import t from 'tap';
import { COMPLIANCE_STATES, zeroCounts } from '@capstan/shared';
import { COUNT_COLUMNS, DIRECTIVE_ROW_COLUMNS, directiveChangesRaw } from '@capstan/server/store/compliance/rows';

t.test('zeroCounts holds every state at 0, in order', async (t) => {
  const z = zeroCounts();
  t.same(Object.keys(z), [...COMPLIANCE_STATES]);
  t.ok(Object.values(z).every((v) => v === 0));
  t.not(zeroCounts(), z, 'a fresh object each time');
});

t.test('directiveChangesRaw: changed, new and gone directives only', async (t) => {
  t.same(DIRECTIVE_ROW_COLUMNS, ['rule_id', 'directive_id', ...COUNT_COLUMNS]);
  const counts = (success: number, repaired: number) => ({ ...zeroCounts(), success, repaired });
  const row = (r: string, d: string, success: number, repaired: number) => [r, d, ...COUNT_COLUMNS.map((c) => counts(success, repaired)[c])];
  const stored = [row('r1', 'd1', 3, 0), row('r1', 'd2', 2, 1), row('r2', 'd3', 1, 0)];
  const next = [
    { rule_id: 'r1', directive_id: 'd1', counts: counts(3, 0) }, // same
    { rule_id: 'r1', directive_id: 'd2', counts: counts(3, 0) }, // changed
    { rule_id: 'r3', directive_id: 'd4', counts: counts(1, 0) }, // new
  ];
  const { upsert, remove } = directiveChangesRaw(stored, next);
  t.same(upsert.map((d) => d.directive_id), ['d2', 'd4']);
  t.same(remove, [{ rule_id: 'r2', directive_id: 'd3' }]);
  // counts read back as text (or bigint strings) compare by value
  t.same(directiveChangesRaw([['r1', 'd1', ...COUNT_COLUMNS.map((c) => String(counts(3, 0)[c]))]], next.slice(0, 1)).upsert, []);
  t.same(directiveChangesRaw([], next).upsert, next, 'nothing stored: everything is written');
});
