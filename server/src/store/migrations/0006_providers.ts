/**
 * Version 6: providers and managers.
 * - managers: one row per discovery manager (a cloud account or a static host list), with the
 *   relay that hosts its provider (`provider`, or `server`) and its spec as JSON (filters, poll
 *   interval, credential *references* — never credentials in clear). The outcome of its last poll
 *   is kept for display.
 * - node_managers: which managers hold which node. A node discovered by two managers is one row
 *   in `nodes` with two links here; deleting a node or a manager removes its links.
 */
import type { Migration } from './index.js';

const sqlite = `
CREATE TABLE managers (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  type TEXT NOT NULL,
  provider TEXT NOT NULL,
  spec TEXT NOT NULL,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  last_poll_at TEXT,
  last_poll_error TEXT
) STRICT;
CREATE INDEX managers_provider_idx ON managers (provider, id);

CREATE TABLE node_managers (
  node_id TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  manager_id TEXT NOT NULL REFERENCES managers (id) ON DELETE CASCADE,
  first_seen_at TEXT NOT NULL,
  last_seen_at TEXT NOT NULL,
  PRIMARY KEY (node_id, manager_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX node_managers_manager_idx ON node_managers (manager_id, node_id);
`;

const postgres = `
CREATE TABLE managers (
  id text COLLATE "C" PRIMARY KEY,
  name text NOT NULL,
  type text NOT NULL,
  provider text COLLATE "C" NOT NULL,
  spec jsonb NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  last_poll_at timestamptz,
  last_poll_error text
);
CREATE INDEX managers_provider_idx ON managers (provider, id);

CREATE TABLE node_managers (
  node_id text COLLATE "C" NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  manager_id text COLLATE "C" NOT NULL REFERENCES managers (id) ON DELETE CASCADE,
  first_seen_at timestamptz NOT NULL,
  last_seen_at timestamptz NOT NULL,
  PRIMARY KEY (node_id, manager_id)
);
CREATE INDEX node_managers_manager_idx ON node_managers (manager_id, node_id);
`;

export const providers: Migration = { version: 6, name: 'providers', sqlite, postgres };
