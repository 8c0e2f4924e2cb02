/**
 * How a write that its caller awaits may be committed: `grouped`, with the other grouped writes
 * asked for in the same turn of the event loop (SQLite's group commit, sqlite/db.ts writeGrouped:
 * one fsync for all of them). Only for a caller that waits for its write before it counts on it;
 * PostgreSQL commits each on its own connection and ignores it.
 */
export interface WriteOptions {
  grouped?: boolean;
}
