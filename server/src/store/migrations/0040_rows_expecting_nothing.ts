/**
 * Version 40: on SQLite, the directive rows that expect no item, indexed by rule.
 *
 * A rule's drill-down (compliance/kept-targets.ts) lists last the nodes without a key: among
 * them the agents out of time mode 0 (applying, or silent) whose rows under the rule expect no
 * item, only unexpected ones or none. Those are few, and most often there are none; but to find
 * them the reader walked every agent out of mode 0 and looked at its rows under the rule. A page
 * in the second half of a rule's nodes, read from the end, walks that part first: on the console
 * bench's fleet (100,000 nodes, 97,663 agents out of mode 0, none of them expecting nothing) the
 * last page of a rule took 273–283 ms on SQLite and 224–482 ms on PostgreSQL (quiet, and beside a
 * fleet run), nearly all of it in this part.
 *
 * `node_compliance_directives_nothing_idx (rule_id, node_id, directive_id)` holds only the rows
 * whose expected items (every count but `unexpected`) add up to 0. The SQLite reader starts from
 * it, so that part costs what it finds. Its condition is written as `expectsNothing` makes it: a
 * statement uses the index only where its condition is the index's, word for word.
 *
 * PostgreSQL: nothing. A run's update of a directive row changes its counts, which the index's
 * condition reads, so no such update could be a HOT one: each would also write an entry into the
 * table's primary key. Measured with `bench/store-insert.mjs --only postgres` (500 nodes, 1,500
 * next runs, three runs each, alternating): none of 10,634 updates was HOT with the index against
 * 6,242 without, and the database's CPU per run log rose from 820–1,100 µs (median 873) to
 * 1,027–1,207 µs (median 1,040). Every run would pay that for a page of the console; PostgreSQL's
 * reader walks the agents out of mode 0 as before.
 */
import type { Migration } from './index.js';

/** The counts of the expected items, in the order of the index's condition. */
const EXPECTED = ['success', 'repaired', 'error', 'non_compliant', 'audit_compliant', 'not_applicable', 'missing'];

/** The row `r` (an alias, or '' for the table's own columns) expects no item: the index's condition. */
export const expectsNothing = (r: string) => `${EXPECTED.map((c) => (r ? `${r}.${c}` : c)).join(' + ')} = 0`;

const sqlite = `CREATE INDEX node_compliance_directives_nothing_idx ON node_compliance_directives (rule_id, node_id, directive_id)
  WHERE ${expectsNothing('')};`;

export const rowsExpectingNothing: Migration = { version: 40, name: 'rows_expecting_nothing', sqlite, postgres: 'SELECT 1;' };
