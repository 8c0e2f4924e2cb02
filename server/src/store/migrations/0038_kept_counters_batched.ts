/**
 * Version 38: the kept counters move once per key for a batch of compliance rows, not once per
 * row.
 *
 * On PostgreSQL, the statement triggers of compliance directive rows and of policy group
 * memberships write the counters' logs summed by key: one log row per counter a statement moves
 * instead of one per row it wrote. Migrations 23 and 25 made these functions statement triggers,
 * but each still appended a log row for every row of its transition table. A first policy
 * generation at 100,000 nodes writes about 680,000 directive rows and deletes 490,000, and so
 * appended 1.2 million rows to kept_directives_log, 590,000 to kept_rules_log and 780,000 to
 * kept_groups_log (two per membership), which the sweep then read back and folded. The statements
 * appending them took 9.3 s of that generation's database time (pg_stat_statements, with the
 * lookups of each row's node). A statement's rows now go to the logs summed by (rule, directive,
 * class, mode), (rule, class) and (group, class, mode): a few dozen rows; the same statements took
 * 5.7 s, most of it the lookups, which are left as they were. The counters' values are the same:
 * the readers and the fold sum the logs by key, and nothing reads a log row on its own
 * (compliance/kept.ts keptSource, kept-postgres.ts).
 *
 * The functions are made again under their names, so the triggers of migrations 23 and 25 call
 * them unchanged. A statement that moves nothing appends nothing, as before (an empty transition
 * table sums to no group).
 *
 * SQLite has no logs: its triggers update the counters in place, one row at a time. Those of
 * the directive counters (kept_directives, kept_rules) were 3.4 s of the same generation's 20.8 s,
 * those of the memberships (kept_groups) 1.3 s. The batch writers of a generation (its policies,
 * its memberships) now move their nodes' counters themselves, summed by key
 * (compliance/sqlite-batch-counters.ts): a writer names the nodes whose rows it changes in
 * kept_counters_deferred before it writes them, and drops the names after, in the same
 * transaction. The directive rows' and memberships' triggers, and the node_compliance triggers'
 * moves of a node's directive rows and rules, leave the nodes named there alone; every other
 * writer's rows (a run, one node's policy, the sweep, a node's deletion) are counted by the
 * triggers as before.
 */
import type { Migration } from './index.js';
import { C, pClassRow, sqliteComplianceTriggers, sqliteDirectiveTriggers } from './0023_kept_compliance.js';
import { sqliteGroupHooks, sqliteMemberTriggers } from './0025_kept_groups.js';

const cols = C.join(', ');
const sums = (r: string) => C.map((c) => `sum(${r}.${c})`).join(', ');

// ---- SQLite ----------------------------------------------------------------------------------

/** Node `id` is not one a batch writer counts itself. */
const counted = (id: string) => `NOT EXISTS (SELECT 1 FROM kept_counters_deferred WHERE node_id = ${id})`;

const sqlite = `CREATE TABLE kept_counters_deferred (node_id TEXT PRIMARY KEY) STRICT, WITHOUT ROWID;
DROP TRIGGER kept_directive_insert;
DROP TRIGGER kept_directive_update;
DROP TRIGGER kept_directive_delete;
DROP TRIGGER kept_compliance_insert;
DROP TRIGGER kept_compliance_update;
DROP TRIGGER kept_compliance_delete;
DROP TRIGGER kept_groups_member_insert;
DROP TRIGGER kept_groups_member_delete;
${sqliteComplianceTriggers(sqliteGroupHooks, counted)}${sqliteDirectiveTriggers((r) => counted(`${r}.node_id`))}${sqliteMemberTriggers(counted)}`;

// ---- PostgreSQL ------------------------------------------------------------------------------

/** Directive rows of `table` counted under their node's kept class and mode, with `sign`. */
const dirRows = (table: string, sign: string) => `SELECT x.rule_id, x.directive_id, k.class, k.mode, ${sign} AS nodes, ${C.map((c) => `${sign} * x.${c} AS ${c}`).join(', ')}
      FROM ${table} x JOIN kept_nodes k ON k.node_id = x.node_id`;
/** The directives' log rows of the tables' rows, summed by counter. */
const directives = (...parts: string[]) => `INSERT INTO kept_directives_log (rule_id, directive_id, class, mode, nodes, ${cols})
    SELECT f.rule_id, f.directive_id, f.class, f.mode, sum(f.nodes), ${sums('f')} FROM (${parts.join('\n      UNION ALL ')}) f
    GROUP BY f.rule_id, f.directive_id, f.class, f.mode;`;

const directiveFunctions = `CREATE OR REPLACE FUNCTION kept_directives_added() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  ${directives(dirRows('added', '1'))}
  -- A node new to a rule: every one of its rows under the rule is in this statement.
  INSERT INTO kept_rules_log (rule_id, class, nodes)
    SELECT a.rule_id, k.class, count(*) FROM (SELECT node_id, rule_id, count(*) AS n FROM added GROUP BY 1, 2) a JOIN kept_nodes k ON k.node_id = a.node_id
    WHERE (SELECT count(*) FROM node_compliance_directives d WHERE d.node_id = a.node_id AND d.rule_id = a.rule_id) = a.n
    GROUP BY a.rule_id, k.class;
  RETURN NULL;
END $f$;
CREATE OR REPLACE FUNCTION kept_directives_changed() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  ${directives(dirRows('old_rows', '-1'), dirRows('new_rows', '1'))}
  RETURN NULL;
END $f$;
CREATE OR REPLACE FUNCTION kept_directives_removed() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  ${directives(dirRows('removed', '-1'))}
  -- A node that left a rule: none of its rows under the rule is left.
  INSERT INTO kept_rules_log (rule_id, class, nodes)
    SELECT r.rule_id, k.class, -count(*) FROM (SELECT DISTINCT node_id, rule_id FROM removed) r JOIN kept_nodes k ON k.node_id = r.node_id
    WHERE NOT EXISTS (SELECT 1 FROM node_compliance_directives d WHERE d.node_id = r.node_id AND d.rule_id = r.rule_id)
    GROUP BY r.rule_id, k.class;
  RETURN NULL;
END $f$;
`;

/** The memberships of a transition table counted (sign 1) or taken (-1), summed by counter. */
const members = (table: string, sign: string) => `INSERT INTO kept_groups_log (group_id, class, mode, nodes)
    SELECT m.group_id, ${pClassRow('n')}, -1, ${sign} * count(*) FROM ${table} m JOIN nodes n ON n.id = m.node_id GROUP BY 1, 2;
  INSERT INTO kept_groups_log (group_id, class, mode, nodes, ${cols})
    SELECT m.group_id, k.class, k.mode, ${sign} * count(*), ${C.map((c) => `${sign} * sum(t.${c})`).join(', ')}
    FROM ${table} m JOIN kept_nodes k ON k.node_id = m.node_id JOIN node_compliance t ON t.node_id = m.node_id
    GROUP BY m.group_id, k.class, k.mode;`;

const membersFunctions = `CREATE OR REPLACE FUNCTION kept_groups_members_added() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  ${members('added', '1')}
  RETURN NULL;
END $f$;
CREATE OR REPLACE FUNCTION kept_groups_members_removed() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  ${members('removed', '-1')}
  RETURN NULL;
END $f$;
`;

export const keptCountersBatched: Migration = { version: 38, name: 'kept_counters_batched', sqlite, postgres: directiveFunctions + membersFunctions };
