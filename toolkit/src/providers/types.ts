/**
 * Providers: discovery drivers that list the machines of a cloud account or a static
 * host list. A relay hosts the providers of the managers assigned to it (so discovery runs inside
 * the environment it lists and only ever connects outward); the server hosts those assigned to
 * `server`. Both use this module, so a driver behaves the same wherever it runs.
 */

export const MANAGER_TYPES = ['aws-ec2', 'azure-vm', 'gcp', 'static'] as const;
export type ManagerType = (typeof MANAGER_TYPES)[number];

/** One instance as seen by a provider; `state` is normalised from the cloud's vocabulary. */
export interface DiscoveredInstance {
  source_id: string;
  region: string;
  account_id: string;
  hostname: string;
  name?: string;
  address: string | null;
  state: 'running' | 'stopped' | 'terminated';
  tags: Record<string, string>;
}

/** A tag filter: the key exactly, the values with AWS wildcards (`*`, `?`, `\` escapes); values ORed. */
export interface TagFilter {
  key: string;
  values: string[];
}

export interface DiscoveryFilters {
  regions: { include: string[]; exclude: string[] };
  tags: { include: TagFilter[]; exclude: TagFilter[] };
}

/**
 * Where a driver gets its credentials: never the secret itself. `default` is the SDK's own chain
 * on the host running the provider (environment, shared files, instance metadata / managed
 * identity); `profile` a named profile of the host's shared config; `env` the names of
 * environment variables on that host holding the values.
 */
export type CredentialsRef =
  | { source: 'default' }
  | { source: 'profile'; profile: string }
  | { source: 'env'; vars: Record<string, string> };

/** Credentials a later remote action would use on instances, chosen by tag (references only). */
export interface InstanceCredentialsRule {
  tag: TagFilter;
  credentials: string;
}

/** A manager as a provider host needs it (what `GET /api/1/relays/<id>/managers` returns). */
export interface ManagerSpec {
  id: string;
  name: string;
  type: ManagerType;
  provider: string;
  poll_interval_ms: number;
  filters: DiscoveryFilters;
  credentials: CredentialsRef;
  instance_credentials_by_tag: InstanceCredentialsRule[];
  /** Driver settings: regions, subscription, project, endpoint, hosts… (see each driver). */
  config: Record<string, unknown>;
}

export interface ConnectionTest {
  reachable: boolean;
  /** The cloud's error (code and message) when unreachable; never a credential. */
  error?: string;
}

export interface Driver {
  /** Every instance the account holds (before the manager's filters). */
  list(signal?: AbortSignal): Promise<DiscoveredInstance[]>;
  test(signal?: AbortSignal): Promise<ConnectionTest>;
}
