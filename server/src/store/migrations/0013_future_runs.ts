/**
 * Version 13: runs dated in the future, and each node's clock skew.
 *
 * A run dated ahead of the server's clock (an agent with a wrong clock, or a forged date) used to
 * be stored: the node's last run stayed there, compliance kept it as its base whatever genuine
 * runs came after, and retention (which deletes by start day) never removed it. The ingest now
 * refuses such runs (ERR_RUN_IN_FUTURE, [limits] max_clock_skew); this repairs what is stored:
 * runs that started more than an hour after the migration runs are deleted (the new rule would
 * refuse them; an hour leaves room for any sane skew) with the changes they carried, compliance based on one of them is
 * dropped (the node's next complete run becomes its base; until then it has no data), and the
 * last run and config of those nodes are their newest remaining run's.
 *
 * `clock_skew`: the node's clock minus the server's, in seconds, at its last upload (see
 * rules.ts); `clock_skew_at` when it was seen.
 */
import type { Migration } from './index.js';

const AHEAD_SQLITE = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+1 hour')";
const sqlite = `
ALTER TABLE nodes ADD COLUMN clock_skew INTEGER;
ALTER TABLE nodes ADD COLUMN clock_skew_at TEXT;
DELETE FROM changes WHERE run_id IN (SELECT id FROM runs WHERE started_at_utc > ${AHEAD_SQLITE});
DELETE FROM runs WHERE started_at_utc > ${AHEAD_SQLITE};
DELETE FROM node_compliance_directives WHERE node_id IN (SELECT node_id FROM node_compliance WHERE run_started_utc > ${AHEAD_SQLITE});
DELETE FROM node_compliance WHERE run_started_utc > ${AHEAD_SQLITE};
UPDATE nodes SET
  last_run_at = (SELECT max(r.started_at_utc) FROM runs r WHERE r.node_id = nodes.id),
  last_config_id = (SELECT r.config_id FROM runs r WHERE r.node_id = nodes.id ORDER BY r.started_at_utc DESC LIMIT 1)
  WHERE last_run_at > ${AHEAD_SQLITE};
`;

const AHEAD_PG = "now() + interval '1 hour'";
const postgres = `
ALTER TABLE nodes ADD COLUMN clock_skew integer;
ALTER TABLE nodes ADD COLUMN clock_skew_at timestamptz;
DELETE FROM changes WHERE run_id IN (SELECT id FROM runs WHERE started_at_utc > ${AHEAD_PG});
DELETE FROM runs WHERE started_at_utc > ${AHEAD_PG};
DELETE FROM node_compliance_directives WHERE node_id IN (SELECT node_id FROM node_compliance WHERE run_started_utc > ${AHEAD_PG});
DELETE FROM node_compliance WHERE run_started_utc > ${AHEAD_PG};
UPDATE nodes SET
  last_run_at = (SELECT max(r.started_at_utc) FROM runs r WHERE r.node_id = nodes.id),
  last_config_id = (SELECT r.config_id FROM runs r WHERE r.node_id = nodes.id ORDER BY r.started_at_utc DESC LIMIT 1)
  WHERE last_run_at > ${AHEAD_PG};
`;

export const futureRuns: Migration = { version: 13, name: 'future_runs', sqlite, postgres };
