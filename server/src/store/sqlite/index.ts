/**
 * The embedded backend: the Store on one SQLite file (db.ts has its durability and locking
 * choices), made of one part per subject, each in its folder beside its PostgreSQL twin.
 */
import { SqliteAdminStore } from '../admins/sqlite.js';
import { SqliteBootstrapStore } from '../bootstrap/sqlite.js';
import { SqliteChanges } from '../changes/sqlite.js';
import { SqliteCompliance } from '../compliance/sqlite.js';
import { ComposedStore } from '../facade.js';
import type { StoreRules } from '../rules.js';
import { SqliteIdentityStore } from '../identity/sqlite.js';
import { SqliteJobStore } from '../jobs/sqlite.js';
import { SqliteCampaignStore } from '../campaigns/sqlite.js';
import { SqliteManagerStore } from '../managers/sqlite.js';
import { SqliteInventory } from '../nodes/inventory/sqlite.js';
import { SqliteNodes } from '../nodes/sqlite.js';
import { SqlitePolicy } from '../policy/sqlite.js';
import { SqliteRuns } from '../runs/sqlite.js';
import { SqliteSweep } from '../sweep/sqlite.js';
import { SqliteChangeRequests } from '../reviews/sqlite.js';
import { SqliteDb, type SqliteDbOptions } from './db.js';
import { SqliteEvents } from '../events/sqlite.js';
import { SqliteFindings } from '../findings/sqlite.js';
import { SqliteNotify } from '../notify/sqlite.js';
import type { OnUnreadable } from '../runs/outcomes.js';
import { migrateSqlite } from './migrate.js';
import { SqliteVulns } from '../vulns/sqlite.js';

export interface SqliteStoreOptions extends SqliteDbOptions {
  /** Memory for decoded node-day bases (runs/run-codec.ts). */
  runBaseCacheBytes?: number;
  /** The domain's rules the store applies (../rules.ts). */
  rules: StoreRules;
  /** Told of a stored value that cannot be read: a node's outcomes (read as none), a run base (runs/outcomes.ts). */
  onUnreadable?: OnUnreadable;
}

export class SqliteStore extends ComposedStore {
  constructor(opts: SqliteStoreOptions) {
    const db = new SqliteDb(opts);
    const nodes = new SqliteNodes(db, opts.rules);
    const events = new SqliteEvents(db, opts.rules);
    const findings = new SqliteFindings(db, opts.rules);
    const compliance = new SqliteCompliance(db, nodes, findings, events, opts.onUnreadable);
    const changes = new SqliteChanges(db, events, opts.rules);
    super({
      nodes,
      inventory: new SqliteInventory(db, nodes),
      runs: new SqliteRuns(db, nodes, compliance, changes, events, opts.rules, opts.runBaseCacheBytes, opts.onUnreadable),
      events,
      findings,
      notify: new SqliteNotify(db),
      compliance,
      changes,
      policy: new SqlitePolicy(db, compliance),
      sweep: new SqliteSweep(db, nodes),
      identity: new SqliteIdentityStore(db),
      // A job's last task and its job.finished event, in one transaction.
      jobs: new SqliteJobStore(db, opts.rules.tasks, (job, at) => events.write([opts.rules.events.jobFinished(job, job.progress, at)])),
      campaigns: new SqliteCampaignStore(db),
      managers: new SqliteManagerStore(db, nodes, opts.rules),
      bootstrap: new SqliteBootstrapStore(db),
      admins: new SqliteAdminStore(db),
      reviews: new SqliteChangeRequests(db),
      vulns: new SqliteVulns(db, opts.rules),
      migrate: async () => migrateSqlite(db),
      close: async () => db.close(),
    });
  }
}
