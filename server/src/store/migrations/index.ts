/**
 * Forward-only schema migrations, one file per version, each written once per dialect. A
 * database remembers what it has applied in `schema_version`; a version is never edited after
 * release (add the next one instead), so an old database and a new one converge on the same
 * schema. The runners live with each backend (`sqlite/migrate.ts`, `postgres/migrate.ts`).
 */
import { initial } from './0001_initial.js';
import { registry } from './0002_registry.js';
import { policy } from './0003_policy.js';
import { identity } from './0004_identity.js';
import { jobs } from './0005_jobs.js';
import { providers } from './0006_providers.js';
import { ingestCompact } from './0007_ingest_compact.js';
import { packedOutcomes } from './0008_packed_outcomes.js';
import { relayNodes } from './0009_relay_nodes.js';
import { complianceChanges } from './0010_compliance_changes.js';
import { bootstrap } from './0011_bootstrap.js';
import { certificateConflicts } from './0012_certificate_conflicts.js';
import { futureRuns } from './0013_future_runs.js';
import { runBases } from './0014_run_bases.js';
import { inventory } from './0015_inventory.js';
import { adminsAudit } from './0016_admins_audit.js';
import { auditChanges } from './0017_audit_changes.js';
import { findingsEvents } from './0018_findings_events.js';
import { changeRequests } from './0019_change_requests.js';
import { consoleSignouts } from './0020_console_signouts.js';
import { vulnerabilities } from './0021_vulnerabilities.js';
import { campaigns } from './0022_campaigns.js';
import { keptCompliance } from './0023_kept_compliance.js';
import { propertyValuesPolicyState } from './0024_property_values_policy_state.js';
import { keptGroups } from './0025_kept_groups.js';
import { keptChanges } from './0026_kept_changes.js';
import { keptShares } from './0027_kept_shares.js';
import { keptTargets } from './0028_kept_targets.js';
import { keptTargetsDeferred } from './0029_kept_targets_deferred.js';
import { expectationLists } from './0030_expectation_lists.js';
import { keptTargetsStale } from './0031_kept_targets_stale.js';
import { keptRowPlans } from './0032_kept_row_plans.js';
import { keptStatementTriggers } from './0033_kept_statement_triggers.js';
import { sweepIndexes } from './0034_sweep_indexes.js';
import { bundleStatistics } from './0035_bundle_statistics.js';
import { keptTargetsAdded } from './0036_kept_targets_added.js';
import { keptTargetsNormal } from './0037_kept_targets_normal.js';
import { keptCountersBatched } from './0038_kept_counters_batched.js';
import { keptEarlyStops } from './0039_kept_early_stops.js';
import { rowsExpectingNothing } from './0040_rows_expecting_nothing.js';
import { bundleTexts } from './0041_bundle_texts.js';
import { policyTextsPostgres } from './0042_policy_texts_postgres.js';

export interface Migration {
  version: number;
  name: string;
  sqlite: string;
  postgres: string;
}

export const MIGRATIONS: readonly Migration[] = [
  initial, registry, policy, identity, jobs, providers, ingestCompact, packedOutcomes, relayNodes, complianceChanges, bootstrap, certificateConflicts, futureRuns, runBases,
  inventory, adminsAudit, auditChanges, findingsEvents, changeRequests, consoleSignouts, vulnerabilities, campaigns, keptCompliance,
  propertyValuesPolicyState, keptGroups, keptChanges, keptShares, keptTargets, keptTargetsDeferred, expectationLists, keptTargetsStale,
  keptRowPlans, keptStatementTriggers, sweepIndexes, bundleStatistics, keptTargetsAdded, keptTargetsNormal, keptCountersBatched, keptEarlyStops,
  rowsExpectingNothing, bundleTexts, policyTextsPostgres,
];

/** The newest schema this code understands; a database above it is refused at start-up. */
export const LATEST_SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;

/** Versions must be 1, 2, 3…: a gap or a repeat is a packaging bug, caught on first use. */
MIGRATIONS.forEach((m, i) => {
  if (m.version !== i + 1) throw new Error(`migration ${m.name} has version ${m.version}, expected ${i + 1}`);
});
