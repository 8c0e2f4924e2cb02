/**
 * Version 8: a run's `outcomes` summary packed (raw deflate of its JSON) in `outcomes_packed`,
 * in `runs` and in `node_compliance`. The JSON of ~80 outcomes is ~14 KB, stored twice
 * per run log (the run, and the node's compliance base): most of the database's growth per run
 * log. Packed, it is ~2.2 KB. Rows written from now on keep `[]` in `outcomes` and the packed
 * form beside it; older rows keep their JSON (outcomes_packed NULL) and are read as before
 * (store/outcomes.ts).
 */
import type { Migration } from './index.js';

const sqlite = `
ALTER TABLE runs ADD COLUMN outcomes_packed BLOB;
ALTER TABLE node_compliance ADD COLUMN outcomes_packed BLOB;
`;

const postgres = `
ALTER TABLE runs ADD COLUMN outcomes_packed bytea;
ALTER TABLE node_compliance ADD COLUMN outcomes_packed bytea;
`;

export const packedOutcomes: Migration = { version: 8, name: 'packed_outcomes', sqlite, postgres };
