/**
 * What the admin API's routes, the console and the command lines may read of the registry: the
 * store's read half, and nothing that writes. Every change goes through the domain (registry/,
 * policy/, jobs/, providers/, identity/, admins via audit/), which records who made it; a route
 * holding only these cannot write beside it. The types the reads answer with come from here too,
 * so that no route or command line imports the store.
 */
import type { AdminStore, BootstrapStore, ChangeRequestStore, IdentityStore, JobStore, ManagerStore, NotifyStore, Store } from './store/store.js';

export type * from './store/store.js';
export { CHANGE_LABELS, CHANGES_COUNT_LIMIT, CLOSE_REASONS, DELIVERY_STATES, EVENT_SEVERITIES, FINDING_KINDS, MAX_EVENTS_READ, SORT_FIELDS } from './store/store.js';
export { MAX_FILTER_IDS } from './store/changes/rows.js';
export { ADMIN_ROLES } from './store/admins/types.js';
export { CHANGE_REQUEST_STATUSES } from './store/reviews/types.js';
export { parseRfc3339 } from './store/time.js';

/** The root store's reads. */
type RootReads = Pick<Store,
  | 'getNode' | 'getNodeTrust' | 'listNodes' | 'listNodeIds' | 'acceptedNodesPage' | 'getHistory' | 'getProperties' | 'listNodeProperties'
  | 'getInventory' | 'inventoryHistory' | 'listSoftware'
  | 'listRuns' | 'getRunLog' | 'getRunLogText' | 'getRunBase'
  | 'getExpectations' | 'getComplianceBase' | 'complianceSummary' | 'complianceByRule' | 'complianceByGroup' | 'complianceNodes' | 'worstNodes' | 'targetNodes'
  | 'listChanges' | 'changesHistogram' | 'listFindings' | 'listEvents' | 'getEvents' | 'lastEventId'
  | 'listPolicyObjects' | 'getPolicyObject' | 'getPolicyBundle' | 'policyConfigIds'
  | 'counts'>;

export interface Reads extends RootReads {
  readonly identity: Pick<IdentityStore, 'listKeys' | 'getKey' | 'allKeys' | 'activeKey' | 'publishedKeys' | 'nodesUsingKey' | 'getToken' | 'forcedRenewals'>;
  readonly jobs: Pick<JobStore, 'getJob' | 'listJobs' | 'listTasks' | 'getTask' | 'taskHistory'>;
  readonly managers: Pick<ManagerStore, 'listManagers' | 'getManager' | 'exclusiveNodes' | 'findDiscovered'>;
  readonly bootstrap: Pick<BootstrapStore, 'listCredentials' | 'getHostKey' | 'enrolledBy'>;
  readonly admins: Pick<AdminStore, 'listAdmins' | 'getAdmin' | 'listAudit'>;
  readonly notify: Pick<NotifyStore, 'listSubscriptions' | 'getSubscription' | 'listDeliveries' | 'getDelivery'>;
  readonly reviews: Pick<ChangeRequestStore, 'getChangeRequest' | 'listChangeRequests'>;
}
