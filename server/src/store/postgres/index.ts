// The shared-database backend; see postgres-store.ts for its locking choices.
export { PostgresStore, type PostgresStoreOptions } from './postgres-store.js';
