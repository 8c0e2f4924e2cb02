/**
 * The PostgreSQL backend: the Store on one database shared by several server processes, made of
 * one part per subject, each in its folder beside its SQLite twin.
 */
import { PostgresAdminStore } from '../admins/postgres.js';
import { PostgresBootstrapStore } from '../bootstrap/postgres.js';
import { PostgresChanges } from '../changes/postgres.js';
import { PostgresCompliance } from '../compliance/postgres.js';
import { ComposedStore } from '../facade.js';
import type { StoreRules } from '../rules.js';
import { PostgresIdentityStore } from '../identity/postgres.js';
import { PostgresJobStore } from '../jobs/postgres.js';
import { PostgresCampaignStore } from '../campaigns/postgres.js';
import { PostgresManagerStore } from '../managers/postgres.js';
import { PostgresInventory } from '../nodes/inventory/postgres.js';
import { PostgresNodes } from '../nodes/postgres.js';
import { PostgresPolicy } from '../policy/postgres.js';
import { PostgresRuns } from '../runs/postgres.js';
import { PostgresSweep } from '../sweep/postgres.js';
import { PostgresDb, type PostgresDbOptions } from './db.js';
import { PostgresChangeRequests } from '../reviews/postgres.js';
import { migratePostgres } from './migrate.js';
import { PostgresEvents } from '../events/postgres.js';
import { PostgresFindings } from '../findings/postgres.js';
import { PostgresNotify } from '../notify/postgres.js';
import type { OnUnreadable } from '../runs/outcomes.js';
import { PostgresVulns } from '../vulns/postgres.js';

export interface PostgresStoreOptions extends PostgresDbOptions {
  /** Told about maintenance that was skipped and will be retried (a partition that could not be made). */
  onMaintenance?: (message: string, err?: unknown) => void;
  /** Memory for decoded node-day bases (runs/run-codec.ts). */
  runBaseCacheBytes?: number;
  /** Memory for nodes' expected components read by the ingest (compliance/directive-cache.ts). */
  directiveCacheBytes?: number;
  /** The domain's rules the store applies (../rules.ts). */
  rules: StoreRules;
  /** Told of a stored value that cannot be read: a node's outcomes (read as none), a run base (runs/outcomes.ts). */
  onUnreadable?: OnUnreadable;
}

export class PostgresStore extends ComposedStore {
  constructor(opts: PostgresStoreOptions) {
    const db = new PostgresDb(opts);
    const nodes = new PostgresNodes(db, opts.rules);
    const events = new PostgresEvents(db, opts.rules);
    const findings = new PostgresFindings(db, opts.rules);
    const compliance = new PostgresCompliance(db, nodes, findings, events, opts.directiveCacheBytes, opts.onUnreadable);
    const changes = new PostgresChanges(db, opts.rules);
    super({
      nodes,
      inventory: new PostgresInventory(db, nodes),
      runs: new PostgresRuns(db, nodes, compliance, changes, events, opts.rules, opts.runBaseCacheBytes, opts.onUnreadable),
      compliance,
      changes,
      events,
      findings,
      notify: new PostgresNotify(db),
      policy: new PostgresPolicy(db, compliance, events),
      sweep: new PostgresSweep(db, opts.rules.nodes, opts.onMaintenance),
      identity: new PostgresIdentityStore(db),
      // A job's last task and its job.finished event, in one transaction.
      jobs: new PostgresJobStore(db, opts.rules.tasks, async (c, job, at) => void await events.write(c, [opts.rules.events.jobFinished(job, job.progress, at)])),
      campaigns: new PostgresCampaignStore(db),
      managers: new PostgresManagerStore(db, nodes, opts.rules),
      bootstrap: new PostgresBootstrapStore(db),
      admins: new PostgresAdminStore(db),
      reviews: new PostgresChangeRequests(db),
      vulns: new PostgresVulns(db, opts.rules),
      migrate: async () => {
        await db.tx('migrate', (c) => migratePostgres(c, db.schema));
        await warnWithoutAutovacuum(db, opts.onMaintenance);
      },
      close: () => db.close(),
    });
  }
}

/**
 * Tables the ingest rewrites in place (compliance rows, kept keys) keep their dead rows until a
 * VACUUM: without autovacuum they grow without bound (a 100,000-node fleet run on a cluster with
 * it off had 2 GB of directive rows and 3.8 GB of kept keys after 74,000 runs). Said once at start.
 */
async function warnWithoutAutovacuum(db: PostgresDb, tell?: (message: string) => void): Promise<void> {
  const { rows } = await db.query<{ setting: string }>('migrate', "SELECT setting FROM pg_settings WHERE name = 'autovacuum'");
  if (rows[0]?.setting === 'off') {
    tell?.('PostgreSQL autovacuum is off: the tables the ingest rewrites keep their dead rows and grow until vacuumed; turn it on (autovacuum = on) or vacuum them on a schedule');
  }
}
