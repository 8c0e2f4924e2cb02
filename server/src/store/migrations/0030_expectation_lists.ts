/**
 * Version 30: each distinct expectation list stored once.
 *
 * Until 29, every node kept the components it is expected to report as JSON in each of its
 * node_expectations rows (its current config's and the previous one's): about a kilobyte per
 * row, the largest table of a fleet, though a fleet's nodes expect a handful of distinct lists.
 *
 * - expectation_lists: a list's components once, named by `digest` (the SHA-256 of its JSON,
 *   base64url, made by the writer: input.ts, expectationsDigest), with when a writer last took it
 *   into use (`used_at`).
 * - node_expectations.list: the digest of the row's list, in place of its components.
 * - The lists already stored are named `stored:` and their place, the same components made one
 *   (`stored:<first node>/<config>` on SQLite, which has no SHA-256; `stored:` and the hex
 *   SHA-256 of the JSON on PostgreSQL): a later write of the same components under their digest
 *   makes a new list, and the old one goes once nothing names it.
 *
 * A list no row names is deleted by the sweep (SweepStore.deleteUnusedExpectationLists) once it
 * has not been taken into use for an hour: a writer names a list only after bringing its
 * `used_at` within the hour (or inserting it), so a list being collected is never one a running
 * transaction is about to name (on PostgreSQL, where writers run side by side).
 */
import type { Migration } from './index.js';

const sqlite = `
CREATE TABLE expectation_lists (
  digest TEXT PRIMARY KEY,
  components TEXT NOT NULL,
  used_at TEXT NOT NULL
) STRICT;
ALTER TABLE node_expectations ADD COLUMN list TEXT NOT NULL DEFAULT '';
INSERT INTO expectation_lists (digest, components, used_at)
  SELECT 'stored:' || min(node_id || '/' || config_id), components, max(set_at) FROM node_expectations GROUP BY components;
CREATE INDEX expectation_lists_migrating_idx ON expectation_lists (components);
UPDATE node_expectations SET list = (SELECT l.digest FROM expectation_lists l WHERE l.components = node_expectations.components);
DROP INDEX expectation_lists_migrating_idx;
ALTER TABLE node_expectations DROP COLUMN components;
CREATE INDEX node_expectations_list_idx ON node_expectations (list);
`;

const postgres = `
CREATE TABLE expectation_lists (
  digest text COLLATE "C" PRIMARY KEY,
  components jsonb NOT NULL,
  used_at timestamptz NOT NULL
);
ALTER TABLE node_expectations ADD COLUMN list text COLLATE "C";
UPDATE node_expectations SET list = 'stored:' || encode(sha256(convert_to(components::text, 'UTF8')), 'hex');
INSERT INTO expectation_lists (digest, components, used_at)
  SELECT DISTINCT ON (list) list, components, set_at FROM node_expectations ORDER BY list, set_at DESC;
ALTER TABLE node_expectations ALTER COLUMN list SET NOT NULL, DROP COLUMN components;
CREATE INDEX node_expectations_list_idx ON node_expectations (list);
`;

export const expectationLists: Migration = { version: 30, name: 'expectation_lists', sqlite, postgres };
