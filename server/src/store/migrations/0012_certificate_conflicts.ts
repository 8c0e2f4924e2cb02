/**
 * Version 12: certificate conflicts of nodes not accepted yet. A pending node keeps the first
 * certificate it sent; an inventory carrying another certificate for the same node id (signed by
 * that other key) is recorded here, beside the row, until an admin accepts the node choosing one
 * of the two (POST /api/1/nodes/<id>/accept {"fingerprint"}). Rare, so kept in `nodes` itself.
 */
import type { Migration } from './index.js';

const sqlite = `
ALTER TABLE nodes ADD COLUMN conflict_certificate TEXT;
ALTER TABLE nodes ADD COLUMN conflict_fingerprint TEXT;
ALTER TABLE nodes ADD COLUMN conflict_at TEXT;
`;

const postgres = `
ALTER TABLE nodes ADD COLUMN conflict_certificate text;
ALTER TABLE nodes ADD COLUMN conflict_fingerprint text;
ALTER TABLE nodes ADD COLUMN conflict_at timestamptz;
`;

export const certificateConflicts: Migration = { version: 12, name: 'certificate_conflicts', sqlite, postgres };
