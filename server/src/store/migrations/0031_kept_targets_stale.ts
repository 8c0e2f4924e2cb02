/**
 * Version 31: on PostgreSQL, the drill-down keys (migration 28) no compliance row answers any
 * more are found from the keys of the rows a statement touched, not from the whole table.
 *
 * Migration 28's statement triggers dropped a stale key with `NOT IN (the keys the touched rows
 * answer)`. PostgreSQL planned it as a sequential scan of kept_targets filtered by a hashed
 * subplan: every batch that deleted or re-keyed compliance rows read every key of the fleet
 * (448,748 rows for a batch of 500 nodes at 50,000 nodes), so a first generation grew with the
 * square of the fleet. Each key of the touched (node, rule) pairs is now asked by primary key
 * whether a row still answers it, as SQLite's deferred refresh does (migration 29): a
 * directive's key by its compliance row, a rule's ('') by any of the rule's rows.
 *
 * The functions of the delete and update triggers are made again; the insert trigger's and the
 * node trigger's (one node, already by index) stay. SQLite: nothing changes.
 */
import type { Migration } from './index.js';
import { upsert } from './0028_kept_targets.js';

/** The (node, rule) pairs a statement touched, as a subquery. */
const REMOVED = '(SELECT DISTINCT node_id, rule_id FROM removed)';
const CHANGED = '(SELECT node_id, rule_id FROM old_rows UNION SELECT node_id, rule_id FROM new_rows)';

/** Keys of `pairs` that no compliance row of an agent node answers, deleted. */
const stale = (pairs: string) => `DELETE FROM kept_targets t WHERE (t.node_id, t.rule_id) IN ${pairs}
    AND NOT EXISTS (SELECT 1 FROM node_compliance_directives d JOIN kept_nodes k ON k.node_id = d.node_id
      WHERE k.class = 'agent' AND d.node_id = t.node_id AND d.rule_id = t.rule_id AND (t.directive_id = '' OR d.directive_id = t.directive_id));`;

/** The keys of `pairs` written where they changed, then the stale ones dropped (migration 28's refresh). */
const refresh = (pairs: string) => `${upsert(`(d.node_id, d.rule_id) IN ${pairs}`, `(d.node_id, d.rule_id) IN ${pairs}`, '', 'IS DISTINCT FROM')}
  ${stale(pairs)}`;

const postgres = `
CREATE OR REPLACE FUNCTION kept_targets_rows_changed() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM new_rows) THEN RETURN NULL; END IF;
  IF EXISTS (SELECT node_id, rule_id, directive_id FROM old_rows EXCEPT SELECT node_id, rule_id, directive_id FROM new_rows) THEN
    ${refresh(CHANGED)}
  ELSE
    ${upsert('(d.node_id, d.rule_id, d.directive_id) IN (SELECT node_id, rule_id, directive_id FROM new_rows)',
      '(d.node_id, d.rule_id) IN (SELECT DISTINCT node_id, rule_id FROM new_rows)', '', 'IS DISTINCT FROM')}
  END IF;
  RETURN NULL;
END $f$;
CREATE OR REPLACE FUNCTION kept_targets_rows_removed() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM removed) THEN RETURN NULL; END IF;
  ${refresh(REMOVED)}
  RETURN NULL;
END $f$;
`;

export const keptTargetsStale: Migration = { version: 31, name: 'kept_targets_stale', sqlite: 'SELECT 1;', postgres };
