/**
 * Version 42: on PostgreSQL, each node's policy config id in a narrow table of its own.
 *
 * A generation points every node whose policy moved at its new config id. In `nodes` that was an
 * UPDATE of the node's whole row, the widest table of the registry, and none of these updates
 * could be a HOT one: a table loaded or grown in id order has full pages, so each new row version
 * went to another page and wrote an entry into all eight of the table's indexes. Measured with
 * `pg_stat_statements` on the policy bench's templated first generation at 100,000 nodes, it was
 * about 4.6 s of the 17.9 s of statement time, a quarter of the step (docs/capacity.md,
 * *PostgreSQL's templated first generation, by statement*).
 *
 * `node_policy_configs (node_id, config_id)` holds it instead: a row of about 130 bytes with one
 * index, on its primary key, which an update does not change. A batch moves every row of a page
 * in one statement, so the pages are filled to half (`fillfactor = 50`): each row's new version
 * fits beside it, a HOT update that writes no index entry, and the next generation's pass over
 * the page prunes the versions the last one left. A node without a config id has no row; its
 * deletion takes its row with it. The column `nodes.policy_config_id` goes, and a function of a
 * node row by that name takes its place: PostgreSQL reads `n.policy_config_id` as
 * `policy_config_id(n)`, so every reader of a node's row reads it as before. The writers of node
 * rows (`PG_NODE_COLUMNS`) leave it out; the expectations write this table.
 *
 * SQLite: nothing. It rewrites a row in place, and its node reads stay without a join.
 */
import type { Migration } from './index.js';

const postgres = `CREATE TABLE node_policy_configs (
  node_id text COLLATE "C" PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
  config_id text COLLATE "C" NOT NULL
) WITH (fillfactor = 50);
INSERT INTO node_policy_configs (node_id, config_id) SELECT id, policy_config_id FROM nodes WHERE policy_config_id IS NOT NULL ORDER BY id;
ALTER TABLE nodes DROP COLUMN policy_config_id;
CREATE FUNCTION policy_config_id(n nodes) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
  AS $f$ SELECT c.config_id FROM node_policy_configs c WHERE c.node_id = n.id $f$;`;

export const nodePolicyConfigs: Migration = { version: 42, name: 'node_policy_configs', sqlite: 'SELECT 1;', postgres };
