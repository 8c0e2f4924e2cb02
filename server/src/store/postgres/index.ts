/** The PostgreSQL backend: the Store on one database shared by several server processes. */
import { PostgresAdminStore } from '../admins/postgres.js';
import { PostgresBootstrapStore } from '../bootstrap/postgres.js';
import { PostgresChanges } from '../changes/postgres.js';
import { PostgresCompliance } from '../compliance/postgres.js';
import { ComposedStore } from '../facade.js';
import { PostgresIdentityStore } from '../identity/postgres.js';
import { PostgresJobStore } from '../jobs/postgres.js';
import { PostgresManagerStore } from '../managers/postgres.js';
import { PostgresInventory } from '../nodes/inventory/postgres.js';
import { PostgresNodes } from '../nodes/postgres.js';
import { PostgresRuns } from '../runs/postgres.js';
import { PostgresDb, type PostgresDbOptions } from './db.js';
import { migratePostgres } from './migrate.js';
import { PostgresRegistry } from './postgres-store.js';

export interface PostgresStoreOptions extends PostgresDbOptions {
  /** Told about maintenance that was skipped and will be retried (a partition that could not be made). */
  onMaintenance?: (message: string, err?: unknown) => void;
  /** Memory for decoded node-day bases (store/run-codec.ts). */
  runBaseCacheBytes?: number;
}

export class PostgresStore extends ComposedStore {
  constructor(opts: PostgresStoreOptions) {
    const db = new PostgresDb(opts);
    const nodes = new PostgresNodes(db);
    const compliance = new PostgresCompliance(db, nodes);
    const changes = new PostgresChanges(db);
    const registry = new PostgresRegistry(db, compliance, opts);
    const runs = new PostgresRuns(db, nodes, compliance, changes, opts.runBaseCacheBytes);
    super({
      nodes,
      inventory: new PostgresInventory(db, nodes),
      runs,
      compliance,
      changes,
      registry,
      identity: new PostgresIdentityStore(db),
      jobs: new PostgresJobStore(db),
      managers: new PostgresManagerStore(db, nodes),
      bootstrap: new PostgresBootstrapStore(db),
      admins: new PostgresAdminStore(db),
      migrate: () => db.tx('migrate', (c) => migratePostgres(c, db.schema)),
      close: () => db.close(),
    });
  }
}
