// The embedded backend; see sqlite-store.ts for its durability and locking choices.
export { SqliteStore, type SqliteStoreOptions } from './sqlite-store.js';
