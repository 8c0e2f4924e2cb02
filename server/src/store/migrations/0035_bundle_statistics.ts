/**
 * Version 35: on PostgreSQL, policy_bundles is analysed from a sample of 3,000 rows instead of
 * 30,000.
 *
 * ANALYZE reads 300 rows per unit of the largest statistics target of a table's columns (100 by
 * default): 30,000 rows, and a bundle row is one to two kilobytes, so at 100,000 nodes each
 * ANALYZE of this table read most of its pages, about 235 ms. The store analyses what its
 * writes grow (postgres/statistics.ts), and a first generation grows this table from nothing to
 * one row per node: at 100,000 nodes it was analysed 15 times, 3.5 s of the 67.6 s of
 * statements that generation ran (pg_stat_statements). Every statement on this table finds rows by
 * node id (the primary key), where the row count is what the planner needs, and the count is
 * estimated from the pages, not the sample. With a target of 10 the same ANALYZE takes about
 * 15 ms (a 100,000-row table of 200 MB, measured with psql), and the row count it records is
 * within a tenth of a percent.
 *
 * SQLite: nothing (the store does not analyse it).
 */
import type { Migration } from './index.js';

const postgres = `ALTER TABLE policy_bundles ALTER COLUMN node_id SET STATISTICS 10, ALTER COLUMN config_id SET STATISTICS 10,
  ALTER COLUMN generated_at SET STATISTICS 10, ALTER COLUMN bundle SET STATISTICS 10;`;

export const bundleStatistics: Migration = { version: 35, name: 'bundle_statistics', sqlite: 'SELECT 1;', postgres };
