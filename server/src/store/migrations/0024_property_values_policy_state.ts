/**
 * Version 24: node properties as JSON values, and what policy generation keeps between runs.
 *
 * - node_properties.value: the property's value as JSON text (until 23, the text itself: each
 *   existing value becomes a JSON string, so it reads back as it was written).
 * - node_property_leaves: each node property flattened to dotted paths to its leaves, as
 *   node_facts holds facts (the key, then object keys and list indexes; an empty object or list
 *   is a leaf, `{}` or `[]`): `property:<path>` in filters compares against these, with the
 *   number when a leaf reads as one. The old (key, value) index goes: values may now be large.
 * - policy_seals: per node and secret, the sealed value given out and a digest of what it seals
 *   (the node's key and the plaintext): sealing is randomised, so the same value sealed again
 *   would change the node's config id; a restarted server gives out the same sealed value.
 * - policy_problems: per node, why its policy was last not generated (a property conflict, a
 *   template error) and since when; kept until a generation succeeds for it.
 */
import type { Migration } from './index.js';

/** SQLite has no regular expressions: `t` (the text without a leading -) as 15.15 digits at most. */
const sqliteNumeric = `t <> '' AND t NOT GLOB '*[^0-9.]*' AND t GLOB '[0-9]*' AND t NOT GLOB '*.*.*' AND t NOT GLOB '*.'
    AND ((instr(t, '.') = 0 AND length(t) <= 15) OR (instr(t, '.') BETWEEN 2 AND 16 AND length(t) - instr(t, '.') <= 15))`;

const sqlite = `
CREATE TABLE node_property_leaves (
  node_id TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  path TEXT NOT NULL,
  value TEXT NOT NULL,
  num REAL,
  PRIMARY KEY (node_id, path, value)
) STRICT, WITHOUT ROWID;
CREATE INDEX node_property_leaves_path_idx ON node_property_leaves (path, value);

INSERT INTO node_property_leaves (node_id, path, value, num)
  SELECT node_id, key, value, CASE WHEN ${sqliteNumeric} THEN CAST(value AS REAL) END
  FROM (SELECT node_id, key, value, CASE WHEN substr(value, 1, 1) = '-' THEN substr(value, 2) ELSE value END AS t FROM node_properties);
UPDATE node_properties SET value = json_quote(value);
DROP INDEX node_properties_kv_idx;

CREATE TABLE policy_seals (
  node_id TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  digest TEXT NOT NULL,
  sealed TEXT NOT NULL,
  PRIMARY KEY (node_id, name)
) STRICT, WITHOUT ROWID;

CREATE TABLE policy_problems (
  node_id TEXT PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
  at TEXT NOT NULL,
  problem TEXT NOT NULL
) STRICT;
`;

const postgres = `
CREATE TABLE node_property_leaves (
  node_id text COLLATE "C" NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  path text COLLATE "C" NOT NULL,
  value text COLLATE "C" NOT NULL,
  num double precision,
  PRIMARY KEY (node_id, path, value)
);
CREATE INDEX node_property_leaves_path_idx ON node_property_leaves (path, value, node_id);

INSERT INTO node_property_leaves (node_id, path, value, num)
  SELECT node_id, key, value, CASE WHEN value ~ '^-?[0-9]{1,15}(\\.[0-9]{1,15})?$' THEN value::double precision END FROM node_properties;
UPDATE node_properties SET value = to_json(value)::text;
DROP INDEX node_properties_kv_idx;

CREATE TABLE policy_seals (
  node_id text COLLATE "C" NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
  name text COLLATE "C" NOT NULL,
  digest text NOT NULL,
  sealed text NOT NULL,
  PRIMARY KEY (node_id, name)
);

CREATE TABLE policy_problems (
  node_id text COLLATE "C" PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
  at timestamptz NOT NULL,
  problem jsonb NOT NULL
);
`;

export const propertyValuesPolicyState: Migration = { version: 24, name: 'property_values_policy_state', sqlite, postgres };
