/**
 * The Store callers use, made of one dialect's parts. Each part answers for one subject and
 * each of its methods is reached through that subject's U+0000 rule (guard.ts), so both
 * backends treat it alike and no method can be added without saying how.
 */
import { ADMINS_NUL, type AdminStore } from './admins/types.js';
import { BOOTSTRAP_NUL, type BootstrapStore } from './bootstrap/types.js';
import { CHANGES_NUL, type ChangeStore } from './changes/types.js';
import { COMPLIANCE_NUL, type ComplianceStore } from './compliance/types.js';
import { guard } from './guard.js';
import { EVENTS_NUL, type EventStore } from './events/types.js';
import { FINDINGS_NUL, type FindingStore } from './findings/types.js';
import { NOTIFY_NUL, type NotifyStore } from './notify/types.js';
import { IDENTITY_NUL, type IdentityStore } from './identity/types.js';
import { JOBS_NUL, type JobStore } from './jobs/types.js';
import { CAMPAIGNS_NUL, type CampaignStore } from './campaigns/types.js';
import { MANAGERS_NUL, type ManagerStore } from './managers/types.js';
import { INVENTORY_NUL, NODES_NUL, type InventoryStore, type NodeStore } from './nodes/types.js';
import { POLICY_NUL, type PolicyStore } from './policy/types.js';
import { RUNS_NUL, type RunStore } from './runs/types.js';
import type { Store } from './store.js';
import { SWEEP_NUL, type SweepStore } from './sweep/types.js';
import { REVIEWS_NUL, type ChangeRequestStore } from './reviews/types.js';
import { VULNS_NUL, type VulnStore } from './vulns/types.js';

/** What one dialect's store is made of: one part per subject. */
export interface StoreParts {
  nodes: NodeStore;
  inventory: InventoryStore;
  runs: RunStore;
  compliance: ComplianceStore;
  changes: ChangeStore;
  events: EventStore;
  findings: FindingStore;
  notify: NotifyStore;
  policy: PolicyStore;
  sweep: SweepStore;
  identity: IdentityStore;
  jobs: JobStore;
  campaigns: CampaignStore;
  managers: ManagerStore;
  bootstrap: BootstrapStore;
  admins: AdminStore;
  reviews: ChangeRequestStore;
  vulns: VulnStore;
  migrate(): Promise<void>;
  close(): Promise<void>;
}

// The class has the Store's members through this interface: the constructor sets them from the parts.
export interface ComposedStore extends Store {}

export class ComposedStore {
  constructor(parts: StoreParts) {
    Object.assign(
      this,
      guard(parts.nodes, NODES_NUL),
      guard(parts.inventory, INVENTORY_NUL),
      guard(parts.runs, RUNS_NUL),
      guard(parts.compliance, COMPLIANCE_NUL),
      guard(parts.changes, CHANGES_NUL),
      guard(parts.events, EVENTS_NUL),
      guard(parts.findings, FINDINGS_NUL),
      guard(parts.policy, POLICY_NUL),
      guard(parts.sweep, SWEEP_NUL),
      {
        identity: guard(parts.identity, IDENTITY_NUL),
        jobs: guard(parts.jobs, JOBS_NUL),
        campaigns: guard(parts.campaigns, CAMPAIGNS_NUL),
        managers: guard(parts.managers, MANAGERS_NUL),
        bootstrap: guard(parts.bootstrap, BOOTSTRAP_NUL),
        admins: guard(parts.admins, ADMINS_NUL),
        notify: guard(parts.notify, NOTIFY_NUL),
        reviews: guard(parts.reviews, REVIEWS_NUL),
        vulns: guard(parts.vulns, VULNS_NUL),
        migrate: () => parts.migrate(),
        close: () => parts.close(),
      },
    );
  }
}
