/**
 * The domain made whole over one store: the audit log, the node registry with the effects of a
 * node change, the policy generator, the door for policy changes, managers, and the signed
 * bundles. The server, capstan-server's admin verbs (in process) and the tests compose it here,
 * so that a change has the same effects and the same audit record whichever of them made it.
 */
import type { Logger } from '@capstan/shared/log';
import { AuditLog } from './audit/log.js';
import { BundleServer } from './policy/bundles.js';
import { PolicyGenerator } from './policy/generate.js';
import type { PolicyKeyring } from './policy/key.js';
import { PolicyService } from './policy/service.js';
import { ChangeRequestService } from './policy/reviews.js';
import { ManagerService } from './providers/service.js';
import { AdminService } from './admins/service.js';
import { NodeRegistry, nodeEffects, type NodeEffectDeps } from './registry/nodes.js';
import type { Store } from './store/store.js';
import { EventService } from './events/service.js';
import { adminActionEvent, deployedEvent, policyFailedEvent, nodeEvents } from './events/sources.js';

export interface Domain {
  audit: AuditLog;
  nodes: NodeRegistry;
  generator: PolicyGenerator;
  policy: PolicyService;
  /** Managers (discovery sources) and their polls. */
  managers: ManagerService;
  /** Change requests: proposed policy changes, reviewed, then deployed through `policy`. */
  reviews: ChangeRequestService;
  /** Named admins and their tokens. */
  admins: AdminService;
  /** Signed bundles (absent without a policy key). */
  bundles: BundleServer | null;
  /** The event stream: what the domain emits, and its readers. */
  events: EventService;
}

export interface DomainDeps {
  store: Store;
  log: Logger;
  /** The policy signing key; bundles are served only with one. */
  key?: PolicyKeyring;
  /** The remote-run links relays hold (the server's): a relay's link ends when it may no longer hold one. */
  links?: NodeEffectDeps['links'];
  now?: () => Date;
  /** The event stream's reader settings ([events]); defaults when absent. */
  events?: { pollMs?: number; maxWaitMs?: number; maxReaders?: number };
  /** `[policy] review_roles`: roles whose policy changes go through a change request. */
  reviewRoles?: readonly string[];
  /** `[policy] shared_folder`: where file_from_template directives' `source` templates are read. */
  sharedFolder?: string;
  /** Policy render threads (`[policy] render_threads`, resolved: 0 or more). */
  renderThreads?: number;
  /** How long touched nodes are gathered before their batch is generated (`[policy] touch_window`). */
  touchWindowMs?: number;
  /** Batches of a generation written at once (`[policy] write_batches` on PostgreSQL; 1 on SQLite). */
  writeBatches?: number;
}

export function composeDomain(deps: DomainDeps): Domain {
  const { store, log } = deps;
  const now = deps.now ? { now: deps.now } : {};
  const events = new EventService({ store, log, ...deps.events });
  const audit = new AuditLog({
    admins: store.admins, log, ...now,
    onRecord: (rec) => {
      const e = adminActionEvent(rec);
      return e ? events.emit([e]) : undefined;
    },
  });
  const generator = new PolicyGenerator({
    store, log, ...(deps.now && { clock: deps.now }), ...(deps.sharedFolder && { sharedFolder: deps.sharedFolder }),
    ...(deps.renderThreads !== undefined && { renderThreads: deps.renderThreads }),
    ...(deps.touchWindowMs !== undefined && { touchWindowMs: deps.touchWindowMs }),
    ...(deps.writeBatches !== undefined && { writeBatches: deps.writeBatches }),
    onDeployed: (ids, at) => {
      const e = deployedEvent(ids, at);
      return e ? events.emit([e]) : undefined;
    },
    onProblems: (problems, at) => {
      const e = policyFailedEvent(problems, at);
      return e ? events.emit([e]) : undefined;
    },
  });
  const nodes = new NodeRegistry({ store, log, audit, ...now })
    .on(nodeEffects({ store, touch: (id) => generator.touch(id), ...(deps.links && { links: deps.links }), ...now }))
    .on(nodeEvents(events));
  const policy = new PolicyService({ store, generator, audit, log, ...(deps.key && { key: deps.key }), ...now, ...(deps.reviewRoles && { reviewRoles: deps.reviewRoles }) });
  const reviews = new ChangeRequestService({ store, policy, audit, ...now });
  const bundles = deps.key ? new BundleServer({ store, generator, key: deps.key }) : null;
  const managers = new ManagerService({ store, nodes, audit, ...now });
  const admins = new AdminService({ store, audit, ...now });
  return { audit, nodes, generator, policy, managers, admins, bundles, events, reviews };
}
