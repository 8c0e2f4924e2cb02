/**
 * Version 34: on SQLite, the lifecycle sweep finds its nodes by index.
 *
 * Every minute the sweep asks for the reachable nodes whose last contact is older than the
 * missed-runs window, the live ones silent for longer than the missing window, and the ones
 * in a purgeable state for longer than the purge window. None of those had an index: each
 * question read the whole nodes table, inside the write transaction the ingest waits for. At
 * 300,000 nodes on SQLite that was about 0.6 s a question, three a minute, to find nothing.
 *
 * - `nodes_reachable_idx (status, last_contact_at)`: only the reachable nodes silent past the
 *   cut-off, not the unreachable ones silent longer still (a plain index on the contact time made
 *   each sweep walk those: 170 ms for 500 nodes where this takes 6–7 ms).
 * - `nodes_live_idx (state, last_contact_at)`: only the live nodes silent past theirs.
 * - `nodes_state_changed_idx (state, state_changed_at)`: only the purgeable states past theirs;
 *   a node's state seldom changes, so this one is seldom written.
 *
 * A run moves its node's entries in the first two to their ends. Measured on the 300,000-node
 * fleet run's database (bench/store-insert.mjs --sqlite-db), a run's cost did not move beyond
 * the noise of this machine: see docs/capacity.md.
 *
 * PostgreSQL: nothing. Its planner has statistics, its sweep locks only the rows it picks (FOR
 * UPDATE SKIP LOCKED), and an index on the contact time would cost every run: a run's update of
 * its node changes that column, and an update that changes an indexed column cannot be a HOT
 * one, so it writes an entry into every index of the table. With these indexes none of 2,000
 * such updates was HOT, without them 414 (bench/store-insert.mjs, 500 nodes).
 */
import type { Migration } from './index.js';

const sqlite = `CREATE INDEX nodes_reachable_idx ON nodes (status, last_contact_at);
CREATE INDEX nodes_live_idx ON nodes (state, last_contact_at);
CREATE INDEX nodes_state_changed_idx ON nodes (state, state_changed_at);`;

export const sweepIndexes: Migration = { version: 34, name: 'sweep_indexes', sqlite, postgres: 'SELECT 1;' };
