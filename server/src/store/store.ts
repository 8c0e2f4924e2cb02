/**
 * The registry's storage interface, made of one interface per subject (each folder's types.ts).
 * Two implementations share one test suite: `sqlite/` (better-sqlite3, WAL, the embedded default)
 * and `postgres/` (pg, for several server processes on one database), each a composition of its
 * subjects' parts (facade.ts). Everything is async so both fit; SQLite answers synchronously inside.
 */
import type { AdminStore } from './admins/types.js';
import type { BootstrapStore } from './bootstrap/types.js';
import type { ChangeStore } from './changes/types.js';
import type { ComplianceStore } from './compliance/types.js';
import type { EventStore } from './events/types.js';
import type { FindingStore } from './findings/types.js';
import type { NotifyStore } from './notify/types.js';
import type { IdentityStore } from './identity/types.js';
import type { JobStore } from './jobs/types.js';
import type { CampaignStore } from './campaigns/types.js';
import type { ManagerStore } from './managers/types.js';
import type { InventoryStore, NodeStore } from './nodes/types.js';
import type { PolicyStore } from './policy/types.js';
import type { RunStore } from './runs/types.js';
import type { SweepStore } from './sweep/types.js';
import type { ChangeRequestStore } from './reviews/types.js';
import type { VulnStore } from './vulns/types.js';

export type * from './admins/types.js';
export type * from './bootstrap/types.js';
export type * from './changes/types.js';
export type * from './compliance/types.js';
export type * from './events/types.js';
export type * from './findings/types.js';
export type * from './notify/types.js';
export type * from './identity/types.js';
export type * from './jobs/types.js';
export type * from './campaigns/types.js';
export type * from './managers/types.js';
export type * from './nodes/types.js';
export type * from './policy/types.js';
export type * from './runs/types.js';
export type * from './sweep/types.js';
export type * from './reviews/types.js';
export type * from './vulns/types.js';
export type * from './write-options.js';
export { SORT_FIELDS } from './nodes/types.js';
export { CHANGE_LABELS, CHANGES_COUNT_LIMIT } from './changes/types.js';
export { EVENT_SEVERITIES, MAX_EVENTS_READ } from './events/types.js';
export { CLOSE_REASONS, FINDING_KINDS } from './findings/types.js';
export { DELIVERY_STATES } from './notify/types.js';

export interface Page<T> {
  data: T[];
  total: number;
}

export interface Store extends NodeStore, InventoryStore, RunStore, ComplianceStore, ChangeStore, EventStore, FindingStore, PolicyStore, SweepStore {
  /** Create or migrate the schema (forward only). Idempotent. */
  migrate(): Promise<void>;
  /** Node identity: keyring, node tokens, renewal nonces (./identity/types.ts). */
  readonly identity: IdentityStore;
  /** Jobs: runs triggered on many nodes, their per-node tasks and transitions (./jobs/types.ts). */
  readonly jobs: JobStore;
  /** Patch campaigns: upgrades in waves and maintenance windows (./campaigns/types.ts). */
  readonly campaigns: CampaignStore;
  /** Managers (discovery sources) and the nodes they hold (./managers/types.ts). */
  readonly managers: ManagerStore;
  /** SSH credentials, pinned host keys and enrollment tokens of bootstrap jobs (./bootstrap/types.ts). */
  readonly bootstrap: BootstrapStore;
  /** Named admins and the audit log (./admins/types.ts). */
  readonly admins: AdminStore;
  /** Subscriptions to the event stream and their outbox (./notify/types.ts). */
  readonly notify: NotifyStore;
  /** Change requests: proposed policy changes, their reviews and deployment (./reviews/types.ts). */
  readonly reviews: ChangeRequestStore;
  /** Vulnerabilities: advisories, feeds, findings, mutes (./vulns/types.ts). */
  readonly vulns: VulnStore;
  close(): Promise<void>;
}
