/**
 * Version 10: compliance states that depend on time, RUDDER's split of compliant items, and the
 * changes the agents made.
 * - `compliant` becomes `success` (enforce mode) beside a new `audit_compliant` (audit mode), in
 *   both compliance tables. Rows written before keep audit-compliant items under `success` until
 *   the node's next run rewrites them.
 * - node_compliance gains the node's time marks (epoch seconds, server clock), from which the
 *   readers decide `applying` and `no_answer` at the time they read (shared compliance module):
 *   `applying_since_s` (its current policy, while no complete run of it has arrived),
 *   `answered_s` (its last run received) and `keep_last_s` (its groups' expiration policy).
 *   Existing rows get them from their base run and their expectations.
 * - changes: one row per change an agent reported (`result_repaired`, or `audit_noncompliant`
 *   in audit mode), labelled intentional or corrective, with the diff the agent sent. Kept
 *   `retention.changes`, longer than runs, so a change outlives its run (no foreign key). The
 *   time index carries the label, so that a histogram reads the index only.
 */
import type { Migration } from './index.js';

const sqlite = `
ALTER TABLE node_compliance RENAME COLUMN compliant TO success;
ALTER TABLE node_compliance ADD COLUMN audit_compliant INTEGER NOT NULL DEFAULT 0;
ALTER TABLE node_compliance ADD COLUMN applying_since_s INTEGER;
ALTER TABLE node_compliance ADD COLUMN answered_s INTEGER;
ALTER TABLE node_compliance ADD COLUMN keep_last_s INTEGER NOT NULL DEFAULT 0;
ALTER TABLE node_compliance_directives RENAME COLUMN compliant TO success;
ALTER TABLE node_compliance_directives ADD COLUMN audit_compliant INTEGER NOT NULL DEFAULT 0;
UPDATE node_compliance SET answered_s = (SELECT CAST(strftime('%s', r.received_at) AS INTEGER) FROM runs r WHERE r.id = node_compliance.run_id);
UPDATE node_compliance SET applying_since_s = (
    SELECT CAST(strftime('%s', e.set_at) AS INTEGER) FROM nodes n JOIN node_expectations e ON e.node_id = n.id AND e.config_id = n.policy_config_id
    WHERE n.id = node_compliance.node_id AND n.policy_config_id IS NOT node_compliance.config_id);

CREATE TABLE changes (
  id INTEGER PRIMARY KEY,
  node_id TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  run_id INTEGER,
  run_started_at TEXT NOT NULL,
  at TEXT NOT NULL,
  rule_id TEXT NOT NULL,
  directive_id TEXT NOT NULL,
  component TEXT NOT NULL,
  key_value TEXT NOT NULL,
  event_type TEXT NOT NULL,
  message TEXT NOT NULL,
  label TEXT NOT NULL CHECK (label IN ('intentional', 'corrective')),
  config_id TEXT,
  diff TEXT,
  diff_truncated INTEGER NOT NULL DEFAULT 0 CHECK (diff_truncated IN (0, 1))
) STRICT;
CREATE INDEX changes_at_idx ON changes (at, id, label);
CREATE INDEX changes_node_idx ON changes (node_id, at);
CREATE INDEX changes_rule_idx ON changes (rule_id, at);
CREATE INDEX changes_directive_idx ON changes (directive_id, at);
`;

const postgres = `
ALTER TABLE node_compliance RENAME COLUMN compliant TO success;
ALTER TABLE node_compliance ADD COLUMN audit_compliant integer NOT NULL DEFAULT 0;
ALTER TABLE node_compliance ADD COLUMN applying_since_s bigint;
ALTER TABLE node_compliance ADD COLUMN answered_s bigint;
ALTER TABLE node_compliance ADD COLUMN keep_last_s integer NOT NULL DEFAULT 0;
ALTER TABLE node_compliance_directives RENAME COLUMN compliant TO success;
ALTER TABLE node_compliance_directives ADD COLUMN audit_compliant integer NOT NULL DEFAULT 0;
UPDATE node_compliance x SET answered_s = floor(extract(epoch FROM r.received_at))::bigint FROM runs r WHERE r.id = x.run_id;
UPDATE node_compliance x SET applying_since_s = floor(extract(epoch FROM e.set_at))::bigint
  FROM nodes n JOIN node_expectations e ON e.node_id = n.id AND e.config_id = n.policy_config_id
  WHERE n.id = x.node_id AND n.policy_config_id IS DISTINCT FROM x.config_id;

CREATE TABLE changes (
  id bigserial PRIMARY KEY,
  node_id text COLLATE "C" NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  run_id bigint,
  run_started_at text NOT NULL,
  at timestamptz NOT NULL,
  rule_id text COLLATE "C" NOT NULL,
  directive_id text COLLATE "C" NOT NULL,
  component text NOT NULL,
  key_value text NOT NULL,
  event_type text NOT NULL,
  message text NOT NULL,
  label text NOT NULL CHECK (label IN ('intentional', 'corrective')),
  config_id text,
  diff text,
  diff_truncated boolean NOT NULL DEFAULT false
);
CREATE INDEX changes_at_idx ON changes (at, id, label);
CREATE INDEX changes_node_idx ON changes (node_id, at);
CREATE INDEX changes_rule_idx ON changes (rule_id, at);
CREATE INDEX changes_directive_idx ON changes (directive_id, at);
`;

export const complianceChanges: Migration = { version: 10, name: 'compliance_changes', sqlite, postgres };
