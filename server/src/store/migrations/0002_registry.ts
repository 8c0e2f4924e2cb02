/**
 * Version 2: the node registry.
 * - node_certificates: the pinned certificate (1-2 kB of PEM) moves out of `nodes`. It is read
 *   one node at a time; out of the row, a filtered list over 100,000 nodes scans 300-byte rows
 *   instead of 1.7 kB ones (measured on PostgreSQL: 210 → 60 ms; TOAST only moves values out of
 *   rows above ~2 kB, whatever toast_tuple_target says).
 * - nodes: display name, address, manager, region and cloud identity (source_id, region,
 *   account_id: unique when present, so a discovered instance keeps one row), tags and groups
 *   (as JSON on the row for reading, and in node_tags / node_groups for filtering), the server-
 *   clock time of the last contact (silence is measured from it, never from an agent's clock),
 *   when the state last changed, and the config id of the node's current policy.
 * - node_history: every transition of acceptance, state and status, with its time and cause.
 * - revoked_certificates: certificates of deleted nodes, never auto-accepted again.
 * - node_expectations / node_compliance / node_compliance_directives: what each node is expected
 *   to report (per config id), and its compliance, computed when a complete run or new
 *   expectations arrive, so that global compliance over 100,000 nodes is one aggregate query.
 * - registry_counters: purge and retention totals, shared by every server on the database.
 *
 * Postgres also rebuilds `runs` partitioned by day on the run's start (`started_at_utc`), so that
 * retention drops whole days instead of deleting rows under the ingest's feet. Days without a
 * partition of their own (far in the past or future) land in `runs_default`, which retention
 * empties row by row. The id comes from an explicit sequence (identity columns on partitioned
 * tables need PostgreSQL 17 to be portable).
 */
import type { Migration } from './index.js';

const sqlite = `
ALTER TABLE nodes ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN address TEXT;
ALTER TABLE nodes ADD COLUMN manager TEXT NOT NULL DEFAULT 'agent';
ALTER TABLE nodes ADD COLUMN region TEXT;
ALTER TABLE nodes ADD COLUMN source_id TEXT;
ALTER TABLE nodes ADD COLUMN account_id TEXT;
ALTER TABLE nodes ADD COLUMN tags_json TEXT NOT NULL DEFAULT '{}';
ALTER TABLE nodes ADD COLUMN groups_json TEXT NOT NULL DEFAULT '[]';
ALTER TABLE nodes ADD COLUMN last_contact_at TEXT;
ALTER TABLE nodes ADD COLUMN state_changed_at TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN policy_config_id TEXT;
UPDATE nodes SET
  name = hostname,
  manager = CASE WHEN last_inventory_at IS NULL THEN 'manual' ELSE 'agent' END,
  state_changed_at = updated_at,
  last_contact_at = nullif(max(coalesce(last_inventory_at, ''),
    coalesce((SELECT max(received_at) FROM runs WHERE runs.node_id = nodes.id), '')), '');
CREATE INDEX nodes_name_idx ON nodes (name, id);
CREATE UNIQUE INDEX nodes_cloud_idx ON nodes (source_id, region, account_id) WHERE source_id IS NOT NULL;

CREATE TABLE node_certificates (
  node_id TEXT PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
  certificate TEXT NOT NULL
) STRICT;
INSERT INTO node_certificates (node_id, certificate) SELECT id, certificate FROM nodes WHERE certificate IS NOT NULL;
ALTER TABLE nodes DROP COLUMN certificate;

CREATE TABLE node_tags (
  node_id TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  key TEXT NOT NULL,
  value TEXT NOT NULL,
  PRIMARY KEY (node_id, key)
) STRICT, WITHOUT ROWID;
CREATE INDEX node_tags_kv_idx ON node_tags (key, value, node_id);

CREATE TABLE node_groups (
  node_id TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  group_id TEXT NOT NULL,
  PRIMARY KEY (node_id, group_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX node_groups_group_idx ON node_groups (group_id, node_id);

CREATE TABLE node_history (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  node_id TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  at TEXT NOT NULL,
  field TEXT NOT NULL,
  from_value TEXT,
  to_value TEXT NOT NULL,
  cause TEXT NOT NULL
) STRICT;
CREATE INDEX node_history_node_idx ON node_history (node_id, id);
CREATE INDEX node_history_at_idx ON node_history (at);

CREATE TABLE revoked_certificates (
  fingerprint TEXT PRIMARY KEY,
  node_id TEXT NOT NULL,
  revoked_at TEXT NOT NULL
) STRICT;

CREATE TABLE node_expectations (
  node_id TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  config_id TEXT NOT NULL,
  set_at TEXT NOT NULL,
  components TEXT NOT NULL,
  PRIMARY KEY (node_id, config_id)
) STRICT;

CREATE TABLE node_compliance (
  node_id TEXT PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
  run_id INTEGER,
  run_started_at TEXT,
  run_started_utc TEXT,
  config_id TEXT,
  expected INTEGER NOT NULL,
  computed_at TEXT NOT NULL,
  outcomes TEXT NOT NULL,
  compliant INTEGER NOT NULL,
  repaired INTEGER NOT NULL,
  error INTEGER NOT NULL,
  non_compliant INTEGER NOT NULL,
  missing INTEGER NOT NULL,
  unexpected INTEGER NOT NULL,
  not_applicable INTEGER NOT NULL
) STRICT;

CREATE TABLE node_compliance_directives (
  node_id TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  rule_id TEXT NOT NULL,
  directive_id TEXT NOT NULL,
  compliant INTEGER NOT NULL,
  repaired INTEGER NOT NULL,
  error INTEGER NOT NULL,
  non_compliant INTEGER NOT NULL,
  missing INTEGER NOT NULL,
  unexpected INTEGER NOT NULL,
  not_applicable INTEGER NOT NULL,
  PRIMARY KEY (node_id, rule_id, directive_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX node_compliance_directives_rule_idx ON node_compliance_directives (rule_id, directive_id);

CREATE TABLE registry_counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) STRICT;
INSERT INTO registry_counters (name, value) VALUES ('purged_nodes', 0), ('deleted_runs', 0);

CREATE INDEX runs_started_idx ON runs (started_at_utc);
`;

const postgres = `
ALTER TABLE nodes
  ADD COLUMN name text COLLATE "C" NOT NULL DEFAULT '',
  ADD COLUMN address text,
  ADD COLUMN manager text COLLATE "C" NOT NULL DEFAULT 'agent',
  ADD COLUMN region text COLLATE "C",
  ADD COLUMN source_id text COLLATE "C",
  ADD COLUMN account_id text COLLATE "C",
  ADD COLUMN tags_json jsonb NOT NULL DEFAULT '{}',
  ADD COLUMN groups_json jsonb NOT NULL DEFAULT '[]',
  ADD COLUMN last_contact_at timestamptz,
  ADD COLUMN state_changed_at timestamptz,
  ADD COLUMN policy_config_id text;
UPDATE nodes SET
  name = hostname,
  manager = CASE WHEN last_inventory_at IS NULL THEN 'manual' ELSE 'agent' END,
  state_changed_at = updated_at,
  last_contact_at = GREATEST(last_inventory_at, (SELECT max(received_at) FROM runs WHERE runs.node_id = nodes.id));
ALTER TABLE nodes ALTER COLUMN state_changed_at SET NOT NULL;
CREATE INDEX nodes_name_idx ON nodes (name, id);
-- Case-insensitive prefix filters compare lower(column) (ASCII only on these "C" columns).
CREATE INDEX nodes_name_lower_idx ON nodes (lower(name));
CREATE INDEX nodes_hostname_lower_idx ON nodes (lower(hostname));
-- Few distinct regions, but without it the planner has no statistics on lower(region) and
-- guesses 0.2 % of nodes for eu-* (measured: a nested loop over 37,500 rows, 230 ms).
CREATE INDEX nodes_region_lower_idx ON nodes (lower(region));
CREATE UNIQUE INDEX nodes_cloud_idx ON nodes (source_id, region, account_id) WHERE source_id IS NOT NULL;

CREATE TABLE node_certificates (
  node_id text COLLATE "C" PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
  certificate text NOT NULL
);
INSERT INTO node_certificates (node_id, certificate) SELECT id, certificate FROM nodes WHERE certificate IS NOT NULL;
ALTER TABLE nodes DROP COLUMN certificate;

CREATE TABLE node_tags (
  node_id text COLLATE "C" NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  key text COLLATE "C" NOT NULL,
  value text COLLATE "C" NOT NULL,
  PRIMARY KEY (node_id, key)
);
CREATE INDEX node_tags_kv_idx ON node_tags (key, value, node_id);

CREATE TABLE node_groups (
  node_id text COLLATE "C" NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  group_id text COLLATE "C" NOT NULL,
  PRIMARY KEY (node_id, group_id)
);
CREATE INDEX node_groups_group_idx ON node_groups (group_id, node_id);

CREATE TABLE node_history (
  id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  node_id text COLLATE "C" NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  at timestamptz NOT NULL,
  field text NOT NULL,
  from_value text,
  to_value text NOT NULL,
  cause text NOT NULL
);
CREATE INDEX node_history_node_idx ON node_history (node_id, id);
CREATE INDEX node_history_at_idx ON node_history (at);

CREATE TABLE revoked_certificates (
  fingerprint text PRIMARY KEY,
  node_id text NOT NULL,
  revoked_at timestamptz NOT NULL
);

CREATE TABLE node_expectations (
  node_id text COLLATE "C" NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  config_id text COLLATE "C" NOT NULL,
  set_at timestamptz NOT NULL,
  components jsonb NOT NULL,
  PRIMARY KEY (node_id, config_id)
);

CREATE TABLE node_compliance (
  node_id text COLLATE "C" PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
  run_id bigint,
  run_started_at text,
  run_started_utc timestamptz,
  config_id text,
  expected boolean NOT NULL,
  computed_at timestamptz NOT NULL,
  outcomes jsonb NOT NULL,
  compliant integer NOT NULL,
  repaired integer NOT NULL,
  error integer NOT NULL,
  non_compliant integer NOT NULL,
  missing integer NOT NULL,
  unexpected integer NOT NULL,
  not_applicable integer NOT NULL
);

CREATE TABLE node_compliance_directives (
  node_id text COLLATE "C" NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  rule_id text COLLATE "C" NOT NULL,
  directive_id text COLLATE "C" NOT NULL,
  compliant integer NOT NULL,
  repaired integer NOT NULL,
  error integer NOT NULL,
  non_compliant integer NOT NULL,
  missing integer NOT NULL,
  unexpected integer NOT NULL,
  not_applicable integer NOT NULL,
  PRIMARY KEY (node_id, rule_id, directive_id)
);
CREATE INDEX node_compliance_directives_rule_idx ON node_compliance_directives (rule_id, directive_id);

CREATE TABLE registry_counters (name text PRIMARY KEY, value bigint NOT NULL);
INSERT INTO registry_counters (name, value) VALUES ('purged_nodes', 0), ('deleted_runs', 0);

-- runs, partitioned by day on the run's start. The unique key includes the partition key, so
-- duplicate detection stays global; the primary key must include it too.
CREATE SEQUENCE run_ids;
CREATE TABLE runs_v2 (
  id bigint NOT NULL DEFAULT nextval('run_ids'),
  node_id text COLLATE "C" NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  started_at text NOT NULL,
  started_at_utc timestamptz NOT NULL,
  config_id text,
  complete boolean NOT NULL,
  report_count integer NOT NULL,
  counts jsonb NOT NULL,
  outcomes jsonb NOT NULL,
  file_name text NOT NULL,
  sha256 text NOT NULL,
  received_at timestamptz NOT NULL,
  log_compressed bytea NOT NULL,
  PRIMARY KEY (id, started_at_utc),
  UNIQUE (node_id, started_at_utc)
) PARTITION BY RANGE (started_at_utc);
CREATE TABLE runs_default PARTITION OF runs_v2 DEFAULT;
-- Only the catch-all needs a time index: retention deletes from it row by row.
CREATE INDEX runs_default_started_idx ON runs_default (started_at_utc);
INSERT INTO runs_v2 SELECT id, node_id, started_at, started_at_utc, config_id, complete, report_count, counts,
  outcomes, file_name, sha256, received_at, log_compressed FROM runs;
SELECT setval('run_ids', coalesce((SELECT max(id) FROM runs_v2), 0) + 1, false);
DROP TABLE runs;
ALTER TABLE runs_v2 RENAME TO runs;
ALTER SEQUENCE run_ids OWNED BY runs.id;
`;

export const registry: Migration = { version: 2, name: 'registry', sqlite, postgres };
