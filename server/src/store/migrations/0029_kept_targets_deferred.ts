/**
 * Version 29: on SQLite, a batch writer may defer the kept drill-down keys (migration 28) of the
 * nodes it writes and bring them up to date once, for all of them, before it commits.
 *
 * Migration 28's SQLite triggers rewrite a node's keys for one rule at every compliance row
 * written or deleted: a generation that writes eleven rows for a node sums that node's rule
 * eleven times, and a deleted row sums it again and drops what is no longer answered. They
 * were about two thirds of the time spent writing a 20,000-node fleet's compliance rows.
 *
 * - kept_targets_deferred: the nodes whose keys the writer will refresh itself. It holds rows
 *   only inside the writer's transaction: the writer fills it, writes, refreshes the keys of
 *   every node it names at once (SQLITE_DEFERRED_TARGETS: one statement writes them, one drops
 *   the stale ones) and empties it, so no other connection ever sees a row in it.
 * - The triggers of migration 28 made again, each skipping a node named there.
 *
 * PostgreSQL's triggers already run once per statement over its transition tables: nothing
 * changes there.
 */
import type { Migration } from './index.js';
import { countsDiffer, sNode, sRow, sRule, upsert } from './0028_kept_targets.js';

export const DEFERRED = 'SELECT node_id FROM kept_targets_deferred';
/** Is the node of row `r` (NEW or OLD) written by a batch that refreshes its keys itself? */
export const live = (r: string) => `NOT EXISTS (SELECT 1 FROM kept_targets_deferred WHERE node_id = ${r}.node_id)`;

/** The SQLite triggers keeping the drill-down keys, dropped before they are made again (also by migration 37). */
export const DROP_TARGET_TRIGGERS = `DROP TRIGGER kept_targets_row_insert;
DROP TRIGGER kept_targets_row_update;
DROP TRIGGER kept_targets_row_rekey;
DROP TRIGGER kept_targets_row_delete;
DROP TRIGGER kept_targets_node_insert;
DROP TRIGGER kept_targets_node_update;`;

const sqlite = `
CREATE TABLE kept_targets_deferred (node_id TEXT PRIMARY KEY) STRICT, WITHOUT ROWID;
${DROP_TARGET_TRIGGERS}
CREATE TRIGGER kept_targets_row_insert AFTER INSERT ON node_compliance_directives WHEN ${live('NEW')} BEGIN
  ${sRow('NEW')}
END;
CREATE TRIGGER kept_targets_row_update AFTER UPDATE ON node_compliance_directives WHEN (${countsDiffer})
  AND OLD.node_id IS NEW.node_id AND OLD.rule_id IS NEW.rule_id AND OLD.directive_id IS NEW.directive_id AND ${live('NEW')} BEGIN
  ${sRow('NEW')}
END;
CREATE TRIGGER kept_targets_row_rekey AFTER UPDATE ON node_compliance_directives
  WHEN (OLD.node_id IS NOT NEW.node_id OR OLD.rule_id IS NOT NEW.rule_id OR OLD.directive_id IS NOT NEW.directive_id)
    AND ${live('OLD')} AND ${live('NEW')} BEGIN
  ${sRule('OLD')}
  ${sRule('NEW')}
END;
CREATE TRIGGER kept_targets_row_delete AFTER DELETE ON node_compliance_directives WHEN ${live('OLD')} BEGIN
  ${sRule('OLD')}
END;
CREATE TRIGGER kept_targets_node_insert AFTER INSERT ON kept_nodes WHEN ${live('NEW')} BEGIN
  ${sNode('NEW')}
END;
CREATE TRIGGER kept_targets_node_update AFTER UPDATE OF class, mode ON kept_nodes
  WHEN (OLD.class IS NOT NEW.class OR OLD.mode IS NOT NEW.mode) AND ${live('NEW')} BEGIN
  ${sNode('NEW')}
END;
`;

/**
 * The statements that bring the keys of every node in kept_targets_deferred up to date from
 * its compliance rows and kept class and mode (written where they moved, dropped where no row
 * answers them any more), then empty it: run by the batch writer before it commits.
 */
export const SQLITE_DEFERRED_TARGETS: readonly string[] = [
  upsert(`d.node_id IN (${DEFERRED})`, `d.node_id IN (${DEFERRED})`, ' WHERE true', 'IS NOT'),
  // targetRows' rows, asked of each key: a directive's key is answered by its compliance row, a
  // rule's ('') by any of the rule's (SQLite compared every key with every row of a NOT IN).
  `DELETE FROM kept_targets WHERE node_id IN (${DEFERRED}) AND NOT EXISTS (SELECT 1 FROM node_compliance_directives d JOIN kept_nodes k ON k.node_id = d.node_id
    WHERE k.class = 'agent' AND d.node_id = kept_targets.node_id AND d.rule_id = kept_targets.rule_id
      AND (kept_targets.directive_id = '' OR d.directive_id = kept_targets.directive_id))`,
  'DELETE FROM kept_targets_deferred',
];

export const keptTargetsDeferred: Migration = { version: 29, name: 'kept_targets_deferred', sqlite, postgres: 'SELECT 1;' };
