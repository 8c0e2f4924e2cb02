/**
 * Version 37: the drill-down keys (migration 28) are kept for the nodes whose kept time mode is
 * 0 only (their run decides their compliance); a node applying a new policy or silent is read
 * from its kept mode and its compliance rows instead (compliance/kept-targets.ts).
 *
 * A node out of mode 0 has the same key for every rule and directive it has an expected item
 * under (share 0, state applying or no answer), so its keys held nothing its kept mode and rows
 * do not tell. Keeping them cost the most writes of all: a node's move into applying or silence
 * rewrote every one of its keys, its move back rewrote them again, and a generation that gave
 * a silent or applying node new rows wrote their keys and dropped the old ones (in the policy
 * bench's first generation at 100,000 nodes on PostgreSQL, about 14 s of the statements' 58 s).
 *
 * From this version:
 * - a node's keys are written only while it is an agent in mode 0; the keys it had when it left
 *   mode 0 stay as they were and readers leave them out (they join kept_nodes);
 * - a move into mode 0, or a change of class, brings all of the node's keys up to date (written
 *   where they changed, the stale ones dropped), as every move did before; a move out of mode 0
 *   writes nothing.
 *
 * PostgreSQL: the statement functions of migrations 31, 33 and 36 made again, each limited to
 * the nodes in mode 0. SQLite: the row triggers of migration 29 made again with the same
 * condition, and the batch writers' deferred refresh (SQLITE_DEFERRED_TARGETS) limited likewise.
 * No key is rewritten by the migration: every node in mode 0 already has its keys.
 */
import type { Migration } from './index.js';
import { countsDiffer, keyShare, keyStates, ruleTargetRows, sNode, sRow, sRule, upsert } from './0028_kept_targets.js';

/** A node, by id expression, in mode 0 (its run decides): the only one whose keys are kept. */
const normal = (id: string) => `EXISTS (SELECT 1 FROM kept_nodes m WHERE m.node_id = ${id} AND m.mode = 0)`;

// ---- SQLite ----------------------------------------------------------------------------------

const DEFERRED = 'SELECT node_id FROM kept_targets_deferred';
/** Is the node of row `r` written by a batch that refreshes its keys itself (migration 29)? */
const live = (r: string) => `NOT EXISTS (SELECT 1 FROM kept_targets_deferred WHERE node_id = ${r}.node_id)`;

const sqlite = `
DROP TRIGGER kept_targets_row_insert;
DROP TRIGGER kept_targets_row_update;
DROP TRIGGER kept_targets_row_rekey;
DROP TRIGGER kept_targets_row_delete;
DROP TRIGGER kept_targets_node_insert;
DROP TRIGGER kept_targets_node_update;
CREATE TRIGGER kept_targets_row_insert AFTER INSERT ON node_compliance_directives WHEN ${live('NEW')} AND ${normal('NEW.node_id')} BEGIN
  ${sRow('NEW')}
END;
CREATE TRIGGER kept_targets_row_update AFTER UPDATE ON node_compliance_directives WHEN (${countsDiffer})
  AND OLD.node_id IS NEW.node_id AND OLD.rule_id IS NEW.rule_id AND OLD.directive_id IS NEW.directive_id AND ${live('NEW')}
  AND ${normal('NEW.node_id')} BEGIN
  ${sRow('NEW')}
END;
CREATE TRIGGER kept_targets_row_rekey AFTER UPDATE ON node_compliance_directives
  WHEN (OLD.node_id IS NOT NEW.node_id OR OLD.rule_id IS NOT NEW.rule_id OR OLD.directive_id IS NOT NEW.directive_id)
    AND ${live('OLD')} AND ${live('NEW')} BEGIN
  ${sRule('OLD')}
  ${sRule('NEW')}
END;
CREATE TRIGGER kept_targets_row_delete AFTER DELETE ON node_compliance_directives WHEN ${live('OLD')} AND ${normal('OLD.node_id')} BEGIN
  ${sRule('OLD')}
END;
CREATE TRIGGER kept_targets_node_insert AFTER INSERT ON kept_nodes WHEN ${live('NEW')} AND NEW.mode = 0 BEGIN
  ${sNode('NEW')}
END;
CREATE TRIGGER kept_targets_node_update AFTER UPDATE OF class, mode ON kept_nodes
  WHEN (OLD.class IS NOT NEW.class OR (OLD.mode IS NOT NEW.mode AND NEW.mode = 0)) AND ${live('NEW')} BEGIN
  ${sNode('NEW')}
END;
`;

/**
 * The statements that bring the keys of every node in kept_targets_deferred that is in mode 0
 * up to date from its compliance rows (written where they moved, dropped where no row answers
 * them any more), then empty it: run by the batch writer before it commits (migration 29's, for
 * the nodes whose keys are kept).
 */
export const SQLITE_DEFERRED_TARGETS: readonly string[] = [
  upsert(`k.mode = 0 AND d.node_id IN (${DEFERRED})`, `k.mode = 0 AND d.node_id IN (${DEFERRED})`, ' WHERE true', 'IS NOT'),
  // targetRows' rows, asked of each key: a directive's key is answered by its compliance row, a
  // rule's ('') by any of the rule's.
  `DELETE FROM kept_targets WHERE node_id IN (SELECT f.node_id FROM kept_targets_deferred f JOIN kept_nodes m ON m.node_id = f.node_id WHERE m.mode = 0)
    AND NOT EXISTS (SELECT 1 FROM node_compliance_directives d JOIN kept_nodes k ON k.node_id = d.node_id
      WHERE k.class = 'agent' AND d.node_id = kept_targets.node_id AND d.rule_id = kept_targets.rule_id
      AND (kept_targets.directive_id = '' OR d.directive_id = kept_targets.directive_id))`,
  'DELETE FROM kept_targets_deferred',
];

// ---- PostgreSQL ------------------------------------------------------------------------------

/** As migration 33's functions: no sequential scan, no jit. */
const PLANS = 'SET enable_seqscan = off SET jit = off';

/** The (node, rule) pairs of `rows` (a transition table, or a union of two) whose node is in mode 0. */
const pairs = (rows: string) => `(SELECT DISTINCT p.node_id, p.rule_id FROM ${rows} p WHERE ${normal('p.node_id')})`;

/** Keys of `pairs` that no compliance row of an agent node answers, deleted (migration 31's). */
const stale = (pairs: string) => `DELETE FROM kept_targets t WHERE (t.node_id, t.rule_id) IN ${pairs}
    AND NOT EXISTS (SELECT 1 FROM node_compliance_directives d JOIN kept_nodes k ON k.node_id = d.node_id
      WHERE k.class = 'agent' AND d.node_id = t.node_id AND d.rule_id = t.rule_id AND (t.directive_id = '' OR d.directive_id = t.directive_id));`;

/** The keys of `pairs` written where they changed, then the stale ones dropped. */
const refresh = (pairs: string) => `${upsert(`(d.node_id, d.rule_id) IN ${pairs}`, `(d.node_id, d.rule_id) IN ${pairs}`, '', 'IS DISTINCT FROM')}
  ${stale(pairs)}`;

/**
 * Nothing to do when no node of the statement's rows (`rows`, a transition table) is an agent in
 * mode 0: a generation's batch of nodes that all went applying, or were silent, reads each node
 * once here instead of joining every row it wrote to find none.
 */
const noneNormal = (rows: string) => `IF NOT EXISTS (SELECT 1 FROM (SELECT DISTINCT node_id FROM ${rows}) r JOIN kept_nodes k ON k.node_id = r.node_id
    WHERE k.class = 'agent' AND k.mode = 0) THEN RETURN NULL; END IF;`;

/** Written where the key or its states changed, as migration 28's upsert. */
const UPSERT = `ON CONFLICT (node_id, rule_id, directive_id) DO UPDATE SET share = excluded.share, states = excluded.states
      WHERE (kept_targets.share, kept_targets.states) IS DISTINCT FROM (excluded.share, excluded.states)`;

const CHANGED = '(SELECT node_id, rule_id FROM old_rows UNION SELECT node_id, rule_id FROM new_rows)';

/** The nodes whose class moved, or whose mode moved to 0: every key of theirs is brought up to date. */
const ENTERED = `(SELECT n.node_id FROM new_rows n JOIN old_rows o ON o.node_id = n.node_id
  WHERE o.class IS DISTINCT FROM n.class OR (o.mode IS DISTINCT FROM n.mode AND n.mode = 0))`;

/** Migration 33's refresh of whole nodes, for the nodes in mode 0 among them. */
const nodesRefresh = (nodes: string) => `${upsert(`k.mode = 0 AND d.node_id IN ${nodes}`, `k.mode = 0 AND d.node_id IN ${nodes}`, '', 'IS DISTINCT FROM')}
  DELETE FROM kept_targets t WHERE t.node_id IN ${nodes} AND ${normal('t.node_id')}
    AND NOT EXISTS (SELECT 1 FROM node_compliance_directives d JOIN kept_nodes k ON k.node_id = d.node_id
      WHERE k.class = 'agent' AND d.node_id = t.node_id AND d.rule_id = t.rule_id AND (t.directive_id = '' OR d.directive_id = t.directive_id));`;

const postgres = `
CREATE OR REPLACE FUNCTION kept_targets_rows_added() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  ${noneNormal('added')}
  INSERT INTO kept_targets (rule_id, directive_id, node_id, share, states)
    SELECT a.rule_id, a.directive_id, a.node_id, ${keyShare('a', 'k.mode')}, ${keyStates('a', 'k.mode')}
    FROM added a JOIN kept_nodes k ON k.node_id = a.node_id WHERE k.class = 'agent' AND k.mode = 0
    ${UPSERT};
  INSERT INTO kept_targets (rule_id, directive_id, node_id, share, states)
    SELECT * FROM (${ruleTargetRows(`k.mode = 0 AND (d.node_id, d.rule_id) IN (SELECT DISTINCT node_id, rule_id FROM added)`)}) r
    ${UPSERT};
  RETURN NULL;
END $f$;
CREATE OR REPLACE FUNCTION kept_targets_rows_changed() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  ${noneNormal('new_rows')}
  IF EXISTS (SELECT node_id, rule_id, directive_id FROM old_rows EXCEPT SELECT node_id, rule_id, directive_id FROM new_rows) THEN
    ${refresh(pairs(CHANGED))}
  ELSE
    ${upsert('k.mode = 0 AND (d.node_id, d.rule_id, d.directive_id) IN (SELECT node_id, rule_id, directive_id FROM new_rows)',
      'k.mode = 0 AND (d.node_id, d.rule_id) IN (SELECT DISTINCT node_id, rule_id FROM new_rows)', '', 'IS DISTINCT FROM')}
  END IF;
  RETURN NULL;
END $f$;
CREATE OR REPLACE FUNCTION kept_targets_rows_removed() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  ${noneNormal('removed')}
  ${refresh(pairs('removed'))}
  RETURN NULL;
END $f$;
CREATE OR REPLACE FUNCTION kept_targets_nodes_added() RETURNS trigger LANGUAGE plpgsql ${PLANS} AS $f$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM added WHERE mode = 0) THEN RETURN NULL; END IF;
  ${nodesRefresh('(SELECT node_id FROM added WHERE mode = 0)')}
  RETURN NULL;
END $f$;
CREATE OR REPLACE FUNCTION kept_targets_nodes_changed() RETURNS trigger LANGUAGE plpgsql ${PLANS} AS $f$
BEGIN
  IF NOT EXISTS ${ENTERED} THEN RETURN NULL; END IF;
  ${nodesRefresh(ENTERED)}
  RETURN NULL;
END $f$;
`;

export const keptTargetsNormal: Migration = { version: 37, name: 'kept_targets_normal', sqlite, postgres };
