/**
 * Version 39: on PostgreSQL, the kept counters' update triggers find whether anything moved
 * without a nested loop over their two transition tables.
 *
 * The statement functions of node_compliance's updates (migration 33) and of kept_nodes'
 * updates (migrations 33 and 37) stop early when nothing moved: `IF NOT EXISTS (SELECT ... FROM
 * new_rows n JOIN old_rows o ON o.node_id = n.node_id ...)`. For an EXISTS the planner takes the
 * plan that finds a first row soonest, and it expects to find one: a nested loop that scans
 * old_rows once for every row of new_rows. A function's plans are kept for the connection from
 * the call that made them. When nothing moved, that loop compares every row with every other. The
 * console bench's sweep of 59,328 nodes after its generation took 107 s on PostgreSQL, 104.6 s of
 * it in this check (pg_stat_statements), where SQLite's generation and sweep took 10 s.
 *
 * The rows are now read from a MATERIALIZED CTE: it is planned for all of its rows (a hash or
 * merge join of the two tables, linear), and still read only until a moving row is found. In psql,
 * on a table of 60,000 rows with such a trigger, an update of 20,000 rows that moves nothing, as a
 * connection's first, took 11.4 s with the EXISTS (a nested loop; 67 ms when six updates of 64
 * rows had come first), and 121 ms with the CTE; 60,000 rows after six of 64 took 301 ms.
 *
 * SQLite: nothing (its triggers run row by row).
 */
import type { Migration } from './index.js';
import { pgComplianceChangedFunction } from './0033_kept_statement_triggers.js';
import { pgTargetsNodesChanged } from './0037_kept_targets_normal.js';

export const keptEarlyStops: Migration = {
  version: 39, name: 'kept_early_stops', sqlite: 'SELECT 1;', postgres: pgComplianceChangedFunction(true) + pgTargetsNodesChanged(true),
};
