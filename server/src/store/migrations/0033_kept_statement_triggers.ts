/**
 * Version 33: on PostgreSQL, the kept counters move once per statement that writes compliance
 * rows, not once per row.
 *
 * Until 32, every node_compliance row a statement inserted or updated ran migration 23's
 * function (made again by 25 and 27) on its own: the kept advisory lock, the node's class, its
 * time mode, its kept_nodes row, then a log row per counter it moved (the fleet's, each group's,
 * each directive row's, each rule's), and each kept_nodes row it wrote ran migration 28's
 * function, which rewrote that node's drill-down keys. A policy generation of 100,000 nodes made
 * 100,000 of each; an ingest batch of 64 steady-state runs, which moves no counter, still read
 * the class, the mode and the kept row of each of its nodes one statement at a time.
 *
 * Now:
 * - kept_compliance_added / kept_compliance_changed: statement triggers on node_compliance
 *   (insert, update) with its transition tables. One statement reads every written row with its
 *   node's class, its mode and its kept row, and writes the moved counters to the logs summed by
 *   key (one log row per fleet class and mode, group, directive or rule, not one per node), then
 *   the kept_nodes rows that changed. What moves is what the row function moved, row by row: a
 *   new kept node adds its counts, its directive rows and its rules; a kept node whose counts,
 *   class or mode changed takes its old counts (an update) and adds its new ones, and moves its
 *   directive rows when its class or mode changed, its rules when its class did. Every data-
 *   modifying part of that statement reads the same snapshot: the kept rows as they were before.
 *   An update that moves nothing (a steady run's) stops after one statement of lookups.
 * - kept_targets_nodes_added / _changed / _removed: statement triggers on kept_nodes, bringing
 *   the drill-down keys of the nodes inserted, or whose class or mode moved, up to date in two
 *   statements for all of them (written where they changed, stale ones dropped by key, as
 *   migration 31 does for compliance rows), and dropping the keys of the nodes removed.
 * - kept_compliance_trg keeps the deletion of a compliance row, row by row: it must read the
 *   node's directive rows before a node's deletion cascades to them.
 *
 * SQLite: nothing changes (its triggers run in the writer's process, and its batch writers defer
 * the drill-down keys already, migration 29).
 */
import type { Migration } from './index.js';
import { C, pClassRow } from './0023_kept_compliance.js';
import { KEPT_LOCK_ARGS } from './0025_kept_groups.js';
import { expected, share } from './0027_kept_shares.js';
import { upsert } from './0028_kept_targets.js';

const cols = C.join(', ');
const sums = (r: string) => C.map((c) => `sum(${r}.${c})`).join(', ');
/** Counts of `r` with `sign`, named as the counters. */
const signed = (sign: string, r: string) => C.map((c) => `${sign} * ${r}.${c} AS ${c}`).join(', ');
/** Migration 23's time mode of row `r`, against the thresholds read into the function's variables. */
const pModeOf = (r: string) => `CASE WHEN ${r}.answered_s IS NOT NULL AND ${r}.answered_s + ${r}.keep_last_s <= swept_silent THEN 2
  WHEN ${r}.applying_since_s IS NOT NULL AND ${r}.applying_since_s > swept_applying THEN 1 ELSE 0 END`;

/**
 * The statement moving the counters for the compliance rows of a statement: `update` when the
 * rows were updated (old_rows and new_rows), else inserted (new_rows). `planned`: the update's
 * early stop reads the rows from a CTE, planned for all of them (migration 39).
 */
function moveCounters(update: boolean, planned = false): string {
  /** The rows with their nodes' class, mode and kept row, from `from` (n), the old counts as `oldOf(c)`. */
  const rowsOf = (from: string, oldOf: (c: string) => string) => `SELECT n.node_id, ${C.map((c) => `n.${c}`).join(', ')}${update ? `, ${C.map((c) => `${oldOf(c)} AS old_${c}`).join(', ')}` : ''},
        CASE WHEN x.id IS NULL THEN 'none' ELSE ${pClassRow('x')} END AS cls, ${pModeOf('n')} AS md, k.class AS kc, k.mode AS km, k.node_id IS NOT NULL AS kept
      FROM ${from} LEFT JOIN nodes x ON x.id = n.node_id LEFT JOIN kept_nodes k ON k.node_id = n.node_id`;
  const oldRows = update ? ' JOIN old_rows o ON o.node_id = n.node_id' : '';
  const countsDiffer = `(${C.map((c) => `r.old_${c}`).join(', ')}) IS DISTINCT FROM (${C.map((c) => `r.${c}`).join(', ')})`;
  // An update that leaves the counts, class and mode of a kept node as they were moves nothing.
  const moving = update ? ` WHERE NOT (r.kept AND r.kc = r.cls AND r.km = r.md AND NOT ${countsDiffer})` : '';
  const olds = C.map((c) => `-w.old_${c} AS ${c}`).join(', ');
  /** A kept node's old counts taken under its kept class and mode (an update only). */
  const take = (select: string, from: string) => (update ? `${select} ${from} WHERE w.kept\n        UNION ALL ` : '');
  const rows = rowsOf(`new_rows n${oldRows}`, (c) => `o.${c}`);
  // Most updates move nothing (a steady run moves only its base run and time marks): they stop
  // at the lookups, before a statement that writes five tables is started. Planned (migration
  // 39), the old and new rows are paired in a CTE, planned for all of them (a hash join), and
  // only then each looked up by key until one moves.
  const pairs = `SELECT n.node_id, n.answered_s, n.keep_last_s, n.applying_since_s, ${C.map((c) => `n.${c}, o.${c} AS old_${c}`).join(', ')}
      FROM new_rows n JOIN old_rows o ON o.node_id = n.node_id`;
  const none = !update ? '' : planned ? `IF NOT EXISTS (WITH p AS MATERIALIZED (${pairs})
    SELECT 1 FROM (${rowsOf('p n', (c) => `n.old_${c}`)}) r${moving}) THEN RETURN NULL; END IF;\n  `
    : `IF NOT EXISTS (SELECT 1 FROM (${rows}) r${moving}) THEN RETURN NULL; END IF;\n  `;
  return `${none}WITH r AS (${rows}),
    w AS (SELECT * FROM r${moving}),
    -- The nodes whose directive rows move: new to kept_nodes, or counted under another class or mode.
    mv AS (SELECT * FROM w WHERE NOT w.kept OR w.kc IS DISTINCT FROM w.cls OR w.km IS DISTINCT FROM w.md),
    fleet AS (INSERT INTO kept_fleet_log (class, mode, nodes, ${cols})
      SELECT f.class, f.mode, sum(f.nodes), ${sums('f')} FROM (
        ${take(`SELECT w.kc AS class, w.km AS mode, -1 AS nodes, ${olds}`, 'FROM w')}SELECT w.cls AS class, w.md AS mode, 1 AS nodes, ${C.map((c) => `w.${c}`).join(', ')} FROM w) f
      GROUP BY f.class, f.mode),
    grp AS (INSERT INTO kept_groups_log (group_id, class, mode, nodes, ${cols})
      SELECT f.group_id, f.class, f.mode, sum(f.nodes), ${sums('f')} FROM (
        ${take(`SELECT g.group_id, w.kc AS class, w.km AS mode, -1 AS nodes, ${olds}`, 'FROM w JOIN policy_group_members g ON g.node_id = w.node_id')}SELECT g.group_id, w.cls AS class, w.md AS mode, 1 AS nodes, ${C.map((c) => `w.${c}`).join(', ')}
          FROM w JOIN policy_group_members g ON g.node_id = w.node_id) f
      GROUP BY f.group_id, f.class, f.mode),
    dir AS (INSERT INTO kept_directives_log (rule_id, directive_id, class, mode, nodes, ${cols})
      SELECT f.rule_id, f.directive_id, f.class, f.mode, sum(f.nodes), ${sums('f')} FROM (
        SELECT d.rule_id, d.directive_id, mv.kc AS class, mv.km AS mode, -1 AS nodes, ${signed('-1', 'd')}
          FROM mv JOIN node_compliance_directives d ON d.node_id = mv.node_id WHERE mv.kept
        UNION ALL SELECT d.rule_id, d.directive_id, mv.cls, mv.md, 1, ${C.map((c) => `d.${c}`).join(', ')}
          FROM mv JOIN node_compliance_directives d ON d.node_id = mv.node_id) f
      GROUP BY f.rule_id, f.directive_id, f.class, f.mode),
    rul AS (INSERT INTO kept_rules_log (rule_id, class, nodes)
      SELECT f.rule_id, f.class, sum(f.nodes) FROM (
        SELECT DISTINCT d.node_id, d.rule_id, mv.kc AS class, -1 AS nodes
          FROM mv JOIN node_compliance_directives d ON d.node_id = mv.node_id WHERE mv.kept AND mv.kc IS DISTINCT FROM mv.cls
        UNION ALL SELECT DISTINCT d.node_id, d.rule_id, mv.cls, 1
          FROM mv JOIN node_compliance_directives d ON d.node_id = mv.node_id WHERE NOT mv.kept OR mv.kc IS DISTINCT FROM mv.cls) f
      GROUP BY f.rule_id, f.class)
  INSERT INTO kept_nodes AS k (node_id, class, mode, share, expected)
    SELECT w.node_id, w.cls, w.md, ${share('w', 'w.md')}, ${expected('w')} FROM w
    ON CONFLICT (node_id) DO UPDATE SET class = excluded.class, mode = excluded.mode, share = excluded.share, expected = excluded.expected
      WHERE (k.class, k.mode, k.share, k.expected) IS DISTINCT FROM (excluded.class, excluded.mode, excluded.share, excluded.expected);`;
}

/** Nodes whose keys are brought up to date, as a subquery over node ids. */
const refresh = (nodes: string) => `${upsert(`d.node_id IN ${nodes}`, `d.node_id IN ${nodes}`, '', 'IS DISTINCT FROM')}
  DELETE FROM kept_targets t WHERE t.node_id IN ${nodes}
    AND NOT EXISTS (SELECT 1 FROM node_compliance_directives d JOIN kept_nodes k ON k.node_id = d.node_id
      WHERE k.class = 'agent' AND d.node_id = t.node_id AND d.rule_id = t.rule_id AND (t.directive_id = '' OR d.directive_id = t.directive_id));`;
const MOVED = '(SELECT n.node_id FROM new_rows n JOIN old_rows o ON o.node_id = n.node_id WHERE (o.class, o.mode) IS DISTINCT FROM (n.class, n.mode))';

/** Migration 23's deletion branch, with migration 25's group hook: all that is left of the row function. */
const complianceDeleteFunction = `CREATE OR REPLACE FUNCTION kept_compliance_trg() RETURNS trigger LANGUAGE plpgsql
  SET enable_seqscan = off SET jit = off AS $f$
DECLARE
  k record;
BEGIN
  SELECT * INTO k FROM kept_nodes WHERE node_id = OLD.node_id;
  IF FOUND THEN
    INSERT INTO kept_fleet_log (class, mode, nodes, ${cols}) VALUES (k.class, k.mode, -1, ${C.map((c) => `-OLD.${c}`).join(', ')});
    INSERT INTO kept_directives_log (rule_id, directive_id, class, mode, nodes, ${cols})
      SELECT d.rule_id, d.directive_id, k.class, k.mode, -1, ${C.map((c) => `-d.${c}`).join(', ')}
      FROM node_compliance_directives d WHERE d.node_id = OLD.node_id;
    INSERT INTO kept_rules_log (rule_id, class, nodes) SELECT DISTINCT d.rule_id, k.class, -1 FROM node_compliance_directives d WHERE d.node_id = OLD.node_id;
    INSERT INTO kept_groups_log (group_id, class, mode, nodes, ${cols})
      SELECT g.group_id, k.class, k.mode, -1, ${C.map((c) => `-OLD.${c}`).join(', ')} FROM policy_group_members g WHERE g.node_id = OLD.node_id;
    DELETE FROM kept_nodes WHERE node_id = OLD.node_id;
  END IF;
  RETURN OLD;
END $f$;
`;

/**
 * Each statement of these functions starts from the rows a statement wrote and looks their
 * nodes' rows up by key. As migration 32 does for the row functions, they plan without
 * sequential scans (and without jit), so that a plan kept from a table analysed empty does not
 * scan it whole once it has filled.
 */
const PLANS = 'SET enable_seqscan = off SET jit = off';

/** The statement function of node_compliance's inserts (`update` false) or updates (true). */
const complianceFunction = (name: string, update: boolean, planned = false) => `CREATE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql ${PLANS} AS $f$
DECLARE
  swept_silent bigint;
  swept_applying bigint;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM new_rows) THEN RETURN NULL; END IF;
  PERFORM pg_advisory_xact_lock_shared(${KEPT_LOCK_ARGS});
  -- The thresholds as values: joined as a table, kept_sweep's one row is estimated at hundreds,
  -- and every join below would be planned for that many times the rows written.
  SELECT s.silent_before, s.applying_after INTO swept_silent, swept_applying FROM kept_sweep s;
  ${moveCounters(update, planned)}
  RETURN NULL;
END $f$;
`;

/**
 * The statement function of node_compliance's updates, made again (`planned`: with migration 39's
 * early stop; without, as this migration made it, for tests that undo 39).
 */
export const pgComplianceChangedFunction = (planned: boolean) => complianceFunction('kept_compliance_changed', true, planned)
  .replace('CREATE FUNCTION', 'CREATE OR REPLACE FUNCTION');

/**
 * The statement functions bringing the drill-down keys of the kept nodes inserted, or whose class or
 * mode moved, up to date (migration 37 makes them again; tests that undo it make these again).
 */
export const pgTargetsNodesFunctions = `CREATE FUNCTION kept_targets_nodes_added() RETURNS trigger LANGUAGE plpgsql ${PLANS} AS $f$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM added) THEN RETURN NULL; END IF;
  ${refresh('(SELECT node_id FROM added)')}
  RETURN NULL;
END $f$;
CREATE FUNCTION kept_targets_nodes_changed() RETURNS trigger LANGUAGE plpgsql ${PLANS} AS $f$
BEGIN
  IF NOT EXISTS ${MOVED} THEN RETURN NULL; END IF;
  ${refresh(MOVED)}
  RETURN NULL;
END $f$;
`;

const postgres = `
DROP TRIGGER kept_compliance_write ON node_compliance;
${complianceDeleteFunction}
${complianceFunction('kept_compliance_added', false)}${complianceFunction('kept_compliance_changed', true)}CREATE TRIGGER kept_compliance_insert AFTER INSERT ON node_compliance REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION kept_compliance_added();
CREATE TRIGGER kept_compliance_update AFTER UPDATE ON node_compliance REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION kept_compliance_changed();

DROP TRIGGER kept_targets_node_write ON kept_nodes;
DROP TRIGGER kept_targets_node_move ON kept_nodes;
DROP FUNCTION kept_targets_node_trg();
${pgTargetsNodesFunctions}CREATE FUNCTION kept_targets_nodes_removed() RETURNS trigger LANGUAGE plpgsql ${PLANS} AS $f$
BEGIN
  DELETE FROM kept_targets WHERE node_id IN (SELECT node_id FROM removed);
  RETURN NULL;
END $f$;
CREATE TRIGGER kept_targets_nodes_insert AFTER INSERT ON kept_nodes REFERENCING NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION kept_targets_nodes_added();
CREATE TRIGGER kept_targets_nodes_update AFTER UPDATE ON kept_nodes REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION kept_targets_nodes_changed();
CREATE TRIGGER kept_targets_nodes_delete AFTER DELETE ON kept_nodes REFERENCING OLD TABLE AS removed
  FOR EACH STATEMENT EXECUTE FUNCTION kept_targets_nodes_removed();
`;

export const keptStatementTriggers: Migration = { version: 33, name: 'kept_statement_triggers', sqlite: 'SELECT 1;', postgres };
