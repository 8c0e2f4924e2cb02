/**
 * A database at an older schema version, made with the migrations up to it, for upgrade tests:
 * the test then writes rows the way the store of that version did and opens today's store on it.
 */
import { randomBytes } from 'node:crypto';
import Database from 'better-sqlite3';
import pg from 'pg';
import type { Test } from 'tap';
import { MIGRATIONS } from '@capstan/server/store/migrations/index';
import { pgComplianceFunction, pgDirectiveFunctions, sqliteComplianceTriggers, sqliteDirectiveTriggers } from '@capstan/server/store/migrations/0023_kept_compliance';
import { pgMembersFunctions, sqliteGroupHooks, sqliteMemberTriggers } from '@capstan/server/store/migrations/0025_kept_groups';
import { pgComplianceFunction25, pgComplianceFunction27 } from '@capstan/server/store/migrations/0027_kept_shares';
import { pgTargetsNodeFunction, pgTargetsNodeTriggers, sqliteTargetTriggers, targetRows, upsert } from '@capstan/server/store/migrations/0028_kept_targets';
import { keptTargetsDeferred } from '@capstan/server/store/migrations/0029_kept_targets_deferred';
import { keptTargetsStale } from '@capstan/server/store/migrations/0031_kept_targets_stale';
import { pgComplianceChangedFunction, pgTargetsNodesFunctions } from '@capstan/server/store/migrations/0033_kept_statement_triggers';
import { keptTargetsAdded } from '@capstan/server/store/migrations/0036_kept_targets_added';
import { pgTargetsNodesChanged } from '@capstan/server/store/migrations/0037_kept_targets_normal';
import { PG_URL } from '../server/pg.js';

/** An SQLite file at `version` (open: the caller writes its rows, then closes it). */
export function sqliteAt(path: string, version: number): Database.Database {
  const db = new Database(path);
  db.exec('CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL) STRICT');
  for (const m of MIGRATIONS.filter((m) => m.version <= version)) {
    db.exec(m.sqlite);
    db.prepare('INSERT INTO schema_version VALUES (?, ?)').run(m.version, '2026-11-01T00:00:00Z');
  }
  return db;
}

/** A PostgreSQL schema of its own at `version`, dropped at the end of the test; a client on it. */
export async function postgresAt(t: Test, version: number, prefix: string): Promise<{ client: pg.Client; schema: string }> {
  const schema = `${prefix}_${randomBytes(5).toString('hex')}`;
  const client = new pg.Client({ connectionString: PG_URL, options: `-c search_path=${schema}` });
  await client.connect();
  t.teardown(async () => {
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await client.end();
  });
  await client.query(`CREATE SCHEMA ${schema}`);
  await client.query('CREATE TABLE schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())');
  for (const m of MIGRATIONS.filter((m) => m.version <= version)) {
    await client.query(m.postgres);
    await client.query('INSERT INTO schema_version (version) VALUES ($1)', [m.version]);
  }
  return { client, schema };
}

/**
 * Migration 24 undone on a database at 24 or later (node properties back to text, the leaves and
 * the kept policy state dropped), for tests that undo an older migration after it.
 */
export const UNDO_24 = {
  sqlite: `DROP TABLE node_property_leaves; DROP TABLE policy_seals; DROP TABLE policy_problems;
    UPDATE node_properties SET value = json_extract(value, '$');
    CREATE INDEX node_properties_kv_idx ON node_properties (key, value); DELETE FROM schema_version WHERE version = 24;`,
  postgres: `DROP TABLE node_property_leaves, policy_seals, policy_problems;
    UPDATE node_properties SET value = value::jsonb #>> '{}';
    CREATE INDEX node_properties_kv_idx ON node_properties (key, value, node_id); DELETE FROM schema_version WHERE version = 24;`,
};

/**
 * Migration 25 undone on a database at 25 or later (the group memberships, group counters and
 * node counts dropped,
 * migration 23's compliance triggers as they were), for tests that undo an older migration
 * after it or start from version 24.
 */
export const UNDO_25 = {
  sqlite: `${['kept_compliance_insert', 'kept_compliance_update', 'kept_compliance_delete', 'kept_groups_member_insert', 'kept_groups_member_delete',
    'kept_groups_node_insert', 'kept_groups_node_delete', 'kept_groups_node_class', 'kept_node_counts_insert', 'kept_node_counts_delete',
    'kept_node_counts_update'].map((n) => `DROP TRIGGER ${n};`).join('\n')}
    DROP TABLE policy_group_members; DROP TABLE kept_groups; DROP TABLE kept_node_counts;
    ${sqliteComplianceTriggers()}
    DELETE FROM schema_version WHERE version = 25;`,
  postgres: `DROP TRIGGER kept_nodes_groups ON nodes; DROP TRIGGER kept_nodes_groups_class ON nodes; DROP TRIGGER kept_nodes_groups_delete ON nodes;
    DROP FUNCTION kept_groups_node_trg, kept_groups_members_added, kept_groups_members_removed, kept_node_counts_trg CASCADE;
    DROP TABLE policy_group_members, kept_groups, kept_groups_log, kept_node_counts, kept_node_counts_log;
    ${pgComplianceFunction().replace('CREATE FUNCTION', 'CREATE OR REPLACE FUNCTION')}
    DELETE FROM schema_version WHERE version = 25;`,
};

/**
 * Migration 26 undone on a database at 26 or later (the changes histogram's counters dropped),
 * for tests that undo an older migration after it or start from version 25.
 */
export const UNDO_26 = {
  sqlite: `DROP TRIGGER kept_changes_insert; DROP TRIGGER kept_changes_delete; DROP TRIGGER kept_changes_update;
    DROP TABLE kept_changes; DROP TABLE kept_change_rules; DELETE FROM schema_version WHERE version = 26;`,
  postgres: `DROP TRIGGER kept_changes_insert ON changes; DROP TRIGGER kept_changes_update ON changes; DROP TRIGGER kept_changes_delete ON changes;
    DROP FUNCTION kept_changes_added, kept_changes_removed, kept_changes_changed;
    DROP TABLE kept_changes, kept_change_rules, kept_changes_log; DELETE FROM schema_version WHERE version = 26;`,
};

/**
 * Migration 27 undone on a database at 27 (the kept shares, their indexes and triggers dropped,
 * migration 25's compliance function as it was), before UNDO_25 for tests that undo an older one.
 */
export const UNDO_27 = {
  sqlite: `DROP TRIGGER kept_nodes_share_insert; DROP TRIGGER kept_nodes_share_update;
    DROP INDEX kept_nodes_share_idx; DROP INDEX kept_nodes_worst_idx;
    ALTER TABLE kept_nodes DROP COLUMN share; ALTER TABLE kept_nodes DROP COLUMN expected;
    DELETE FROM schema_version WHERE version = 27;`,
  postgres: `${pgComplianceFunction25}
    DROP INDEX kept_nodes_share_idx, kept_nodes_worst_idx; ALTER TABLE kept_nodes DROP COLUMN share, DROP COLUMN expected;
    DELETE FROM schema_version WHERE version = 27;`,
};

/**
 * Migration 28 undone on a database at 28 (the kept drill-down keys, their index and triggers
 * dropped), before UNDO_27 for tests that undo an older one.
 */
export const UNDO_28 = {
  sqlite: `${['kept_targets_row_insert', 'kept_targets_row_update', 'kept_targets_row_rekey', 'kept_targets_row_delete', 'kept_targets_node_insert',
    'kept_targets_node_update', 'kept_targets_node_delete'].map((n) => `DROP TRIGGER ${n};`).join(' ')}
    DROP TABLE kept_targets; DELETE FROM schema_version WHERE version = 28;`,
  postgres: `DROP TRIGGER kept_targets_rows_insert ON node_compliance_directives; DROP TRIGGER kept_targets_rows_update ON node_compliance_directives;
    DROP TRIGGER kept_targets_rows_delete ON node_compliance_directives; DROP TRIGGER kept_targets_node_write ON kept_nodes;
    DROP TRIGGER kept_targets_node_move ON kept_nodes;
    DROP FUNCTION kept_targets_rows_added, kept_targets_rows_changed, kept_targets_rows_removed, kept_targets_node_trg;
    DROP TABLE kept_targets; DELETE FROM schema_version WHERE version = 28;`,
};

/**
 * Migration 29 undone on a database at 29 (the deferred drill-down keys' table dropped,
 * migration 28's triggers as they were), before UNDO_28 for tests that undo an older one.
 */
export const UNDO_29 = {
  sqlite: `${['kept_targets_row_insert', 'kept_targets_row_update', 'kept_targets_row_rekey', 'kept_targets_row_delete', 'kept_targets_node_insert',
    'kept_targets_node_update'].map((n) => `DROP TRIGGER ${n};`).join(' ')}
    DROP TRIGGER kept_targets_node_delete; DROP TABLE kept_targets_deferred;
    ${sqliteTargetTriggers}
    DELETE FROM schema_version WHERE version = 29;`,
  postgres: 'DELETE FROM schema_version WHERE version = 29;',
};

/**
 * Migration 30 undone on a database at 30 (each node's expectations back in its rows, the lists
 * dropped), before UNDO_29 for tests that undo an older one.
 */
export const UNDO_30 = {
  sqlite: `ALTER TABLE node_expectations ADD COLUMN components TEXT NOT NULL DEFAULT '[]';
    UPDATE node_expectations SET components = (SELECT l.components FROM expectation_lists l WHERE l.digest = node_expectations.list);
    DROP INDEX node_expectations_list_idx; ALTER TABLE node_expectations DROP COLUMN list; DROP TABLE expectation_lists;
    DELETE FROM schema_version WHERE version = 30;`,
  postgres: `ALTER TABLE node_expectations ADD COLUMN components jsonb;
    UPDATE node_expectations e SET components = l.components FROM expectation_lists l WHERE l.digest = e.list;
    ALTER TABLE node_expectations ALTER COLUMN components SET NOT NULL, DROP COLUMN list; DROP TABLE expectation_lists;
    DELETE FROM schema_version WHERE version = 30;`,
};

/**
 * Migration 31 forgotten, before UNDO_30 for tests that undo an older one: its functions stay as
 * they are (the store's start makes them again, as they are).
 */
export const UNDO_31 = {
  sqlite: 'DELETE FROM schema_version WHERE version = 31;',
  postgres: 'DELETE FROM schema_version WHERE version = 31;',
};

/**
 * Migration 32 forgotten, before UNDO_31 for tests that undo an older one: the functions it set
 * keep their setting until an older migration's undoing drops them (the store's start sets it again).
 */
export const UNDO_32 = {
  sqlite: 'DELETE FROM schema_version WHERE version = 32;',
  postgres: 'DELETE FROM schema_version WHERE version = 32;',
};

/**
 * Migration 33 undone, before UNDO_32 for tests that undo an older one: the row functions and
 * triggers of the kept counters as migrations 27, 28 and 32 left them.
 */
export const UNDO_33 = {
  sqlite: 'DELETE FROM schema_version WHERE version = 33;',
  postgres: `DROP TRIGGER kept_compliance_insert ON node_compliance; DROP TRIGGER kept_compliance_update ON node_compliance;
    DROP FUNCTION kept_compliance_added, kept_compliance_changed;
    DROP TRIGGER kept_targets_nodes_insert ON kept_nodes; DROP TRIGGER kept_targets_nodes_update ON kept_nodes; DROP TRIGGER kept_targets_nodes_delete ON kept_nodes;
    DROP FUNCTION kept_targets_nodes_added, kept_targets_nodes_changed, kept_targets_nodes_removed;
    ${pgComplianceFunction27}
    CREATE TRIGGER kept_compliance_write AFTER INSERT OR UPDATE ON node_compliance FOR EACH ROW EXECUTE FUNCTION kept_compliance_trg();
    ${pgTargetsNodeFunction}${pgTargetsNodeTriggers}
    ALTER FUNCTION kept_compliance_trg() SET enable_seqscan = off; ALTER FUNCTION kept_compliance_trg() SET jit = off;
    ALTER FUNCTION kept_targets_node_trg() SET enable_seqscan = off; ALTER FUNCTION kept_targets_node_trg() SET jit = off;
    DELETE FROM schema_version WHERE version = 33;`,
};

/** Migration 34 undone (the sweep's indexes), before UNDO_33 for tests that undo an older one. */
export const UNDO_34 = {
  sqlite: 'DROP INDEX nodes_reachable_idx; DROP INDEX nodes_live_idx; DROP INDEX nodes_state_changed_idx; DELETE FROM schema_version WHERE version = 34;',
  postgres: 'DELETE FROM schema_version WHERE version = 34;',
};

/** Migration 36 undone (new rows' drill-down keys upserted as migration 28 made them), before UNDO_35. */
export const UNDO_36 = {
  sqlite: 'DELETE FROM schema_version WHERE version = 36;',
  postgres: `CREATE OR REPLACE FUNCTION kept_targets_rows_added() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM added) THEN RETURN NULL; END IF;
  ${upsert('(d.node_id, d.rule_id, d.directive_id) IN (SELECT node_id, rule_id, directive_id FROM added)',
    '(d.node_id, d.rule_id) IN (SELECT DISTINCT node_id, rule_id FROM added)', '', 'IS DISTINCT FROM')}
  RETURN NULL;
END $f$;
DELETE FROM schema_version WHERE version = 36;`,
};

/** Migration 35 undone (policy_bundles' statistics targets back to the default), before UNDO_34. */
export const UNDO_35 = {
  sqlite: 'DELETE FROM schema_version WHERE version = 35;',
  postgres: `ALTER TABLE policy_bundles ALTER COLUMN node_id SET STATISTICS -1, ALTER COLUMN config_id SET STATISTICS -1,
    ALTER COLUMN generated_at SET STATISTICS -1, ALTER COLUMN bundle SET STATISTICS -1; DELETE FROM schema_version WHERE version = 35;`,
};

/**
 * Migration 37 undone, before UNDO_36 for tests that undo an older one: the keys of the agents out
 * of mode 0 made again, and the drill-down keys' triggers and functions as migrations 29, 31, 33
 * and 36 left them (every agent's keys kept, whatever its time mode).
 */
const OFF_KEYS = `DROP INDEX kept_nodes_off_idx;
  INSERT INTO kept_targets (rule_id, directive_id, node_id, share, states) ${targetRows('k.mode <> 0')};`;
export const UNDO_37 = {
  sqlite: `${OFF_KEYS} DROP TABLE kept_targets_deferred; ${keptTargetsDeferred.sqlite} DELETE FROM schema_version WHERE version = 37;`,
  postgres: `${OFF_KEYS} ${keptTargetsStale.postgres} ${pgTargetsNodesFunctions.replaceAll('CREATE FUNCTION', 'CREATE OR REPLACE FUNCTION')}
    ${keptTargetsAdded.postgres} DELETE FROM schema_version WHERE version = 37;`,
};

/**
 * Migration 38 undone, before UNDO_37 for tests that undo an older one: on SQLite, the directive
 * rows', memberships' and node_compliance triggers counting every node's rows as migrations 23
 * and 25 made them; on PostgreSQL, the directive rows' and memberships' statement functions
 * appending a log row per row written.
 */
export const UNDO_38 = {
  sqlite: `DROP TABLE kept_counters_deferred;
    ${['kept_directive_insert', 'kept_directive_update', 'kept_directive_delete', 'kept_compliance_insert', 'kept_compliance_update', 'kept_compliance_delete',
    'kept_groups_member_insert', 'kept_groups_member_delete'].map((n) => `DROP TRIGGER ${n};`).join(' ')}
    ${sqliteComplianceTriggers(sqliteGroupHooks)}${sqliteDirectiveTriggers()}${sqliteMemberTriggers()} DELETE FROM schema_version WHERE version = 38;`,
  postgres: `${(pgDirectiveFunctions + pgMembersFunctions).replaceAll('CREATE FUNCTION', 'CREATE OR REPLACE FUNCTION')} DELETE FROM schema_version WHERE version = 38;`,
};

/** Migration 39 undone, before UNDO_38: the update triggers' early stops as migrations 33 and 37 made them. */
export const UNDO_39 = {
  sqlite: 'DELETE FROM schema_version WHERE version = 39;',
  postgres: `${pgComplianceChangedFunction(false)}${pgTargetsNodesChanged(false)} DELETE FROM schema_version WHERE version = 39;`,
};

/**
 * Migration 42 undone, before UNDO_41: PostgreSQL's texts put back into their bundles, no table
 * of texts there.
 */
export const UNDO_42 = {
  sqlite: 'DELETE FROM schema_version WHERE version = 42;',
  postgres: `UPDATE policy_bundles AS b SET bundle = '{"node_id":' || to_json(b.node_id)::text || ',"config_id":' || to_json(b.config_id)::text
      || ',"generated_at":"' || to_char(b.generated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || '","directives":'
      || (SELECT t.tail FROM policy_texts t WHERE t.config_id = b.config_id) || '}'
    WHERE b.bundle = '';
    DROP INDEX policy_bundles_config_idx; DROP TABLE policy_texts; DELETE FROM schema_version WHERE version = 42;`,
};

/**
 * Migration 41 undone, before UNDO_40: every bundle stored whole again (SQLite's texts put back
 * into their bundles), no table of texts.
 */
export const UNDO_41 = {
  sqlite: `UPDATE policy_bundles AS b SET bundle = '{"node_id":' || json_quote(b.node_id) || ',"config_id":' || json_quote(b.config_id)
      || ',"generated_at":' || json_quote(b.generated_at) || ',"directives":' || (SELECT t.tail FROM policy_texts t WHERE t.config_id = b.config_id) || '}'
    WHERE b.bundle = '';
    DROP TRIGGER policy_texts_release; DROP INDEX policy_bundles_config_idx; DROP TABLE policy_texts; DELETE FROM schema_version WHERE version = 41;`,
  postgres: 'DELETE FROM schema_version WHERE version = 41;',
};

/** Migration 40 undone, before UNDO_39: no index of the rows expecting nothing (SQLite's). */
export const UNDO_40 = {
  sqlite: 'DROP INDEX node_compliance_directives_nothing_idx; DELETE FROM schema_version WHERE version = 40;',
  postgres: 'DELETE FROM schema_version WHERE version = 40;',
};
