// The embedded backend; see db.ts for its durability and locking choices.
export { SqliteStore, type SqliteStoreOptions } from './sqlite-store.js';
