/**
 * Version 18: findings, the event stream and its subscriptions.
 *
 * - findings: an audit non-compliance or an error is a state of a node's component, not a change:
 *   one row from the run that first reported it until the run that no longer does. While open, its
 *   last sighting and run count are the node's (node_compliance's base run, and `runs_seen`, a
 *   counter of the runs that decided its compliance): a run that changes nothing writes nothing
 *   here. At most one open finding per component (the partial unique index).
 * - events: everything the server tells about, in commit order (ids only grow: AUTOINCREMENT on
 *   SQLite, and on PostgreSQL the writers take one advisory lock before inserting, held to commit).
 * - subscriptions and deliveries: who is told what (webhooks, e-mail), and the durable outbox of
 *   messages with their attempts.
 *
 * Existing data: the repeated `audit_noncompliant` rows of `changes` become findings, one per run
 * of consecutive runs reporting the same component (a complete run of the node between two of
 * them without it starts another; where the runs are no longer kept, the rows run together). The
 * last one is open when the node's current compliance comes from the run that reported it last;
 * the others closed by the node's next complete run (repaired when that run repaired the same
 * component), or, that run being gone, at their last sighting. Then those rows leave `changes`.
 * `runs_seen` starts at 0 everywhere, which sends each node's next run through the full
 * compliance write once (it requires runs_seen > 0 to take the steady path): that run opens and
 * closes what the history could not tell.
 */
import type { Migration } from './index.js';

const sqlite = `
ALTER TABLE node_compliance ADD COLUMN runs_seen INTEGER NOT NULL DEFAULT 0;

CREATE TABLE findings (
  id INTEGER PRIMARY KEY,
  node_id TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  rule_id TEXT NOT NULL,
  directive_id TEXT NOT NULL,
  component TEXT NOT NULL,
  key_value TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('non_compliant', 'error')),
  event_type TEXT NOT NULL,
  message TEXT NOT NULL,
  diff TEXT,
  diff_truncated INTEGER NOT NULL DEFAULT 0 CHECK (diff_truncated IN (0, 1)),
  first_seen_at TEXT NOT NULL,
  first_run_id INTEGER,
  first_count INTEGER NOT NULL,
  last_seen_at TEXT,
  last_run_id INTEGER,
  runs INTEGER,
  closed_at TEXT,
  closed_run_id INTEGER,
  close_reason TEXT CHECK (close_reason IN ('repaired', 'fixed', 'removed', 'unreported'))
) STRICT;
CREATE UNIQUE INDEX findings_open ON findings (node_id, rule_id, directive_id, component) WHERE closed_at IS NULL;
CREATE INDEX findings_closed ON findings (closed_at) WHERE closed_at IS NOT NULL;

CREATE TABLE events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  at TEXT NOT NULL,
  type TEXT NOT NULL,
  severity TEXT NOT NULL CHECK (severity IN ('info', 'warning', 'error')),
  node_id TEXT,
  data TEXT NOT NULL
) STRICT;
CREATE INDEX events_node ON events (node_id, id) WHERE node_id IS NOT NULL;

CREATE TABLE subscriptions (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('webhook', 'email')),
  target TEXT NOT NULL,
  secret_sealed TEXT,
  types TEXT NOT NULL,
  min_severity TEXT NOT NULL CHECK (min_severity IN ('info', 'warning', 'error')),
  filter TEXT,
  group_window_ms INTEGER NOT NULL,
  enabled INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
  cursor INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
) STRICT;

CREATE TABLE deliveries (
  id INTEGER PRIMARY KEY,
  subscription_id TEXT NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
  state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'dead')),
  event_ids TEXT NOT NULL,
  held TEXT,
  created_at TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  next_at TEXT NOT NULL,
  claimed_by TEXT,
  claimed_until TEXT,
  last_status INTEGER,
  last_error TEXT,
  finished_at TEXT
) STRICT;
CREATE INDEX deliveries_due ON deliveries (state, next_at);
CREATE INDEX deliveries_subscription ON deliveries (subscription_id, id);

INSERT INTO findings (node_id, rule_id, directive_id, component, key_value, kind, event_type, message, diff, diff_truncated,
  first_seen_at, first_run_id, first_count, last_seen_at, last_run_id, runs, closed_at, closed_run_id, close_reason)
WITH a AS (
  SELECT c.id, c.node_id, c.rule_id, c.directive_id, c.component, c.run_id, coalesce(r.started_at_utc, c.at) AS t
  FROM changes c LEFT JOIN runs r ON r.id = c.run_id
  WHERE c.event_type = 'audit_noncompliant'
), b AS (
  SELECT a.*, lag(t) OVER w AS prev_t, lag(run_id) OVER w AS prev_run
  FROM a WINDOW w AS (PARTITION BY node_id, rule_id, directive_id, component ORDER BY t, id)
), c AS (
  SELECT b.*, CASE WHEN b.prev_t IS NULL THEN 1 WHEN b.prev_run IS b.run_id THEN 0
      WHEN EXISTS (SELECT 1 FROM runs r WHERE r.node_id = b.node_id AND r.complete = 1 AND r.started_at_utc > b.prev_t AND r.started_at_utc < b.t) THEN 1
      ELSE 0 END AS fresh
  FROM b
), d AS (
  SELECT c.*, sum(fresh) OVER (PARTITION BY node_id, rule_id, directive_id, component ORDER BY t, id ROWS UNBOUNDED PRECEDING) AS island
  FROM c
), g AS (
  SELECT node_id, rule_id, directive_id, component, island, min(t) AS first_t, max(t) AS last_t,
    count(DISTINCT coalesce(run_id, -id)) AS runs,
    (SELECT x.id FROM d x WHERE x.node_id = d.node_id AND x.rule_id = d.rule_id AND x.directive_id = d.directive_id
      AND x.component = d.component AND x.island = d.island ORDER BY x.t, x.id LIMIT 1) AS first_id,
    (SELECT x.run_id FROM d x WHERE x.node_id = d.node_id AND x.rule_id = d.rule_id AND x.directive_id = d.directive_id
      AND x.component = d.component AND x.island = d.island ORDER BY x.t DESC, x.id DESC LIMIT 1) AS last_run,
    max(island) OVER (PARTITION BY node_id, rule_id, directive_id, component) AS last_island
  FROM d GROUP BY node_id, rule_id, directive_id, component, island
), h AS (
  SELECT g.*, (nc.run_id IS NOT NULL AND g.island = g.last_island AND nc.run_id = g.last_run) AS open,
    (SELECT r.id FROM runs r WHERE r.node_id = g.node_id AND r.complete = 1 AND r.started_at_utc > g.last_t ORDER BY r.started_at_utc LIMIT 1) AS close_run
  FROM g LEFT JOIN node_compliance nc ON nc.node_id = g.node_id
)
SELECT h.node_id, h.rule_id, h.directive_id, h.component, f.key_value, 'non_compliant', 'audit_noncompliant', f.message, f.diff, f.diff_truncated,
  h.first_t, f.run_id, 1 - h.runs,
  CASE WHEN h.open THEN NULL ELSE h.last_t END, CASE WHEN h.open THEN NULL ELSE h.last_run END, CASE WHEN h.open THEN NULL ELSE h.runs END,
  CASE WHEN h.open THEN NULL ELSE coalesce((SELECT r.started_at_utc FROM runs r WHERE r.id = h.close_run), h.last_t) END,
  CASE WHEN h.open THEN NULL ELSE h.close_run END,
  CASE WHEN h.open THEN NULL WHEN EXISTS (SELECT 1 FROM changes x WHERE x.run_id = h.close_run AND x.node_id = h.node_id
      AND x.event_type = 'result_repaired' AND x.rule_id = h.rule_id AND x.directive_id = h.directive_id AND x.component = h.component)
    THEN 'repaired' ELSE 'fixed' END
FROM h JOIN changes f ON f.id = h.first_id;

DELETE FROM changes WHERE event_type = 'audit_noncompliant';
`;

const postgres = `
ALTER TABLE node_compliance ADD COLUMN runs_seen bigint NOT NULL DEFAULT 0;

CREATE TABLE findings (
  id bigserial PRIMARY KEY,
  node_id text COLLATE "C" NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  rule_id text COLLATE "C" NOT NULL,
  directive_id text COLLATE "C" NOT NULL,
  component text NOT NULL,
  key_value text NOT NULL,
  kind text NOT NULL CHECK (kind IN ('non_compliant', 'error')),
  event_type text NOT NULL,
  message text NOT NULL,
  diff text,
  diff_truncated boolean NOT NULL DEFAULT false,
  first_seen_at timestamptz NOT NULL,
  first_run_id bigint,
  first_count bigint NOT NULL,
  last_seen_at timestamptz,
  last_run_id bigint,
  runs bigint,
  closed_at timestamptz,
  closed_run_id bigint,
  close_reason text CHECK (close_reason IN ('repaired', 'fixed', 'removed', 'unreported'))
);
CREATE UNIQUE INDEX findings_open ON findings (node_id, rule_id, directive_id, component) WHERE closed_at IS NULL;
CREATE INDEX findings_closed ON findings (closed_at) WHERE closed_at IS NOT NULL;

CREATE TABLE events (
  id bigserial PRIMARY KEY,
  at timestamptz NOT NULL,
  type text NOT NULL,
  severity text NOT NULL CHECK (severity IN ('info', 'warning', 'error')),
  node_id text COLLATE "C",
  data text NOT NULL
);
CREATE INDEX events_node ON events (node_id, id) WHERE node_id IS NOT NULL;

CREATE TABLE subscriptions (
  id text COLLATE "C" PRIMARY KEY,
  name text NOT NULL,
  kind text NOT NULL CHECK (kind IN ('webhook', 'email')),
  target text NOT NULL,
  secret_sealed text,
  types text NOT NULL,
  min_severity text NOT NULL CHECK (min_severity IN ('info', 'warning', 'error')),
  filter text,
  group_window_ms bigint NOT NULL,
  enabled boolean NOT NULL DEFAULT true,
  cursor bigint NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL
);

CREATE TABLE deliveries (
  id bigserial PRIMARY KEY,
  subscription_id text COLLATE "C" NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
  state text NOT NULL CHECK (state IN ('pending', 'delivered', 'dead')),
  event_ids text NOT NULL,
  held text,
  created_at timestamptz NOT NULL,
  attempts integer NOT NULL DEFAULT 0,
  next_at timestamptz NOT NULL,
  claimed_by text,
  claimed_until timestamptz,
  last_status integer,
  last_error text,
  finished_at timestamptz
);
CREATE INDEX deliveries_due ON deliveries (state, next_at);
CREATE INDEX deliveries_subscription ON deliveries (subscription_id, id);

INSERT INTO findings (node_id, rule_id, directive_id, component, key_value, kind, event_type, message, diff, diff_truncated,
  first_seen_at, first_run_id, first_count, last_seen_at, last_run_id, runs, closed_at, closed_run_id, close_reason)
WITH a AS (
  SELECT c.id, c.node_id, c.rule_id, c.directive_id, c.component, c.run_id, coalesce(r.started_at_utc, c.at) AS t
  FROM changes c LEFT JOIN runs r ON r.id = c.run_id AND r.node_id = c.node_id
  WHERE c.event_type = 'audit_noncompliant'
), b AS (
  SELECT a.*, lag(t) OVER w AS prev_t, lag(run_id) OVER w AS prev_run
  FROM a WINDOW w AS (PARTITION BY node_id, rule_id, directive_id, component ORDER BY t, id)
), c AS (
  SELECT b.*, CASE WHEN b.prev_t IS NULL THEN 1 WHEN b.prev_run IS NOT DISTINCT FROM b.run_id THEN 0
      WHEN EXISTS (SELECT 1 FROM runs r WHERE r.node_id = b.node_id AND r.complete AND r.started_at_utc > b.prev_t AND r.started_at_utc < b.t) THEN 1
      ELSE 0 END AS fresh
  FROM b
), d AS (
  SELECT c.*, sum(fresh) OVER (PARTITION BY node_id, rule_id, directive_id, component ORDER BY t, id ROWS UNBOUNDED PRECEDING) AS island
  FROM c
), g AS (
  SELECT node_id, rule_id, directive_id, component, island, min(t) AS first_t, max(t) AS last_t,
    count(DISTINCT coalesce(run_id, -id)) AS runs,
    (array_agg(id ORDER BY t, id))[1] AS first_id,
    (array_agg(run_id ORDER BY t DESC, id DESC))[1] AS last_run
  FROM d GROUP BY node_id, rule_id, directive_id, component, island
), h AS (
  SELECT g.*, (nc.run_id IS NOT NULL AND g.island = max(g.island) OVER (PARTITION BY g.node_id, g.rule_id, g.directive_id, g.component)
      AND nc.run_id = g.last_run) AS open,
    (SELECT r.id FROM runs r WHERE r.node_id = g.node_id AND r.complete AND r.started_at_utc > g.last_t ORDER BY r.started_at_utc LIMIT 1) AS close_run
  FROM g LEFT JOIN node_compliance nc ON nc.node_id = g.node_id
)
SELECT h.node_id, h.rule_id, h.directive_id, h.component, f.key_value, 'non_compliant', 'audit_noncompliant', f.message, f.diff, f.diff_truncated,
  h.first_t, f.run_id, 1 - h.runs,
  CASE WHEN h.open THEN NULL ELSE h.last_t END, CASE WHEN h.open THEN NULL ELSE h.last_run END, CASE WHEN h.open THEN NULL ELSE h.runs END,
  CASE WHEN h.open THEN NULL ELSE coalesce((SELECT r.started_at_utc FROM runs r WHERE r.id = h.close_run AND r.node_id = h.node_id), h.last_t) END,
  CASE WHEN h.open THEN NULL ELSE h.close_run END,
  CASE WHEN h.open THEN NULL WHEN EXISTS (SELECT 1 FROM changes x WHERE x.run_id = h.close_run AND x.node_id = h.node_id
      AND x.event_type = 'result_repaired' AND x.rule_id = h.rule_id AND x.directive_id = h.directive_id AND x.component = h.component)
    THEN 'repaired' ELSE 'fixed' END
FROM h JOIN changes f ON f.id = h.first_id;

DELETE FROM changes WHERE event_type = 'audit_noncompliant';
`;

export const findingsEvents: Migration = { version: 18, name: 'findings_events', sqlite, postgres };
