/**
 * Version 32: on PostgreSQL, the kept counters' per-row trigger functions plan without
 * sequential scans.
 *
 * Each of their statements reads one node's rows by an index (its groups, its directive rows,
 * its kept row). A connection plans such a statement once and keeps the plan until the table is
 * analysed again; planned while the table was empty, or had been analysed empty (a new install,
 * a table a migration has just made, a registry loaded in bulk), it scans the table whole and
 * keeps doing so while the table fills. The store analyses the tables its writes grow
 * (postgres/statistics.ts), but only after a write commits: a generation's first batches, slowed
 * by those scans, commit late, and the analysis that would end the scans waits for them. Seen in
 * a first generation of 20,000 nodes: 3,982 scans of policy_group_members, 1.2 ms each, from the
 * group hook of kept_compliance_trg, until its first ANALYZE 11 s in.
 *
 * With enable_seqscan off inside these functions only (and jit, see below), a plan made on an
 * empty table looks its rows up by index as one made on a full one does. Their statements look
 * a node's rows up by key; the one row of kept_sweep, which has no index to use, is still scanned
 * (the setting makes a scan dear, not impossible). The statement-level trigger functions, which
 * join a batch's transition table to these tables, keep the planner's choice.
 *
 * SQLite plans each trigger statement when it runs: nothing changes there.
 */
import type { Migration } from './index.js';

const ROW_FUNCTIONS = ['kept_nodes_trg', 'kept_compliance_trg', 'kept_node_counts_trg', 'kept_groups_node_trg', 'kept_targets_node_trg'];

// jit off with it: a statement that has no index to use (the one row of kept_sweep) is still
// scanned, at a cost the setting makes high enough to cross jit_above_cost, and a connection
// whose jit is on (the store's are off) then compiled it at every row: 6 to 30 ms each.
const postgres = ROW_FUNCTIONS.map((f) => `ALTER FUNCTION ${f}() SET enable_seqscan = off;\nALTER FUNCTION ${f}() SET jit = off;`).join('\n');

export const keptRowPlans: Migration = { version: 32, name: 'kept_row_plans', sqlite: 'SELECT 1;', postgres };
