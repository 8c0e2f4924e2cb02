/**
 * Version 23: fleet compliance kept as counters instead of summed from every node when read.
 *
 * - kept_nodes: per node with compliance, the class (agent, relay, agentless, or none when not
 *   accepted) and the time mode (0 the run decides, 1 applying, 2 no answer) its rows are
 *   counted under, decided against the thresholds of kept_sweep (silent_before, applying_after).
 * - kept_fleet: per (class, mode) the node count and the summed node counts; mode -1 rows count
 *   every node of the class, with or without compliance (from the nodes table).
 * - kept_directives: per (rule, directive, class, mode) the node count and summed counts.
 * - kept_rules: per (rule, class) the number of nodes with at least one row of the rule.
 *
 * Triggers keep them in the transaction that writes the rows they sum: node_compliance,
 * node_compliance_directives and nodes (acceptance, relay, agent marks, deletion). Moving the
 * thresholds (the sweep, compliance/kept.ts) touches the nodes whose mode may change and the
 * same triggers move their rows. A reader at another moment corrects the counters with the nodes
 * whose thresholds lie between the swept ones and its own.
 *
 * On PostgreSQL the triggers append to *_log tables (no row shared by concurrent runs: no lock
 * waits, no deadlocks) that the sweep folds into the counters; readers add both. A shared
 * advisory lock (key 7262) keeps a sweep from moving the thresholds under a writer deciding a mode.
 */
import type { Migration } from './index.js';

export const C = ['success', 'repaired', 'error', 'non_compliant', 'audit_compliant', 'not_applicable', 'unexpected', 'missing'];
const cols = C.join(', ');

// ---- SQLite ----------------------------------------------------------------------------------

const sClassOf = (id: string) => `coalesce((SELECT CASE WHEN n.accepted <> 'accepted' THEN 'none' WHEN n.relay = 1 THEN 'relay'
  WHEN n.last_inventory_at IS NOT NULL OR n.certificate_fingerprint IS NOT NULL THEN 'agent' ELSE 'agentless' END FROM nodes n WHERE n.id = ${id}), 'none')`;
const sModeOf = (r: string) => `(SELECT CASE WHEN ${r}.answered_s IS NOT NULL AND ${r}.answered_s + ${r}.keep_last_s <= s.silent_before THEN 2
  WHEN ${r}.applying_since_s IS NOT NULL AND ${r}.applying_since_s > s.applying_after THEN 1 ELSE 0 END FROM kept_sweep s)`;
const sFleet = (cls: string, mode: string, sign: string, r: string) => `INSERT INTO kept_fleet (class, mode, nodes, ${cols})
    VALUES (${cls}, ${mode}, ${sign}, ${C.map((c) => `${sign} * ${r}.${c}`).join(', ')})
    ON CONFLICT (class, mode) DO UPDATE SET nodes = nodes + excluded.nodes, ${C.map((c) => `${c} = ${c} + excluded.${c}`).join(', ')};`;
/** Every directive row of node `id` added (sign 1) or taken (-1) under class `cls` and mode `mode` (over k, its kept_nodes row), when `cond`. */
const sDirs = (id: string, sign: string, cls: string, mode: string, cond: string) => `INSERT INTO kept_directives (rule_id, directive_id, class, mode, nodes, ${cols})
    SELECT d.rule_id, d.directive_id, ${cls}, ${mode}, ${sign}, ${C.map((c) => `${sign} * d.${c}`).join(', ')}
    FROM node_compliance_directives d JOIN kept_nodes k ON k.node_id = d.node_id WHERE d.node_id = ${id} AND ${cond}
    ON CONFLICT (rule_id, directive_id, class, mode) DO UPDATE SET nodes = nodes + excluded.nodes, ${C.map((c) => `${c} = ${c} + excluded.${c}`).join(', ')};`;
/** The rules of node `id` counted (sign 1) or taken (-1) under class `cls`, when `cond`. */
const sRules = (id: string, sign: string, cls: string, cond: string) => `INSERT INTO kept_rules (rule_id, class, nodes)
    SELECT DISTINCT d.rule_id, ${cls}, ${sign} FROM node_compliance_directives d JOIN kept_nodes k ON k.node_id = d.node_id
    WHERE d.node_id = ${id} AND ${cond}
    ON CONFLICT (rule_id, class) DO UPDATE SET nodes = nodes + excluded.nodes;`;
const sOne = (sign: string, r: string) => `INSERT INTO kept_directives (rule_id, directive_id, class, mode, nodes, ${cols})
    SELECT ${r}.rule_id, ${r}.directive_id, k.class, k.mode, ${sign}, ${C.map((c) => `${sign} * ${r}.${c}`).join(', ')}
    FROM kept_nodes k WHERE k.node_id = ${r}.node_id
    ON CONFLICT (rule_id, directive_id, class, mode) DO UPDATE SET nodes = nodes + excluded.nodes, ${C.map((c) => `${c} = ${c} + excluded.${c}`).join(', ')};`;
const sRuleOne = (sign: string, r: string) => `INSERT INTO kept_rules (rule_id, class, nodes)
    SELECT ${r}.rule_id, k.class, ${sign} FROM kept_nodes k WHERE k.node_id = ${r}.node_id
      AND NOT EXISTS (SELECT 1 FROM node_compliance_directives o WHERE o.node_id = ${r}.node_id AND o.rule_id = ${r}.rule_id AND o.directive_id <> ${r}.directive_id)
    ON CONFLICT (rule_id, class) DO UPDATE SET nodes = nodes + excluded.nodes;`;
const kept = (id: string, what: 'class' | 'mode') => `(SELECT ${what} FROM kept_nodes WHERE node_id = ${id})`;
const MOVED = '(k.class IS NOT k.prev_class OR k.mode IS NOT k.prev_mode)';
const countsDiffer = C.map((c) => `OLD.${c} IS NOT NEW.${c}`).join(' OR ');
const nodeClassCols = 'accepted, relay, last_inventory_at, certificate_fingerprint';
export const sClassRow = (r: string) => `CASE WHEN ${r}.accepted <> 'accepted' THEN 'none' WHEN ${r}.relay = 1 THEN 'relay'
  WHEN ${r}.last_inventory_at IS NOT NULL OR ${r}.certificate_fingerprint IS NOT NULL THEN 'agent' ELSE 'agentless' END`;
const sNodeCount = (cls: string, sign: string) => `INSERT INTO kept_fleet (class, mode, nodes) VALUES (${cls}, -1, ${sign})
    ON CONFLICT (class, mode) DO UPDATE SET nodes = nodes + excluded.nodes;`;

/**
 * What a node_compliance row adds to counters kept elsewhere (migration 25's groups), at the
 * points of the node_compliance triggers where the node's kept class and mode are known: `add`
 * after a row is counted under them (NEW), `take` before its old counts leave them (OLD).
 */
export interface ComplianceHooks {
  add: (id: string, r: string) => string;
  take: (id: string, r: string) => string;
}
const noHooks: ComplianceHooks = { add: () => '', take: () => '' };

/**
 * The node_compliance triggers of SQLite, with `hooks` (migration 25 makes them again with its
 * own), their moves of node `id`'s directive rows and rules made only when `only(id)` holds
 * (migration 38: not for the nodes a batch writer counts itself).
 */
export function sqliteComplianceTriggers(hooks: ComplianceHooks = noHooks, only?: (id: string) => string): string {
  const when = (id: string, cond: string) => (only ? `${cond} AND ${only(id)}` : cond);
  return `
CREATE TRIGGER kept_compliance_insert AFTER INSERT ON node_compliance BEGIN
  INSERT INTO kept_nodes (node_id, class, mode) VALUES (NEW.node_id, ${sClassOf('NEW.node_id')}, ${sModeOf('NEW')})
    ON CONFLICT (node_id) DO UPDATE SET class = excluded.class, mode = excluded.mode;
  ${sFleet(kept('NEW.node_id', 'class'), kept('NEW.node_id', 'mode'), '1', 'NEW')}
  ${sDirs('NEW.node_id', '1', 'k.class', 'k.mode', when('NEW.node_id', '1'))}
  ${sRules('NEW.node_id', '1', 'k.class', when('NEW.node_id', '1'))}
  ${hooks.add('NEW.node_id', 'NEW')}
END;
CREATE TRIGGER kept_compliance_update AFTER UPDATE ON node_compliance
  WHEN ${countsDiffer} OR ${kept('NEW.node_id', 'class')} IS NOT ${sClassOf('NEW.node_id')} OR ${kept('NEW.node_id', 'mode')} IS NOT ${sModeOf('NEW')} BEGIN
  ${sFleet(kept('NEW.node_id', 'class'), kept('NEW.node_id', 'mode'), '-1', 'OLD')}
  ${hooks.take('NEW.node_id', 'OLD')}
  UPDATE kept_nodes SET prev_class = class, prev_mode = mode, class = ${sClassOf('NEW.node_id')}, mode = ${sModeOf('NEW')} WHERE node_id = NEW.node_id;
  ${sFleet(kept('NEW.node_id', 'class'), kept('NEW.node_id', 'mode'), '1', 'NEW')}
  ${hooks.add('NEW.node_id', 'NEW')}
  ${sDirs('NEW.node_id', '-1', 'k.prev_class', 'k.prev_mode', when('NEW.node_id', MOVED))}
  ${sDirs('NEW.node_id', '1', 'k.class', 'k.mode', when('NEW.node_id', MOVED))}
  ${sRules('NEW.node_id', '-1', 'k.prev_class', when('NEW.node_id', 'k.class IS NOT k.prev_class'))}
  ${sRules('NEW.node_id', '1', 'k.class', when('NEW.node_id', 'k.class IS NOT k.prev_class'))}
END;
CREATE TRIGGER kept_compliance_delete BEFORE DELETE ON node_compliance BEGIN
  ${sFleet(kept('OLD.node_id', 'class'), kept('OLD.node_id', 'mode'), '-1', 'OLD')}
  ${sDirs('OLD.node_id', '-1', 'k.class', 'k.mode', when('OLD.node_id', '1'))}
  ${sRules('OLD.node_id', '-1', 'k.class', when('OLD.node_id', '1'))}
  ${hooks.take('OLD.node_id', 'OLD')}
  DELETE FROM kept_nodes WHERE node_id = OLD.node_id;
END;
`;
}

const sqliteTables = `
CREATE TABLE kept_sweep (id INTEGER PRIMARY KEY CHECK (id = 1), silent_before INTEGER NOT NULL, applying_after INTEGER NOT NULL) STRICT;
CREATE TABLE kept_nodes (node_id TEXT PRIMARY KEY, class TEXT NOT NULL, mode INTEGER NOT NULL, prev_class TEXT, prev_mode INTEGER) STRICT, WITHOUT ROWID;
CREATE TABLE kept_fleet (class TEXT NOT NULL, mode INTEGER NOT NULL, nodes INTEGER NOT NULL DEFAULT 0,
  ${C.map((c) => `${c} INTEGER NOT NULL DEFAULT 0`).join(', ')}, PRIMARY KEY (class, mode)) STRICT, WITHOUT ROWID;
CREATE TABLE kept_directives (rule_id TEXT NOT NULL, directive_id TEXT NOT NULL, class TEXT NOT NULL, mode INTEGER NOT NULL, nodes INTEGER NOT NULL DEFAULT 0,
  ${C.map((c) => `${c} INTEGER NOT NULL DEFAULT 0`).join(', ')}, PRIMARY KEY (rule_id, directive_id, class, mode)) STRICT, WITHOUT ROWID;
CREATE TABLE kept_rules (rule_id TEXT NOT NULL, class TEXT NOT NULL, nodes INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (rule_id, class)) STRICT, WITHOUT ROWID;
CREATE INDEX node_compliance_silence_idx ON node_compliance ((answered_s + keep_last_s));
CREATE INDEX node_compliance_applying_idx ON node_compliance (applying_since_s);
INSERT INTO kept_sweep (id, silent_before, applying_after) VALUES (1, CAST(strftime('%s', 'now') AS INTEGER), CAST(strftime('%s', 'now') AS INTEGER));
`;

/**
 * The node_compliance_directives triggers of SQLite, counting each row written, when `only(r)`
 * holds for its row `r` (migration 38: not for the nodes a batch writer counts itself).
 */
export function sqliteDirectiveTriggers(only?: (r: string) => string): string {
  const when = (r: string, cond?: string) => (only ? ` WHEN ${cond ? `(${cond}) AND ` : ''}${only(r)}` : cond ? ` WHEN ${cond}` : '');
  return `CREATE TRIGGER kept_directive_insert AFTER INSERT ON node_compliance_directives${when('NEW')} BEGIN
  ${sOne('1', 'NEW')}
  ${sRuleOne('1', 'NEW')}
END;
CREATE TRIGGER kept_directive_update AFTER UPDATE ON node_compliance_directives${when('OLD', countsDiffer)} BEGIN
  ${sOne('-1', 'OLD')}
  ${sOne('1', 'NEW')}
END;
CREATE TRIGGER kept_directive_delete AFTER DELETE ON node_compliance_directives${when('OLD')} BEGIN
  ${sOne('-1', 'OLD')}
  ${sRuleOne('-1', 'OLD')}
END;
`;
}

const sqliteTriggers = `
CREATE TRIGGER kept_nodes_insert AFTER INSERT ON nodes BEGIN
  ${sNodeCount(sClassRow('NEW'), '1')}
END;
CREATE TRIGGER kept_nodes_delete AFTER DELETE ON nodes BEGIN
  ${sNodeCount(sClassRow('OLD'), '-1')}
END;
CREATE TRIGGER kept_nodes_class AFTER UPDATE OF ${nodeClassCols} ON nodes WHEN (${sClassRow('OLD')}) IS NOT (${sClassRow('NEW')}) BEGIN
  ${sNodeCount(sClassRow('OLD'), '-1')}
  ${sNodeCount(sClassRow('NEW'), '1')}
  UPDATE node_compliance SET keep_last_s = keep_last_s WHERE node_id = NEW.id;
END;
${sqliteComplianceTriggers()}${sqliteDirectiveTriggers()}`;

/** The counters for what is already stored: every node counted under the initial thresholds. */
const sqliteFill = `
INSERT INTO kept_fleet (class, mode, nodes) SELECT ${sClassRow('n')}, -1, count(*) FROM nodes n GROUP BY 1;
INSERT INTO kept_nodes (node_id, class, mode) SELECT t.node_id, ${sClassOf('t.node_id')}, ${sModeOf('t')} FROM node_compliance t;
INSERT INTO kept_fleet (class, mode, nodes, ${cols}) SELECT k.class, k.mode, count(*), ${C.map((c) => `sum(t.${c})`).join(', ')}
  FROM node_compliance t JOIN kept_nodes k ON k.node_id = t.node_id GROUP BY k.class, k.mode;
INSERT INTO kept_directives (rule_id, directive_id, class, mode, nodes, ${cols})
  SELECT d.rule_id, d.directive_id, k.class, k.mode, count(*), ${C.map((c) => `sum(d.${c})`).join(', ')}
  FROM node_compliance_directives d JOIN kept_nodes k ON k.node_id = d.node_id GROUP BY 1, 2, 3, 4;
INSERT INTO kept_rules (rule_id, class, nodes) SELECT d.rule_id, k.class, count(DISTINCT d.node_id)
  FROM node_compliance_directives d JOIN kept_nodes k ON k.node_id = d.node_id GROUP BY 1, 2;
`;

const sqlite = sqliteTables + sqliteFill + sqliteTriggers;

/**
 * The counters made again from the stored rows, on SQLite (the kept tables emptied first). For a
 * bulk loader that drops the kept_* triggers, writes its rows and puts the triggers back: the
 * benchmark's 100,000-node fleet loads in seconds instead of minutes of per-row triggers.
 */
export const sqliteKeptRefill = `DELETE FROM kept_fleet; DELETE FROM kept_nodes; DELETE FROM kept_directives; DELETE FROM kept_rules;
${sqliteFill}`;

// ---- PostgreSQL ------------------------------------------------------------------------------

const pgCounts = C.map((c) => `${c} bigint NOT NULL DEFAULT 0`).join(', ');
export const pClassRow = (r: string) => `CASE WHEN ${r}.accepted <> 'accepted' THEN 'none' WHEN ${r}.relay = 1 THEN 'relay'
  WHEN ${r}.last_inventory_at IS NOT NULL OR ${r}.certificate_fingerprint IS NOT NULL THEN 'agent' ELSE 'agentless' END`;
const pModeOf = (r: string) => `CASE WHEN ${r}.answered_s IS NOT NULL AND ${r}.answered_s + ${r}.keep_last_s <= s.silent_before THEN 2
  WHEN ${r}.applying_since_s IS NOT NULL AND ${r}.applying_since_s > s.applying_after THEN 1 ELSE 0 END`;
const pFleet = (cls: string, mode: string, sign: string, r: string) => `INSERT INTO kept_fleet_log (class, mode, nodes, ${cols})
    VALUES (${cls}, ${mode}, ${sign}, ${C.map((c) => `${sign} * ${r}.${c}`).join(', ')});`;
const pDirectives = (id: string, sign: string, cls: string, mode: string) => `INSERT INTO kept_directives_log (rule_id, directive_id, class, mode, nodes, ${cols})
    SELECT d.rule_id, d.directive_id, ${cls}, ${mode}, ${sign}, ${C.map((c) => `${sign} * d.${c}`).join(', ')}
    FROM node_compliance_directives d WHERE d.node_id = ${id};`;
const pRules = (id: string, sign: string, cls: string) => `INSERT INTO kept_rules_log (rule_id, class, nodes)
    SELECT DISTINCT d.rule_id, ${cls}, ${sign} FROM node_compliance_directives d WHERE d.node_id = ${id};`;
/** The rows of a transition table added (1) or taken (-1) under their node's kept class and mode. */
const pRows = (table: string, sign: string) => `INSERT INTO kept_directives_log (rule_id, directive_id, class, mode, nodes, ${cols})
    SELECT x.rule_id, x.directive_id, k.class, k.mode, ${sign}, ${C.map((c) => `${sign} * x.${c}`).join(', ')}
    FROM ${table} x JOIN kept_nodes k ON k.node_id = x.node_id;`;
const pCountsDiffer = `(${C.map((c) => `OLD.${c}`).join(', ')}) IS DISTINCT FROM (${C.map((c) => `NEW.${c}`).join(', ')})`;

/** Hooks of the PostgreSQL node_compliance function: as ComplianceHooks, with the class and mode the row is counted under. */
export interface PgComplianceHooks {
  add: (id: string, r: string, cls: string, mode: string) => string;
  take: (id: string, r: string, cls: string, mode: string) => string;
}

/**
 * The PostgreSQL node_compliance trigger function, with `hooks` and the arguments of the kept
 * advisory lock it holds shared (migration 25 replaces it with its own: a lock per schema).
 */
export function pgComplianceFunction(hooks: PgComplianceHooks = { add: () => '', take: () => '' }, lock = '7262'): string {
  return `CREATE FUNCTION kept_compliance_trg() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE
  k record;
  cls text;
  md smallint;
BEGIN
  IF TG_OP = 'DELETE' THEN
    SELECT * INTO k FROM kept_nodes WHERE node_id = OLD.node_id;
    IF FOUND THEN
      ${pFleet('k.class', 'k.mode', '-1', 'OLD')}
      ${pDirectives('OLD.node_id', '-1', 'k.class', 'k.mode')}
      ${pRules('OLD.node_id', '-1', 'k.class')}
      ${hooks.take('OLD.node_id', 'OLD', 'k.class', 'k.mode')}
      DELETE FROM kept_nodes WHERE node_id = OLD.node_id;
    END IF;
    RETURN OLD;
  END IF;
  PERFORM pg_advisory_xact_lock_shared(${lock});
  cls := kept_node_class(NEW.node_id);
  SELECT ${pModeOf('NEW')} INTO md FROM kept_sweep s;
  SELECT * INTO k FROM kept_nodes WHERE node_id = NEW.node_id;
  IF NOT FOUND THEN
    INSERT INTO kept_nodes (node_id, class, mode) VALUES (NEW.node_id, cls, md);
    ${pFleet('cls', 'md', '1', 'NEW')}
    ${pDirectives('NEW.node_id', '1', 'cls', 'md')}
    ${pRules('NEW.node_id', '1', 'cls')}
    ${hooks.add('NEW.node_id', 'NEW', 'cls', 'md')}
    RETURN NULL;
  END IF;
  IF k.class = cls AND k.mode = md AND TG_OP = 'UPDATE' AND NOT ${pCountsDiffer} THEN
    RETURN NULL;
  END IF;
  IF TG_OP = 'UPDATE' THEN
    ${pFleet('k.class', 'k.mode', '-1', 'OLD')}
    ${hooks.take('NEW.node_id', 'OLD', 'k.class', 'k.mode')}
  END IF;
  ${pFleet('cls', 'md', '1', 'NEW')}
  ${hooks.add('NEW.node_id', 'NEW', 'cls', 'md')}
  IF k.class IS DISTINCT FROM cls OR k.mode IS DISTINCT FROM md THEN
    ${pDirectives('NEW.node_id', '-1', 'k.class', 'k.mode')}
    ${pDirectives('NEW.node_id', '1', 'cls', 'md')}
    UPDATE kept_nodes SET class = cls, mode = md WHERE node_id = NEW.node_id;
  END IF;
  IF k.class IS DISTINCT FROM cls THEN
    ${pRules('NEW.node_id', '-1', 'k.class')}
    ${pRules('NEW.node_id', '1', 'cls')}
  END IF;
  RETURN NULL;
END $f$;
`;
}

/**
 * The statement functions of node_compliance_directives' writes: a log row per row written
 * (migration 38 sums them by key; tests that undo it make these again).
 */
export const pgDirectiveFunctions = `CREATE FUNCTION kept_directives_added() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  ${pRows('added', '1')}
  INSERT INTO kept_rules_log (rule_id, class, nodes)
    SELECT a.rule_id, k.class, 1 FROM (SELECT node_id, rule_id, count(*) AS n FROM added GROUP BY 1, 2) a JOIN kept_nodes k ON k.node_id = a.node_id
    WHERE (SELECT count(*) FROM node_compliance_directives d WHERE d.node_id = a.node_id AND d.rule_id = a.rule_id) = a.n;
  RETURN NULL;
END $f$;
CREATE FUNCTION kept_directives_changed() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  ${pRows('old_rows', '-1')}
  ${pRows('new_rows', '1')}
  RETURN NULL;
END $f$;
CREATE FUNCTION kept_directives_removed() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  ${pRows('removed', '-1')}
  INSERT INTO kept_rules_log (rule_id, class, nodes)
    SELECT r.rule_id, k.class, -1 FROM (SELECT DISTINCT node_id, rule_id FROM removed) r JOIN kept_nodes k ON k.node_id = r.node_id
    WHERE NOT EXISTS (SELECT 1 FROM node_compliance_directives d WHERE d.node_id = r.node_id AND d.rule_id = r.rule_id);
  RETURN NULL;
END $f$;
`;

const postgres = `
CREATE TABLE kept_sweep (id integer PRIMARY KEY CHECK (id = 1), silent_before bigint NOT NULL, applying_after bigint NOT NULL);
INSERT INTO kept_sweep (id, silent_before, applying_after) VALUES (1, floor(extract(epoch FROM now()))::bigint, floor(extract(epoch FROM now()))::bigint);
CREATE TABLE kept_nodes (node_id text COLLATE "C" PRIMARY KEY, class text NOT NULL, mode smallint NOT NULL);
CREATE TABLE kept_fleet (class text NOT NULL, mode smallint NOT NULL, nodes bigint NOT NULL DEFAULT 0, ${pgCounts}, PRIMARY KEY (class, mode));
CREATE TABLE kept_directives (rule_id text COLLATE "C" NOT NULL, directive_id text COLLATE "C" NOT NULL, class text NOT NULL, mode smallint NOT NULL,
  nodes bigint NOT NULL DEFAULT 0, ${pgCounts}, PRIMARY KEY (rule_id, directive_id, class, mode));
CREATE TABLE kept_rules (rule_id text COLLATE "C" NOT NULL, class text NOT NULL, nodes bigint NOT NULL DEFAULT 0, PRIMARY KEY (rule_id, class));
CREATE TABLE kept_fleet_log (class text NOT NULL, mode smallint NOT NULL, nodes bigint NOT NULL DEFAULT 0, ${pgCounts});
CREATE TABLE kept_directives_log (rule_id text COLLATE "C" NOT NULL, directive_id text COLLATE "C" NOT NULL, class text NOT NULL, mode smallint NOT NULL,
  nodes bigint NOT NULL DEFAULT 0, ${pgCounts});
CREATE TABLE kept_rules_log (rule_id text COLLATE "C" NOT NULL, class text NOT NULL, nodes bigint NOT NULL DEFAULT 0);
CREATE INDEX node_compliance_silence_idx ON node_compliance ((answered_s + keep_last_s));
CREATE INDEX node_compliance_applying_idx ON node_compliance (applying_since_s);

INSERT INTO kept_fleet (class, mode, nodes) SELECT ${pClassRow('n')}, -1, count(*) FROM nodes n GROUP BY 1;
INSERT INTO kept_nodes (node_id, class, mode) SELECT t.node_id, ${pClassRow('n')}, ${pModeOf('t')}
  FROM node_compliance t JOIN nodes n ON n.id = t.node_id CROSS JOIN kept_sweep s;
INSERT INTO kept_fleet (class, mode, nodes, ${cols}) SELECT k.class, k.mode, count(*), ${C.map((c) => `sum(t.${c})`).join(', ')}
  FROM node_compliance t JOIN kept_nodes k ON k.node_id = t.node_id GROUP BY k.class, k.mode;
INSERT INTO kept_directives (rule_id, directive_id, class, mode, nodes, ${cols})
  SELECT d.rule_id, d.directive_id, k.class, k.mode, count(*), ${C.map((c) => `sum(d.${c})`).join(', ')}
  FROM node_compliance_directives d JOIN kept_nodes k ON k.node_id = d.node_id GROUP BY 1, 2, 3, 4;
INSERT INTO kept_rules (rule_id, class, nodes) SELECT d.rule_id, k.class, count(DISTINCT d.node_id)
  FROM node_compliance_directives d JOIN kept_nodes k ON k.node_id = d.node_id GROUP BY 1, 2;

CREATE FUNCTION kept_node_class(text) RETURNS text LANGUAGE sql STABLE AS $f$
  SELECT coalesce((SELECT ${pClassRow('n')} FROM nodes n WHERE n.id = $1), 'none')
$f$;

CREATE FUNCTION kept_nodes_trg() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO kept_fleet_log (class, mode, nodes) VALUES (${pClassRow('NEW')}, -1, 1);
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO kept_fleet_log (class, mode, nodes) VALUES (${pClassRow('OLD')}, -1, -1);
  ELSIF (${pClassRow('OLD')}) IS DISTINCT FROM (${pClassRow('NEW')}) THEN
    INSERT INTO kept_fleet_log (class, mode, nodes) VALUES (${pClassRow('OLD')}, -1, -1), (${pClassRow('NEW')}, -1, 1);
    UPDATE node_compliance SET keep_last_s = keep_last_s WHERE node_id = NEW.id;
  END IF;
  RETURN NULL;
END $f$;
CREATE TRIGGER kept_nodes AFTER INSERT OR DELETE OR UPDATE OF ${nodeClassCols} ON nodes FOR EACH ROW EXECUTE FUNCTION kept_node_trg_placeholder();

${pgComplianceFunction()}
CREATE TRIGGER kept_compliance_write AFTER INSERT OR UPDATE ON node_compliance FOR EACH ROW EXECUTE FUNCTION kept_compliance_trg();
CREATE TRIGGER kept_compliance_delete BEFORE DELETE ON node_compliance FOR EACH ROW EXECUTE FUNCTION kept_compliance_trg();

${pgDirectiveFunctions}CREATE TRIGGER kept_directives_insert AFTER INSERT ON node_compliance_directives REFERENCING NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION kept_directives_added();
CREATE TRIGGER kept_directives_update AFTER UPDATE ON node_compliance_directives REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION kept_directives_changed();
CREATE TRIGGER kept_directives_delete AFTER DELETE ON node_compliance_directives REFERENCING OLD TABLE AS removed
  FOR EACH STATEMENT EXECUTE FUNCTION kept_directives_removed();
`.replace('kept_node_trg_placeholder', 'kept_nodes_trg');

export const keptCompliance: Migration = { version: 23, name: 'kept_compliance', sqlite, postgres };
