/** Providers: pick a manager's driver, list and filter what it discovers. */
export * from './types.js';
export { applyFilters, checkDiscoveryFilters, instanceKept, regionKept, wildcard } from './filters.js';
export { checkManager, MANAGER_ID, PROVIDER_ID } from './spec.js';
export { discover, driverFor, type DriverOptions } from './drivers.js';
export { Poller, type PollerOptions, type PollOutcome } from './poller.js';
