/**
 * Version 37: the drill-down keys (migration 28) are kept only for the agents whose kept time
 * mode is 0, those whose run decides their compliance; a node applying a new policy or silent
 * is read from kept_nodes and its compliance rows instead (compliance/kept-targets.ts).
 *
 * A node out of mode 0 has the same key under every rule and directive it expects an item of
 * (share 0, state applying or no answer; none where it expects nothing), so its keys held nothing
 * its kept mode and its rows do not tell. Keeping them cost writes that nothing read: a
 * generation that gave a silent or applying node new rows wrote their keys and dropped the old
 * ones, and a run of an old policy stored while the node applies a new one moved them again
 * (in the policy bench's first generation at 100,000 nodes on PostgreSQL, about 14 s of the
 * statements' 58 s).
 *
 * From this version kept_targets holds the keys of the agents in mode 0, and nothing else:
 * - compliance rows written or deleted move the keys of their nodes in mode 0 only;
 * - a node whose kept class or mode moves has its keys made from its rows when it is now an
 *   agent in mode 0, and dropped otherwise (migration 28 rewrote them for the new mode);
 * - the keys of the nodes out of mode 0 are dropped once, here;
 * - kept_nodes_off_idx walks the agents out of mode 0 by id, for the readers.
 *
 * PostgreSQL: the statement functions of migrations 31, 33 and 36 made again with those limits.
 * SQLite: the row triggers of migration 29 made again with them, and the batch writers' deferred
 * refresh (SQLITE_DEFERRED_TARGETS) likewise.
 */
import type { Migration } from './index.js';
import { countsDiffer, keyShare, keyStates, ruleTargetRows, sRow, sRule, targetRows, upsert } from './0028_kept_targets.js';
import { DEFERRED, DROP_TARGET_TRIGGERS, live } from './0029_kept_targets_deferred.js';

/** A node, by id expression, that is an agent in mode 0: the only one with keys. */
const normal = (id: string) => `EXISTS (SELECT 1 FROM kept_nodes m WHERE m.node_id = ${id} AND m.class = 'agent' AND m.mode = 0)`;

/** No compliance row of an agent in mode 0 answers key `t` (a directive's by its row, a rule's by any of the rule's): it goes. */
const unanswered = (t: string) => `NOT EXISTS (SELECT 1 FROM node_compliance_directives d JOIN kept_nodes k ON k.node_id = d.node_id
      WHERE k.class = 'agent' AND k.mode = 0 AND d.node_id = ${t}.node_id AND d.rule_id = ${t}.rule_id
        AND (${t}.directive_id = '' OR d.directive_id = ${t}.directive_id))`;

const common = `DELETE FROM kept_targets WHERE node_id NOT IN (SELECT node_id FROM kept_nodes WHERE class = 'agent' AND mode = 0);
CREATE INDEX kept_nodes_off_idx ON kept_nodes (node_id) WHERE mode <> 0 AND class = 'agent';
`;

// ---- SQLite ----------------------------------------------------------------------------------

/** Node `r`'s keys made from its rows when it is an agent in mode 0, all dropped otherwise. */
const sNode = (r: string) => `${upsert(`k.mode = 0 AND d.node_id = ${r}.node_id`, `k.mode = 0 AND d.node_id = ${r}.node_id`, ' WHERE true', 'IS NOT')}
  DELETE FROM kept_targets WHERE node_id = ${r}.node_id AND ${unanswered('kept_targets')};`;

// The triggers of migration 29 made again; `live`: the node's batch writer refreshes its keys itself.
const sqlite = `${common}
${DROP_TARGET_TRIGGERS}
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
  ${sNode('OLD')}
  ${sNode('NEW')}
END;
CREATE TRIGGER kept_targets_row_delete AFTER DELETE ON node_compliance_directives WHEN ${live('OLD')} AND ${normal('OLD.node_id')} BEGIN
  ${sRule('OLD')}
END;
CREATE TRIGGER kept_targets_node_insert AFTER INSERT ON kept_nodes WHEN ${live('NEW')} AND NEW.class = 'agent' AND NEW.mode = 0 BEGIN
  ${sNode('NEW')}
END;
CREATE TRIGGER kept_targets_node_update AFTER UPDATE OF class, mode ON kept_nodes
  WHEN (OLD.class IS NOT NEW.class OR OLD.mode IS NOT NEW.mode) AND ${live('NEW')} BEGIN
  ${sNode('NEW')}
END;
`;

/**
 * The statements that bring the keys of every node in kept_targets_deferred up to date (made
 * from its rows where it is an agent in mode 0, written where they moved; every other key of
 * those nodes dropped), then empty it: run by the batch writer before it commits (migration 29's,
 * with this version's limits).
 */
export const SQLITE_DEFERRED_TARGETS: readonly string[] = [
  upsert(`k.mode = 0 AND d.node_id IN (${DEFERRED})`, `k.mode = 0 AND d.node_id IN (${DEFERRED})`, ' WHERE true', 'IS NOT'),
  `DELETE FROM kept_targets WHERE node_id IN (${DEFERRED}) AND ${unanswered('kept_targets')}`,
  'DELETE FROM kept_targets_deferred',
];

/** Every key from the stored compliance rows, on SQLite (a bulk loader after migration 27's refill). */
export const sqliteKeptTargetsRefill = `DELETE FROM kept_targets;
INSERT INTO kept_targets (rule_id, directive_id, node_id, share, states) ${targetRows('k.mode = 0')};
`;

// ---- PostgreSQL ------------------------------------------------------------------------------

/** As migration 33's functions: no sequential scan, no jit. */
const PLANS = 'SET enable_seqscan = off SET jit = off';

/** The (node, rule) pairs of `rows` (a transition table, or a union of two) whose node has keys. */
const pairs = (rows: string) => `(SELECT DISTINCT p.node_id, p.rule_id FROM ${rows} p WHERE ${normal('p.node_id')})`;

/** The keys of `pairs` written where they changed, then those no row answers dropped. */
const refresh = (pairs: string) => `${upsert(`(d.node_id, d.rule_id) IN ${pairs}`, `(d.node_id, d.rule_id) IN ${pairs}`, '', 'IS DISTINCT FROM')}
  DELETE FROM kept_targets t WHERE (t.node_id, t.rule_id) IN ${pairs} AND ${unanswered('t')};`;

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
/** The kept nodes whose class or mode moved (migration 33's). */
const MOVED = '(SELECT n.node_id FROM new_rows n JOIN old_rows o ON o.node_id = n.node_id WHERE (o.class, o.mode) IS DISTINCT FROM (n.class, n.mode))';

/** Whole nodes' keys made from their rows where they are agents in mode 0, every other key of theirs dropped. */
const nodesRefresh = (nodes: string) => `${upsert(`k.mode = 0 AND d.node_id IN ${nodes}`, `k.mode = 0 AND d.node_id IN ${nodes}`, '', 'IS DISTINCT FROM')}
  DELETE FROM kept_targets t WHERE t.node_id IN ${nodes} AND ${unanswered('t')};`;

/**
 * The statement function of kept_nodes' updates (`planned`: with migration 39's early stop, the
 * moved nodes read from a CTE planned for all of them; without, as this migration made it).
 */
export const pgTargetsNodesChanged = (planned: boolean) => `CREATE OR REPLACE FUNCTION kept_targets_nodes_changed() RETURNS trigger LANGUAGE plpgsql ${PLANS} AS $f$
BEGIN
  IF NOT EXISTS ${planned ? `(WITH m AS MATERIALIZED ${MOVED} SELECT 1 FROM m)` : MOVED} THEN RETURN NULL; END IF;
  ${nodesRefresh(MOVED)}
  RETURN NULL;
END $f$;
`;

const postgres = `${common}
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
  IF NOT EXISTS (SELECT 1 FROM added WHERE class = 'agent' AND mode = 0) THEN RETURN NULL; END IF;
  ${nodesRefresh("(SELECT node_id FROM added WHERE class = 'agent' AND mode = 0)")}
  RETURN NULL;
END $f$;
${pgTargetsNodesChanged(false)}`;

export const keptTargetsNormal: Migration = { version: 37, name: 'kept_targets_normal', sqlite, postgres };
