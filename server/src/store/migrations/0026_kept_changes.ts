/**
 * Version 26: the changes histogram kept as counters instead of counted from every change when
 * read (store/changes/kept.ts reads them).
 *
 * - kept_changes: per UTC hour and label, the number of changes.
 * - kept_change_rules: per rule, UTC hour and label, the number of changes.
 *
 * Both move in the transaction that writes the changes: an insert (ingest), a relabel (a run
 * stored before a later one), a deletion (retention, or a node's deletion cascading to its
 * changes). The hour is the one the histogram buckets the change under: on SQLite the first 13
 * characters of its ISO time, on PostgreSQL its time truncated to the hour in UTC.
 *
 * SQLite has one writer at a time: row triggers update the counters directly and drop a row
 * that falls to zero. On PostgreSQL every ingest of the same hour would update the same two rows
 * and hold their locks to commit, so concurrent ingests (several servers, the batch workers)
 * would queue behind each other: statement triggers append one row per (hour, rule, label) a
 * statement moved to kept_changes_log, which the compliance sweep folds into the counters
 * (store/compliance/kept-postgres.ts); readers add both. Rows folded to zero are found through a
 * partial index and dropped by the same fold.
 */
import type { Migration } from './index.js';

// ---- SQLite ----------------------------------------------------------------------------------

const sHour = (r: string) => `substr(${r}.at, 1, 13)`;
/** Change row `r` counted (sign 1) or taken (-1); a counter taken to zero is dropped. */
const sCount = (r: string, sign: '1' | '-1') => `INSERT INTO kept_changes (hour, label, n) VALUES (${sHour(r)}, ${r}.label, ${sign})
    ON CONFLICT (hour, label) DO UPDATE SET n = n + excluded.n;
  INSERT INTO kept_change_rules (rule_id, hour, label, n) VALUES (${r}.rule_id, ${sHour(r)}, ${r}.label, ${sign})
    ON CONFLICT (rule_id, hour, label) DO UPDATE SET n = n + excluded.n;${sign === '-1' ? `
  DELETE FROM kept_changes WHERE hour = ${sHour(r)} AND label = ${r}.label AND n = 0;
  DELETE FROM kept_change_rules WHERE rule_id = ${r}.rule_id AND hour = ${sHour(r)} AND label = ${r}.label AND n = 0;` : ''}`;

const sqlite = `
CREATE TABLE kept_changes (hour TEXT NOT NULL, label TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (hour, label)) STRICT, WITHOUT ROWID;
CREATE TABLE kept_change_rules (rule_id TEXT NOT NULL, hour TEXT NOT NULL, label TEXT NOT NULL, n INTEGER NOT NULL,
  PRIMARY KEY (rule_id, hour, label)) STRICT, WITHOUT ROWID;
INSERT INTO kept_changes (hour, label, n) SELECT substr(at, 1, 13), label, count(*) FROM changes GROUP BY 1, 2;
INSERT INTO kept_change_rules (rule_id, hour, label, n) SELECT rule_id, substr(at, 1, 13), label, count(*) FROM changes GROUP BY 1, 2, 3;
CREATE TRIGGER kept_changes_insert AFTER INSERT ON changes BEGIN
  ${sCount('NEW', '1')}
END;
CREATE TRIGGER kept_changes_delete AFTER DELETE ON changes BEGIN
  ${sCount('OLD', '-1')}
END;
CREATE TRIGGER kept_changes_update AFTER UPDATE OF at, rule_id, label ON changes
  WHEN ${sHour('OLD')} IS NOT ${sHour('NEW')} OR OLD.rule_id IS NOT NEW.rule_id OR OLD.label IS NOT NEW.label BEGIN
  ${sCount('OLD', '-1')}
  ${sCount('NEW', '1')}
END;
`;

// ---- PostgreSQL ------------------------------------------------------------------------------

const pHour = (r: string) => `date_trunc('hour', ${r}.at AT TIME ZONE 'UTC')`;

const postgres = `
CREATE TABLE kept_changes (hour timestamp NOT NULL, label text NOT NULL, n bigint NOT NULL, PRIMARY KEY (hour, label));
CREATE TABLE kept_change_rules (rule_id text COLLATE "C" NOT NULL, hour timestamp NOT NULL, label text NOT NULL, n bigint NOT NULL,
  PRIMARY KEY (rule_id, hour, label));
CREATE INDEX kept_changes_zero_idx ON kept_changes (hour) WHERE n = 0;
CREATE INDEX kept_change_rules_zero_idx ON kept_change_rules (rule_id) WHERE n = 0;
CREATE TABLE kept_changes_log (hour timestamp NOT NULL, rule_id text COLLATE "C" NOT NULL, label text NOT NULL, n bigint NOT NULL);

INSERT INTO kept_changes (hour, label, n) SELECT ${pHour('c')}, c.label, count(*) FROM changes c GROUP BY 1, 2;
INSERT INTO kept_change_rules (rule_id, hour, label, n) SELECT c.rule_id, ${pHour('c')}, c.label, count(*) FROM changes c GROUP BY 1, 2, 3;

CREATE FUNCTION kept_changes_added() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO kept_changes_log (hour, rule_id, label, n) SELECT ${pHour('a')}, a.rule_id, a.label, count(*) FROM added a GROUP BY 1, 2, 3;
  RETURN NULL;
END $f$;
CREATE FUNCTION kept_changes_removed() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO kept_changes_log (hour, rule_id, label, n) SELECT ${pHour('r')}, r.rule_id, r.label, -count(*) FROM removed r GROUP BY 1, 2, 3;
  RETURN NULL;
END $f$;
-- An update (a relabel) moves only the rows whose hour, rule or label it changed.
CREATE FUNCTION kept_changes_changed() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO kept_changes_log (hour, rule_id, label, n)
    SELECT hour, rule_id, label, sum(n) FROM (
      SELECT ${pHour('o')} AS hour, o.rule_id, o.label, -1 AS n FROM old_rows o
      UNION ALL SELECT ${pHour('x')}, x.rule_id, x.label, 1 FROM new_rows x) m
    GROUP BY 1, 2, 3 HAVING sum(n) <> 0;
  RETURN NULL;
END $f$;
CREATE TRIGGER kept_changes_insert AFTER INSERT ON changes REFERENCING NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION kept_changes_added();
CREATE TRIGGER kept_changes_update AFTER UPDATE ON changes REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION kept_changes_changed();
CREATE TRIGGER kept_changes_delete AFTER DELETE ON changes REFERENCING OLD TABLE AS removed
  FOR EACH STATEMENT EXECUTE FUNCTION kept_changes_removed();
`;

export const keptChanges: Migration = { version: 26, name: 'kept_changes', sqlite, postgres };
