/**
 * Managers: discovery sources — a cloud account seen through a provider driver, or a
 * static host list — and the nodes they hold. The store keeps a manager's spec as given after
 * validation (server/src/providers/spec.ts); credentials are only ever *references* there.
 */
import { capstanError } from '@capstan/shared/errors';
import { lookup, REFUSE, type NulRules } from '../guard.js';
import type { NodeRecord } from '../nodes/types.js';

export type ManagerType = 'aws-ec2' | 'azure-vm' | 'gcp' | 'static';

export interface ManagerRecord {
  id: string;
  name: string;
  type: ManagerType;
  /** The relay id hosting its provider, or `server`. */
  provider: string;
  /** Validated spec: filters, poll_interval, credentials reference, driver settings. */
  spec: Record<string, unknown>;
  created_at: string;
  updated_at: string;
  last_poll_at: string | null;
  /** The last poll's error (null when it succeeded). */
  last_poll_error: string | null;
}

export interface ManagerInsert {
  id: string;
  name: string;
  type: ManagerType;
  provider: string;
  spec: Record<string, unknown>;
}

/** One instance as a provider saw it (the drivers' type: they produce it, the store consumes it). */
import type { DiscoveredInstance } from '@capstan/toolkit/providers/types';

export type { DiscoveredInstance };

export interface DiscoverySummary {
  created: number;
  updated: number;
  unchanged: number;
  /** Nodes this manager held that the poll no longer saw: now `missing`. */
  missing: number;
  /** Each node the poll created or moved, before and after (the registry records and announces them). */
  changed: Array<{ change: 'created' | 'updated' | 'missing'; before: NodeRecord | null; after: NodeRecord }>;
}

/** The cloud identity an agent's inventory carries (instance metadata). */
export interface CloudIdentity {
  source_id: string;
  region: string;
  account_id: string;
}

export interface ManagerStore {
  listManagers(provider?: string): Promise<ManagerRecord[]>;
  getManager(id: string): Promise<ManagerRecord | null>;
  /** ERR_CONFLICT when the id exists. */
  createManager(m: ManagerInsert, at: string): Promise<ManagerRecord>;
  /** Replace name, provider and spec (the type is fixed). Null when unknown. */
  updateManager(id: string, m: Omit<ManagerInsert, 'id' | 'type'>, at: string): Promise<ManagerRecord | null>;
  /** Remove the manager and its links (nodes stay; see providers/managers.ts for the node choice). */
  deleteManager(id: string): Promise<boolean>;
  /** Ids of the nodes this manager holds that no other manager holds. */
  exclusiveNodes(id: string): Promise<string[]>;
  /** Link a node to a manager (idempotent); false when either is unknown. */
  linkNode(nodeId: string, managerId: string, at: string): Promise<boolean>;
  /**
   * Apply one complete poll of a manager in one transaction: instances upsert by cloud identity
   * (created accepted-less nodes, state from the cloud, `stopped` unreachable, `terminated`
   * final) and are linked to the manager; nodes it held that were not seen become `missing`.
   */
  applyDiscovery(managerId: string, instances: DiscoveredInstance[], at: string): Promise<DiscoverySummary>;
  recordPoll(id: string, at: string, error: string | null): Promise<void>;
  /**
   * An agent enrolling on a discovered instance: the discovered row (no agent yet) with this
   * cloud identity takes the agent's node id, keeping its links, tags and history. Returns false
   * when there is no such row (or the id is already taken).
   */
  adoptDiscovered(nodeId: string, identity: CloudIdentity, at: string): Promise<boolean>;
  /** The discovered row (no agent yet) with this cloud identity; null when none. */
  findDiscovered(identity: CloudIdentity): Promise<NodeRecord | null>;
  /**
   * A confirmed claim (join.ts): the existing node `nodeId` takes over the discovered row with
   * this identity. False when either is missing, or the node has a cloud identity already.
   */
  joinDiscovered(nodeId: string, identity: CloudIdentity, at: string, cause: string): Promise<boolean>;
}

/** How each managers method treats U+0000 (guard.ts). */
export const MANAGERS_NUL: NulRules<ManagerStore> = {
  listManagers: lookup([0], () => []),
  getManager: lookup([0], () => null),
  createManager: REFUSE,
  updateManager: lookup([0], () => null),
  deleteManager: lookup([0], () => false),
  exclusiveNodes: lookup([0], () => []),
  linkNode: lookup([0, 1], () => false),
  applyDiscovery: lookup([0], (managerId: string) => {
    throw capstanError('ERR_NOT_FOUND', `manager ${managerId} is unknown`);
  }),
  recordPoll: lookup([0], () => undefined),
  adoptDiscovered: lookup([0, 1], () => false),
  findDiscovered: lookup([0], () => null),
  joinDiscovered: lookup([0, 1], () => false),
};
