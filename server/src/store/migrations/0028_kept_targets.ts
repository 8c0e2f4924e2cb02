/**
 * Version 28: each node's compliance for each rule and each (rule, directive) kept with its sort
 * key, so that a rule's nodes (the drill-down from a rule or a directive to the nodes under it)
 * are read a page at a time from an index in order instead of summed, judged and sorted over
 * every node under the rule.
 *
 * kept_targets has one row per accepted node with an agent (kept class `agent`) and rule it has
 * compliance rows for (directive_id '': the rule's directives summed), and one per (rule,
 * directive) row, with:
 * - share: the node's compliant share for it as its kept time mode decides it (the drill-down's
 *   sort key at the kept thresholds): NULL when it counts no item at all (sorted after every
 *   other in both orders), 0 when applying or silent with an expected item, else (success +
 *   repaired + audit compliant + not applicable) / every item, the same double the readers compute;
 * - states: a bit per compliance state (COMPLIANCE_STATES order) holding at least one item under
 *   that mode (the drill-down's state filter).
 * kept_targets_key_idx walks one rule's (or directive's) nodes in key order.
 *
 * The rows move in the transaction that moves their sources: a compliance row added or whose
 * counts moved (node_compliance_directives) rewrites its own row and its rule's, a deleted one
 * that rule's rows of the node; a change of its kept
 * class or mode (kept_nodes, which migration 23's triggers and the sweep move) rewrites all of
 * the node's rows, or drops them when it is no longer an accepted node with an agent. A row is
 * written only when its key or states changed. A reader at another moment takes the nodes whose
 * thresholds lie between the swept ones and its own afresh (compliance/kept-targets.ts).
 */
import { COMPLIANCE_STATES } from '@capstan/shared/compliance/compute';
import type { Migration } from './index.js';
import { C } from './0023_kept_compliance.js';

const GOOD = ['success', 'repaired', 'audit_compliant', 'not_applicable'];
const EXPECTED = C.filter((c) => c !== 'unexpected');
const sum = (r: string, states: readonly string[]) => `(${states.map((c) => `${r}.${c}`).join(' + ')})`;
const bit = (state: string) => 1 << COMPLIANCE_STATES.indexOf(state as (typeof COMPLIANCE_STATES)[number]);

/** The sort key of counts `r` under kept mode `mode` (rows.ts targetNodesSql decides it so at read time). */
const share = (r: string, mode: string) => `CASE WHEN ${mode} = 0 THEN (CASE WHEN ${sum(r, C)} = 0 THEN NULL
    ELSE CAST(${sum(r, GOOD)} AS DOUBLE PRECISION) / ${sum(r, C)} END)
  WHEN ${sum(r, EXPECTED)} = 0 THEN NULL ELSE 0.0 END`;
/** The state bits of counts `r` under kept mode `mode`: the run's states, or `applying` (1) / `no_answer` (2) when an item is expected. */
const states = (r: string, mode: string) => `CASE WHEN ${mode} = 0 THEN ${C.map((c) => `(CASE WHEN ${r}.${c} > 0 THEN ${bit(c)} ELSE 0 END)`).join(' + ')}
  WHEN ${sum(r, EXPECTED)} = 0 THEN 0 WHEN ${mode} = 1 THEN ${bit('applying')} ELSE ${bit('no_answer')} END`;

/** The bit of a state in `states`, for readers filtering on one. */
export const stateBit = bit;
/** The sort key and state bits of a key, for later versions' statements. */
export { share as keyShare, states as keyStates };

/**
 * The rows kept_targets must hold for the compliance rows `d` (node_compliance_directives)
 * matching `where` (over `d`): rule_id, directive_id, node_id, share, states; the rule's rows
 * (directive_id '') from the rows matching `ruleWhere`, which must cover whole (node, rule) pairs.
 */
export function targetRows(where: string, ruleWhere = where): string {
  return `SELECT d.rule_id, d.directive_id, d.node_id, ${share('d', 'k.mode')} AS share, ${states('d', 'k.mode')} AS states
    FROM node_compliance_directives d JOIN kept_nodes k ON k.node_id = d.node_id WHERE k.class = 'agent' AND ${where}
  UNION ALL ${ruleTargetRows(ruleWhere)}`;
}

/** The rules' rows alone (directive_id '') of targetRows, from the compliance rows matching `ruleWhere`. */
export function ruleTargetRows(ruleWhere: string): string {
  const sums = C.map((c) => `sum(d.${c}) AS ${c}`).join(', ');
  return `SELECT s.rule_id, '', s.node_id, ${share('s', 's.mode')}, ${states('s', 's.mode')}
    FROM (SELECT d.rule_id, d.node_id, k.mode, ${sums}
      FROM node_compliance_directives d JOIN kept_nodes k ON k.node_id = d.node_id WHERE k.class = 'agent' AND ${ruleWhere}
      GROUP BY d.rule_id, d.node_id, k.mode) s`;
}

/**
 * The statement writing targetRows(`where`, `ruleWhere`) where they changed. Enough alone after
 * rows were added or their counts changed: no row kept_targets holds can have gone then.
 * `filler` is what SQLite needs between a SELECT and ON CONFLICT.
 */
export function upsert(where: string, ruleWhere: string, filler: string, distinct: string): string {
  return `INSERT INTO kept_targets (rule_id, directive_id, node_id, share, states)
    SELECT * FROM (${targetRows(where, ruleWhere)}) r${filler}
    ON CONFLICT (node_id, rule_id, directive_id) DO UPDATE SET share = excluded.share, states = excluded.states
      WHERE (kept_targets.share, kept_targets.states) ${distinct} (excluded.share, excluded.states);`;
}

/**
 * Statements bringing kept_targets to targetRows(`where`) within `scope` (a condition over the
 * kept_targets columns, covering every row `where` can answer): changed rows written, rows
 * answered no more dropped (after a deletion, or a node's class or mode moving).
 */
function refresh(where: string, scope: string, filler: string, distinct: string): string {
  return `${upsert(where, where, filler, distinct)}
  DELETE FROM kept_targets WHERE ${scope}
    AND (node_id, rule_id, directive_id) NOT IN (SELECT node_id, rule_id, directive_id FROM (${targetRows(where)}) r);`;
}

// ---- SQLite ----------------------------------------------------------------------------------

const sRefresh = (where: string, scope: string) => refresh(where, scope, ' WHERE true', 'IS NOT');
/** A node's rows for one compliance row (`r`: NEW) and its rule, after the row was added or its counts changed. */
export const sRow = (r: string) => upsert(`d.node_id = ${r}.node_id AND d.rule_id = ${r}.rule_id AND d.directive_id = ${r}.directive_id`,
  `d.node_id = ${r}.node_id AND d.rule_id = ${r}.rule_id`, ' WHERE true', 'IS NOT');
/** A node's rows for one rule, after a compliance row of it (`r`: OLD) went. */
export const sRule = (r: string) => sRefresh(`d.node_id = ${r}.node_id AND d.rule_id = ${r}.rule_id`, `node_id = ${r}.node_id AND rule_id = ${r}.rule_id`);
export const sNode = (r: string) => sRefresh(`d.node_id = ${r}.node_id`, `node_id = ${r}.node_id`);
export const countsDiffer = C.map((c) => `OLD.${c} IS NOT NEW.${c}`).join(' OR ');

const sqliteTable = `
CREATE TABLE kept_targets (rule_id TEXT NOT NULL, directive_id TEXT NOT NULL, node_id TEXT NOT NULL, share REAL, states INTEGER NOT NULL,
  PRIMARY KEY (node_id, rule_id, directive_id)) STRICT, WITHOUT ROWID;
`;

/** Every node's rows from the stored compliance rows, on SQLite (the migration; a bulk loader after migration 27's refill). */
export const sqliteKeptTargetsRefill = `DELETE FROM kept_targets;
INSERT INTO kept_targets (rule_id, directive_id, node_id, share, states) ${targetRows('1')};
`;

/** The SQLite triggers of this version (migration 29 makes them again, deferrable). */
export const sqliteTargetTriggers = `
CREATE TRIGGER kept_targets_row_insert AFTER INSERT ON node_compliance_directives BEGIN
  ${sRow('NEW')}
END;
CREATE TRIGGER kept_targets_row_update AFTER UPDATE ON node_compliance_directives WHEN (${countsDiffer})
  AND OLD.node_id IS NEW.node_id AND OLD.rule_id IS NEW.rule_id AND OLD.directive_id IS NEW.directive_id BEGIN
  ${sRow('NEW')}
END;
CREATE TRIGGER kept_targets_row_rekey AFTER UPDATE ON node_compliance_directives
  WHEN OLD.node_id IS NOT NEW.node_id OR OLD.rule_id IS NOT NEW.rule_id OR OLD.directive_id IS NOT NEW.directive_id BEGIN
  ${sRule('OLD')}
  ${sRule('NEW')}
END;
CREATE TRIGGER kept_targets_row_delete AFTER DELETE ON node_compliance_directives BEGIN
  ${sRule('OLD')}
END;
CREATE TRIGGER kept_targets_node_insert AFTER INSERT ON kept_nodes BEGIN
  ${sNode('NEW')}
END;
CREATE TRIGGER kept_targets_node_update AFTER UPDATE OF class, mode ON kept_nodes
  WHEN OLD.class IS NOT NEW.class OR OLD.mode IS NOT NEW.mode BEGIN
  ${sNode('NEW')}
END;
CREATE TRIGGER kept_targets_node_delete AFTER DELETE ON kept_nodes BEGIN
  DELETE FROM kept_targets WHERE node_id = OLD.node_id;
END;
`;

const sqlite = `${sqliteTable}
INSERT INTO kept_targets (rule_id, directive_id, node_id, share, states) ${targetRows('1')};
CREATE INDEX kept_targets_key_idx ON kept_targets (rule_id, directive_id, share, node_id, states);
${sqliteTargetTriggers}`;

// ---- PostgreSQL ------------------------------------------------------------------------------

const pRefresh = (where: string, scope: string) => refresh(where, scope, '', 'IS DISTINCT FROM');
/** The (node, rule) pairs of a transition table's rows: those whose rows are rewritten. */
const pairs = (table: string) => `(SELECT DISTINCT node_id, rule_id FROM ${table})`;
const pPairs = (table: string) => pRefresh(`(d.node_id, d.rule_id) IN ${pairs(table)}`, `(node_id, rule_id) IN ${pairs(table)}`);
/** The rows of a transition table's compliance rows and of their rules, after those were added or their counts changed. */
const pRows = (table: string) => upsert(`(d.node_id, d.rule_id, d.directive_id) IN (SELECT node_id, rule_id, directive_id FROM ${table})`,
  `(d.node_id, d.rule_id) IN ${pairs(table)}`, '', 'IS DISTINCT FROM');
/** Nothing to do for a statement that moved no row (an upsert fires the insert and the update triggers both). */
const none = (table: string) => `IF NOT EXISTS (SELECT 1 FROM ${table}) THEN RETURN NULL; END IF;`;

/**
 * The function and row triggers keeping a node's drill-down keys as its kept class and mode move
 * (migration 33 replaces them with statement triggers; tests that undo it make them again).
 */
export const pgTargetsNodeFunction = `CREATE FUNCTION kept_targets_node_trg() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF TG_OP = 'DELETE' THEN
    DELETE FROM kept_targets WHERE node_id = OLD.node_id;
    RETURN NULL;
  END IF;
  ${pRefresh('d.node_id = NEW.node_id', 'node_id = NEW.node_id')}
  RETURN NULL;
END $f$;
`;
export const pgTargetsNodeTriggers = `CREATE TRIGGER kept_targets_node_write AFTER INSERT OR DELETE ON kept_nodes FOR EACH ROW EXECUTE FUNCTION kept_targets_node_trg();
CREATE TRIGGER kept_targets_node_move AFTER UPDATE OF class, mode ON kept_nodes FOR EACH ROW
  WHEN (OLD.class IS DISTINCT FROM NEW.class OR OLD.mode IS DISTINCT FROM NEW.mode) EXECUTE FUNCTION kept_targets_node_trg();
`;

const postgres = `
CREATE TABLE kept_targets (rule_id text COLLATE "C" NOT NULL, directive_id text COLLATE "C" NOT NULL, node_id text COLLATE "C" NOT NULL,
  share double precision, states integer NOT NULL, PRIMARY KEY (node_id, rule_id, directive_id));
INSERT INTO kept_targets (rule_id, directive_id, node_id, share, states) ${targetRows('true')};
CREATE INDEX kept_targets_key_idx ON kept_targets (rule_id, directive_id, share, node_id) INCLUDE (states);

CREATE FUNCTION kept_targets_rows_added() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  ${none('added')}
  ${pRows('added')}
  RETURN NULL;
END $f$;
CREATE FUNCTION kept_targets_rows_changed() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  ${none('new_rows')}
  IF EXISTS (SELECT node_id, rule_id, directive_id FROM old_rows EXCEPT SELECT node_id, rule_id, directive_id FROM new_rows) THEN
    ${pRefresh(`(d.node_id, d.rule_id) IN (SELECT node_id, rule_id FROM old_rows UNION SELECT node_id, rule_id FROM new_rows)`,
      '(node_id, rule_id) IN (SELECT node_id, rule_id FROM old_rows UNION SELECT node_id, rule_id FROM new_rows)')}
  ELSE
    ${pRows('new_rows')}
  END IF;
  RETURN NULL;
END $f$;
CREATE FUNCTION kept_targets_rows_removed() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  ${none('removed')}
  ${pPairs('removed')}
  RETURN NULL;
END $f$;
CREATE TRIGGER kept_targets_rows_insert AFTER INSERT ON node_compliance_directives REFERENCING NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION kept_targets_rows_added();
CREATE TRIGGER kept_targets_rows_update AFTER UPDATE ON node_compliance_directives REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION kept_targets_rows_changed();
CREATE TRIGGER kept_targets_rows_delete AFTER DELETE ON node_compliance_directives REFERENCING OLD TABLE AS removed
  FOR EACH STATEMENT EXECUTE FUNCTION kept_targets_rows_removed();

${pgTargetsNodeFunction}${pgTargetsNodeTriggers}`;

export const keptTargets: Migration = { version: 28, name: 'kept_targets', sqlite, postgres };
