/**
 * Version 25: compliance by policy group kept as counters, as migration 23 keeps it by rule.
 *
 * - policy_group_members: which nodes each policy group held when their policy was last
 *   generated (policy/generate.ts writes the changes of each batch of nodes it generates).
 * - kept_groups: per (group, class, mode) the node count and the summed node counts, under the
 *   same classes, time modes and thresholds as kept_fleet; mode -1 rows count every member of
 *   the class, with or without compliance.
 *
 * - kept_node_counts: the nodes per status, per state and per acceptance (GET /api/1/lifecycle,
 *   the dashboard), kept by triggers on nodes; on PostgreSQL through kept_node_counts_log.
 *
 * A member (group, node) is counted twice over: its node under the node's class at mode -1 while
 * the node exists, and its compliance row under its kept class and mode (kept_nodes) while it has
 * one. Each trigger takes what it moves from the rows as they are at that moment: the members'
 * triggers when membership changes, the nodes' when a node comes, goes (its memberships go first)
 * or changes class, and the node_compliance ones (migration 23's, made again with hooks) when a
 * compliance row is counted elsewhere. On PostgreSQL they append to kept_groups_log, folded by
 * the sweep. Members are written under their nodes' row locks and the kept advisory lock (one
 * per schema from this version on, KEPT_LOCK_ARGS) held shared, as every writer of a node's
 * class or compliance row holds them; the sweep holds the kept lock exclusively
 * (store/compliance/kept-postgres.ts): a membership never reads a node's class or compliance row
 * that a concurrent transaction is changing.
 */
import type { Migration } from './index.js';
import { C, pClassRow, pgComplianceFunction, sClassRow, sqliteComplianceTriggers, type ComplianceHooks } from './0023_kept_compliance.js';

const cols = C.join(', ');

// ---- SQLite ----------------------------------------------------------------------------------

const sUpsert = `ON CONFLICT (group_id, class, mode) DO UPDATE SET nodes = nodes + excluded.nodes, ${C.map((c) => `${c} = ${c} + excluded.${c}`).join(', ')};`;
/** Node `id`'s compliance row `r` added (sign 1) or taken (-1) for each of its groups, under its kept class and mode. */
const sGroups = (id: string, sign: string, r: string) => `INSERT INTO kept_groups (group_id, class, mode, nodes, ${cols})
    SELECT g.group_id, k.class, k.mode, ${sign}, ${C.map((c) => `${sign} * ${r}.${c}`).join(', ')}
    FROM policy_group_members g JOIN kept_nodes k ON k.node_id = g.node_id WHERE g.node_id = ${id}
    ${sUpsert}`;
/** The node_compliance triggers' hooks counting the node's groups (migration 38 makes the triggers again with them). */
export const sqliteGroupHooks: ComplianceHooks = { add: (id, r) => sGroups(id, '1', r), take: (id, r) => sGroups(id, '-1', r) };
/** Node row `n` counted (1) or taken (-1) under its class at mode -1, for each of its groups. */
const sNodeGroups = (n: string, sign: string) => `INSERT INTO kept_groups (group_id, class, mode, nodes)
    SELECT g.group_id, ${sClassRow(n)}, -1, ${sign} FROM policy_group_members g WHERE g.node_id = ${n}.id
    ${sUpsert}`;
/** One membership `m` counted (1) or taken (-1): its node's class, and its compliance row if any. */
const sMember = (m: string, sign: string) => `INSERT INTO kept_groups (group_id, class, mode, nodes)
    SELECT ${m}.group_id, ${sClassRow('n')}, -1, ${sign} FROM nodes n WHERE n.id = ${m}.node_id
    ${sUpsert}
  INSERT INTO kept_groups (group_id, class, mode, nodes, ${cols})
    SELECT ${m}.group_id, k.class, k.mode, ${sign}, ${C.map((c) => `${sign} * t.${c}`).join(', ')}
    FROM kept_nodes k JOIN node_compliance t ON t.node_id = k.node_id WHERE k.node_id = ${m}.node_id
    ${sUpsert}`;

/**
 * The policy_group_members triggers of SQLite, counting each membership written, when `only(id)`
 * holds for its node (migration 38: not for the nodes a batch writer counts itself).
 */
export function sqliteMemberTriggers(only?: (id: string) => string): string {
  const when = (m: string) => (only ? ` WHEN ${only(`${m}.node_id`)}` : '');
  return `CREATE TRIGGER kept_groups_member_insert AFTER INSERT ON policy_group_members${when('NEW')} BEGIN
  ${sMember('NEW', '1')}
END;
CREATE TRIGGER kept_groups_member_delete AFTER DELETE ON policy_group_members${when('OLD')} BEGIN
  ${sMember('OLD', '-1')}
END;
`;
}

const FIELDS = ['status', 'state', 'accepted'];
const sNodeCounts = (r: string, sign: string) => `INSERT INTO kept_node_counts (field, value, nodes)
    VALUES ${FIELDS.map((f) => `('${f}', ${r}.${f}, ${sign})`).join(', ')}
    ON CONFLICT (field, value) DO UPDATE SET nodes = nodes + excluded.nodes;`;
const nodeCountsFill = `INSERT INTO kept_node_counts (field, value, nodes)
  ${FIELDS.map((f) => `SELECT '${f}', ${f}, count(*) FROM nodes GROUP BY ${f}`).join(' UNION ALL ')};`;

const sqlite = `
CREATE TABLE kept_node_counts (field TEXT NOT NULL, value TEXT NOT NULL, nodes INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (field, value)) STRICT, WITHOUT ROWID;
${nodeCountsFill}
CREATE TRIGGER kept_node_counts_insert AFTER INSERT ON nodes BEGIN
  ${sNodeCounts('NEW', '1')}
END;
CREATE TRIGGER kept_node_counts_delete AFTER DELETE ON nodes BEGIN
  ${sNodeCounts('OLD', '-1')}
END;
CREATE TRIGGER kept_node_counts_update AFTER UPDATE OF ${FIELDS.join(', ')} ON nodes
  WHEN ${FIELDS.map((f) => `OLD.${f} IS NOT NEW.${f}`).join(' OR ')} BEGIN
  ${sNodeCounts('OLD', '-1')}
  ${sNodeCounts('NEW', '1')}
END;
CREATE TABLE policy_group_members (group_id TEXT NOT NULL, node_id TEXT NOT NULL, PRIMARY KEY (group_id, node_id)) STRICT, WITHOUT ROWID;
CREATE INDEX policy_group_members_node_idx ON policy_group_members (node_id, group_id);
CREATE TABLE kept_groups (group_id TEXT NOT NULL, class TEXT NOT NULL, mode INTEGER NOT NULL, nodes INTEGER NOT NULL DEFAULT 0,
  ${C.map((c) => `${c} INTEGER NOT NULL DEFAULT 0`).join(', ')}, PRIMARY KEY (group_id, class, mode)) STRICT, WITHOUT ROWID;
DROP TRIGGER kept_compliance_insert;
DROP TRIGGER kept_compliance_update;
DROP TRIGGER kept_compliance_delete;
${sqliteComplianceTriggers(sqliteGroupHooks)}
${sqliteMemberTriggers()}CREATE TRIGGER kept_groups_node_insert AFTER INSERT ON nodes BEGIN
  ${sNodeGroups('NEW', '1')}
END;
CREATE TRIGGER kept_groups_node_delete BEFORE DELETE ON nodes BEGIN
  DELETE FROM policy_group_members WHERE node_id = OLD.id;
END;
CREATE TRIGGER kept_groups_node_class AFTER UPDATE OF accepted, relay, last_inventory_at, certificate_fingerprint ON nodes
  WHEN (${sClassRow('OLD')}) IS NOT (${sClassRow('NEW')}) BEGIN
  ${sNodeGroups('OLD', '-1')}
  ${sNodeGroups('NEW', '1')}
END;
`;

/**
 * The group counters and node counts made again from the stored rows, on SQLite (for a bulk
 * loader that drops the kept_* triggers, after migration 23's sqliteKeptRefill).
 */
export const sqliteKeptGroupsRefill = `DELETE FROM kept_groups; DELETE FROM kept_node_counts;
${nodeCountsFill}
INSERT INTO kept_groups (group_id, class, mode, nodes) SELECT g.group_id, ${sClassRow('n')}, -1, count(*)
  FROM policy_group_members g JOIN nodes n ON n.id = g.node_id GROUP BY 1, 2;
INSERT INTO kept_groups (group_id, class, mode, nodes, ${cols}) SELECT g.group_id, k.class, k.mode, count(*), ${C.map((c) => `sum(t.${c})`).join(', ')}
  FROM policy_group_members g JOIN kept_nodes k ON k.node_id = g.node_id JOIN node_compliance t ON t.node_id = g.node_id GROUP BY 1, 2, 3;
`;

// ---- PostgreSQL ------------------------------------------------------------------------------

const pgCounts = C.map((c) => `${c} bigint NOT NULL DEFAULT 0`).join(', ');
/**
 * The kept advisory lock from this version on: one per schema (advisory locks are per database,
 * and until 24 every Capstan schema of a database shared one, so that a sweep or a membership
 * write in one waited for, and gave up behind, the writers of another).
 */
export const KEPT_LOCK_ARGS = '7262, hashtext(current_schema())';
const pGroups = (id: string, sign: string, r: string, cls: string, mode: string) => `INSERT INTO kept_groups_log (group_id, class, mode, nodes, ${cols})
    SELECT g.group_id, ${cls}, ${mode}, ${sign}, ${C.map((c) => `${sign} * ${r}.${c}`).join(', ')} FROM policy_group_members g WHERE g.node_id = ${id};`;
const pNodeGroups = (n: string, sign: string) => `INSERT INTO kept_groups_log (group_id, class, mode, nodes)
    SELECT g.group_id, ${pClassRow(n)}, -1, ${sign} FROM policy_group_members g WHERE g.node_id = ${n}.id;`;
/** The memberships of a transition table counted (1) or taken (-1). */
const pMembers = (table: string, sign: string) => `INSERT INTO kept_groups_log (group_id, class, mode, nodes)
    SELECT m.group_id, ${pClassRow('n')}, -1, ${sign} FROM ${table} m JOIN nodes n ON n.id = m.node_id;
  INSERT INTO kept_groups_log (group_id, class, mode, nodes, ${cols})
    SELECT m.group_id, k.class, k.mode, ${sign}, ${C.map((c) => `${sign} * t.${c}`).join(', ')}
    FROM ${table} m JOIN kept_nodes k ON k.node_id = m.node_id JOIN node_compliance t ON t.node_id = m.node_id;`;

const pNodeCounts = (r: string, sign: string) => `INSERT INTO kept_node_counts_log (field, value, nodes)
    VALUES ${FIELDS.map((f) => `('${f}', ${r}.${f}, ${sign})`).join(', ')};`;

/**
 * The statement functions of policy_group_members' writes: a log row per membership (migration 38
 * sums them by key; tests that undo it make these again).
 */
export const pgMembersFunctions = `CREATE FUNCTION kept_groups_members_added() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  ${pMembers('added', '1')}
  RETURN NULL;
END $f$;
CREATE FUNCTION kept_groups_members_removed() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  ${pMembers('removed', '-1')}
  RETURN NULL;
END $f$;
`;

const postgres = `
CREATE TABLE kept_node_counts (field text NOT NULL, value text NOT NULL, nodes bigint NOT NULL DEFAULT 0, PRIMARY KEY (field, value));
CREATE TABLE kept_node_counts_log (field text NOT NULL, value text NOT NULL, nodes bigint NOT NULL DEFAULT 0);
${nodeCountsFill}
CREATE FUNCTION kept_node_counts_trg() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    ${pNodeCounts('OLD', '-1')}
  END IF;
  IF TG_OP IN ('UPDATE', 'INSERT') THEN
    ${pNodeCounts('NEW', '1')}
  END IF;
  RETURN NULL;
END $f$;
CREATE TRIGGER kept_node_counts_write AFTER INSERT OR DELETE ON nodes FOR EACH ROW EXECUTE FUNCTION kept_node_counts_trg();
CREATE TRIGGER kept_node_counts_update AFTER UPDATE OF ${FIELDS.join(', ')} ON nodes
  FOR EACH ROW WHEN (${FIELDS.map((f) => `OLD.${f} IS DISTINCT FROM NEW.${f}`).join(' OR ')}) EXECUTE FUNCTION kept_node_counts_trg();
CREATE TABLE policy_group_members (group_id text COLLATE "C" NOT NULL, node_id text COLLATE "C" NOT NULL, PRIMARY KEY (group_id, node_id));
CREATE INDEX policy_group_members_node_idx ON policy_group_members (node_id, group_id);
CREATE TABLE kept_groups (group_id text COLLATE "C" NOT NULL, class text NOT NULL, mode smallint NOT NULL, nodes bigint NOT NULL DEFAULT 0, ${pgCounts},
  PRIMARY KEY (group_id, class, mode));
CREATE TABLE kept_groups_log (group_id text COLLATE "C" NOT NULL, class text NOT NULL, mode smallint NOT NULL, nodes bigint NOT NULL DEFAULT 0, ${pgCounts});

${pgComplianceFunction({
    add: (id, r, cls, mode) => pGroups(id, '1', r, cls, mode),
    take: (id, r, cls, mode) => pGroups(id, '-1', r, cls, mode),
  }, KEPT_LOCK_ARGS).replace('CREATE FUNCTION', 'CREATE OR REPLACE FUNCTION')}

${pgMembersFunctions}CREATE TRIGGER kept_groups_members_insert AFTER INSERT ON policy_group_members REFERENCING NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION kept_groups_members_added();
CREATE TRIGGER kept_groups_members_delete AFTER DELETE ON policy_group_members REFERENCING OLD TABLE AS removed
  FOR EACH STATEMENT EXECUTE FUNCTION kept_groups_members_removed();

CREATE FUNCTION kept_groups_node_trg() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_advisory_xact_lock_shared(${KEPT_LOCK_ARGS});
  IF TG_OP = 'INSERT' THEN
    ${pNodeGroups('NEW', '1')}
  ELSIF TG_OP = 'DELETE' THEN
    DELETE FROM policy_group_members WHERE node_id = OLD.id;
    RETURN OLD;
  ELSIF (${pClassRow('OLD')}) IS DISTINCT FROM (${pClassRow('NEW')}) THEN
    ${pNodeGroups('OLD', '-1')}
    ${pNodeGroups('NEW', '1')}
  END IF;
  RETURN NULL;
END $f$;
-- Named to fire after migration 23's kept_nodes (triggers fire by name): a class change touches
-- the node's compliance row there, under the same lock. An update of the class's columns that
-- leaves the class as it was (an inventory's time, every inventory) calls no function.
CREATE TRIGGER kept_nodes_groups AFTER INSERT ON nodes FOR EACH ROW EXECUTE FUNCTION kept_groups_node_trg();
CREATE TRIGGER kept_nodes_groups_class AFTER UPDATE OF accepted, relay, last_inventory_at, certificate_fingerprint ON nodes
  FOR EACH ROW WHEN ((${pClassRow('OLD')}) IS DISTINCT FROM (${pClassRow('NEW')})) EXECUTE FUNCTION kept_groups_node_trg();
CREATE TRIGGER kept_nodes_groups_delete BEFORE DELETE ON nodes FOR EACH ROW EXECUTE FUNCTION kept_groups_node_trg();
`;

export const keptGroups: Migration = { version: 25, name: 'kept_groups', sqlite, postgres };
