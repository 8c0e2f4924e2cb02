/**
 * Inventory you can query: what the filter language (docs/filters.md) reads, kept beside the
 * inventory document (which stays as sent) and rewritten with each inventory.
 * - package_versions: one row per (name, version) seen in the fleet, with `version_key`, whose
 *   byte order is Debian version order (shared/src/filter/version.ts), so that version
 *   comparisons are plain indexed `<` on both stores. Fleets share most of their packages: a few
 *   thousand pairs stand for hundreds of thousands of installed packages.
 * - node_inventory: the OS, hardware and the node's package ids. SQLite keeps the node's
 *   packages as a WITHOUT ROWID posting table (package id, small integer node key, also on the
 *   node's row as nodes.inventory_key); Postgres as an integer array under a GIN index, which
 *   stores the same postings compressed.
 * - node_addresses: interface addresses as 32 hex digits (IPv4 as ::ffff:a.b.c.d), so that a
 *   CIDR range is a key range; also what refuses a second manual node with a known address.
 * - node_facts: the node's facts flattened to dotted paths, with the number when a leaf is one.
 * - node_properties: what admins set on a node (PUT /api/1/nodes/<id>/properties).
 * - inventory_changes: what changed between a node's inventories (packages added, removed,
 *   upgraded or downgraded; addresses; kernel), kept as long as changes (retention.changes).
 */
import type { Migration } from './index.js';

const sqlite = `
CREATE TABLE package_versions (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  version TEXT NOT NULL,
  version_key TEXT NOT NULL,
  UNIQUE (name, version)
) STRICT;
CREATE INDEX package_versions_key_idx ON package_versions (name, version_key);

CREATE TABLE node_inventory (
  key INTEGER PRIMARY KEY,
  node_id TEXT NOT NULL UNIQUE REFERENCES nodes (id) ON DELETE CASCADE,
  fqdn TEXT,
  os_kernel TEXT,
  arch TEXT,
  os_version_key TEXT,
  cpus INTEGER,
  memory INTEGER,
  package_ids TEXT NOT NULL DEFAULT '[]'
) STRICT;

CREATE TABLE node_packages (
  package_id INTEGER NOT NULL,
  node_key INTEGER NOT NULL,
  PRIMARY KEY (package_id, node_key)
) STRICT, WITHOUT ROWID;
-- No index by node: a node's package ids are on its node_inventory row. The node's row carries
-- its key, so that a package match is a set of integers tested against nodes directly.
ALTER TABLE nodes ADD COLUMN inventory_key INTEGER;
-- With the status, so that the list's totals by status read the index alone.
CREATE INDEX nodes_inventory_key_idx ON nodes (inventory_key, status);
CREATE TRIGGER node_inventory_packages_delete AFTER DELETE ON node_inventory BEGIN
  DELETE FROM node_packages WHERE node_key = old.key AND package_id IN (SELECT value FROM json_each(old.package_ids));
END;

CREATE TABLE node_addresses (
  address TEXT NOT NULL,
  node_id TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  PRIMARY KEY (address, node_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX node_addresses_node_idx ON node_addresses (node_id);

CREATE TABLE node_facts (
  node_id TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  path TEXT NOT NULL,
  value TEXT NOT NULL,
  num REAL,
  PRIMARY KEY (node_id, path)
) STRICT, WITHOUT ROWID;
CREATE INDEX node_facts_path_idx ON node_facts (path, value);

CREATE TABLE node_properties (
  node_id TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  key TEXT NOT NULL,
  value TEXT NOT NULL,
  PRIMARY KEY (node_id, key)
) STRICT, WITHOUT ROWID;
CREATE INDEX node_properties_kv_idx ON node_properties (key, value);

CREATE TABLE inventory_changes (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  node_id TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  at TEXT NOT NULL,
  kind TEXT NOT NULL,
  name TEXT NOT NULL,
  from_value TEXT,
  to_value TEXT
) STRICT;
CREATE INDEX inventory_changes_node_idx ON inventory_changes (node_id, id);
CREATE INDEX inventory_changes_at_idx ON inventory_changes (at);
`;

const postgres = `
CREATE TABLE package_versions (
  id serial PRIMARY KEY,
  name text COLLATE "C" NOT NULL,
  version text COLLATE "C" NOT NULL,
  version_key text COLLATE "C" NOT NULL,
  UNIQUE (name, version)
);
CREATE INDEX package_versions_key_idx ON package_versions (name, version_key);

CREATE TABLE node_inventory (
  node_id text COLLATE "C" PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
  fqdn text COLLATE "C",
  os_kernel text COLLATE "C",
  arch text COLLATE "C",
  os_version_key text COLLATE "C",
  cpus integer,
  memory bigint,
  packages integer[] NOT NULL DEFAULT '{}'
);
CREATE INDEX node_inventory_packages_idx ON node_inventory USING gin (packages);

CREATE TABLE node_addresses (
  address text COLLATE "C" NOT NULL,
  node_id text COLLATE "C" NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  PRIMARY KEY (address, node_id)
);
CREATE INDEX node_addresses_node_idx ON node_addresses (node_id);

CREATE TABLE node_facts (
  node_id text COLLATE "C" NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  path text COLLATE "C" NOT NULL,
  value text COLLATE "C" NOT NULL,
  num double precision,
  PRIMARY KEY (node_id, path)
);
-- With the node id: a fact comparison is an index-only scan (SQLite's WITHOUT ROWID index has it).
CREATE INDEX node_facts_path_idx ON node_facts (path, value, node_id);

CREATE TABLE node_properties (
  node_id text COLLATE "C" NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  key text COLLATE "C" NOT NULL,
  value text COLLATE "C" NOT NULL,
  PRIMARY KEY (node_id, key)
);
CREATE INDEX node_properties_kv_idx ON node_properties (key, value, node_id);

CREATE TABLE inventory_changes (
  id bigserial PRIMARY KEY,
  node_id text COLLATE "C" NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  at timestamptz NOT NULL,
  kind text NOT NULL,
  name text COLLATE "C" NOT NULL,
  from_value text,
  to_value text
);
CREATE INDEX inventory_changes_node_idx ON inventory_changes (node_id, id);
CREATE INDEX inventory_changes_at_idx ON inventory_changes (at);
`;

export const inventory: Migration = { version: 15, name: 'inventory', sqlite, postgres };
