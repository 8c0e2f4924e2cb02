/**
 * Version 7: lighter compliance writes for the ingest.
 * - node_compliance_directives_rule_idx goes: nothing reads through it (the per-rule and
 *   per-directive aggregates read the whole table either way: measured over 100,000 nodes on
 *   SQLite, 560 / 1,050 ms with it, 560 / 1,200 ms without, within the machine's noise), while
 *   keeping it up to date cost ~1 ms of CPU and ~10 KB per ingested run log of 80 directives: the
 *   entries of each node land in 80 places of the index, each a random insert.
 */
import type { Migration } from './index.js';

const sqlite = `
DROP INDEX IF EXISTS node_compliance_directives_rule_idx;
`;

const postgres = `
DROP INDEX IF EXISTS node_compliance_directives_rule_idx;
`;

export const ingestCompact: Migration = { version: 7, name: 'ingest_compact', sqlite, postgres };
