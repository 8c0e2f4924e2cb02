/**
 * Version 3: the policy model (directives, groups, rules).
 * - policy_objects: directives, groups and rules, one row each, kept as the JSON the admin API
 *   validated (the model is small: thousands of objects, read whole by the generator).
 * - policy_bundles: each node's generated bundle (unsigned JSON; the server signs when serving,
 *   so a rotated key needs no regeneration) and its config id, which is also the HTTP ETag.
 */
import type { Migration } from './index.js';

const sqlite = `
CREATE TABLE policy_objects (
  kind TEXT NOT NULL,
  id TEXT NOT NULL,
  body TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (kind, id)
) STRICT;

CREATE TABLE policy_bundles (
  node_id TEXT PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
  config_id TEXT NOT NULL,
  generated_at TEXT NOT NULL,
  bundle TEXT NOT NULL
) STRICT;
`;

const postgres = `
CREATE TABLE policy_objects (
  kind text COLLATE "C" NOT NULL,
  id text COLLATE "C" NOT NULL,
  body jsonb NOT NULL,
  updated_at timestamptz NOT NULL,
  PRIMARY KEY (kind, id)
);

CREATE TABLE policy_bundles (
  node_id text COLLATE "C" PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
  config_id text COLLATE "C" NOT NULL,
  generated_at timestamptz NOT NULL,
  bundle text NOT NULL
);
`;

export const policy: Migration = { version: 3, name: 'policy', sqlite, postgres };
