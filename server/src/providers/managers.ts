/**
 * Managers on the server: the spec as stored and shown, applying a poll's outcome (from the
 * server's own poller or from a relay), and deleting a manager with the admin's explicit choice
 * for the nodes only it holds.
 */
import { capstanError } from '@capstan/shared/errors';
import { applyFilters, checkManager, type DiscoveredInstance, type DiscoveryFilters, type ManagerSpec } from '@capstan/toolkit/providers/index';
import type { DiscoverySummary, ManagerRecord, Store } from '../store/store.js';
import { checkInstance } from './discovery.js';
import { NODE_STATES } from '../registry/rules.js';
import type { NodeRegistry } from '../registry/nodes.js';
import type { Actor } from '../audit/actor.js';

/** The largest poll a relay may post (instances); larger accounts need narrower filters or managers. */
export const MAX_INSTANCES_PER_POLL = 100_000;

/** What the store keeps of a checked spec (id, name, type and provider are columns). */
export function specToStored(s: ManagerSpec): Record<string, unknown> {
  return {
    poll_interval_ms: s.poll_interval_ms,
    filters: s.filters,
    credentials: s.credentials,
    instance_credentials_by_tag: s.instance_credentials_by_tag,
    config: s.config,
  };
}

export function recordToSpec(r: ManagerRecord): ManagerSpec {
  const s = r.spec as Omit<ManagerSpec, 'id' | 'name' | 'type' | 'provider'>;
  return { id: r.id, name: r.name, type: r.type, provider: r.provider, ...s };
}

/** A manager as the API shows it: the spec plus its last poll. Credentials are references only. */
export function managerView(r: ManagerRecord): Record<string, unknown> {
  const s = recordToSpec(r);
  return {
    id: s.id, name: s.name, type: s.type, provider: s.provider,
    poll_interval: `${Math.round(s.poll_interval_ms / 1000)}s`,
    filters: s.filters, credentials: s.credentials, instance_credentials_by_tag: s.instance_credentials_by_tag.map((x) => ({ key: x.tag.key, value: x.tag.values[0], credentials: x.credentials })),
    config: s.config, created_at: r.created_at, updated_at: r.updated_at, last_poll_at: r.last_poll_at, last_poll_error: r.last_poll_error,
  };
}

export { checkManager };

/** What a poll did, in counts (the nodes it moved are in the audit log and their history). */
export type PollSummary = Omit<DiscoverySummary, 'changed'>;

/**
 * One poll's outcome, from the server's poller or posted by the relay hosting the manager (the
 * `actor`); the nodes it moves go through the registry.
 */
export async function applyPoll(store: Store, nodes: NodeRegistry, managerId: string, outcome: { instances: unknown[] } | { error: string }, at: Date, actor: Actor): Promise<PollSummary | null> {
  if ('error' in outcome) {
    await store.managers.recordPoll(managerId, at.toISOString(), String(outcome.error).slice(0, 1000));
    return null;
  }
  if (outcome.instances.length > MAX_INSTANCES_PER_POLL) throw capstanError('ERR_BAD_REQUEST', `at most ${MAX_INSTANCES_PER_POLL} instances per poll`);
  const checked: DiscoveredInstance[] = outcome.instances.map(checkInstance);
  // The filters again, as stored now: a relay polls with the spec of its last refresh, so right
  // after an admin narrowed them its post may still hold instances they leave out.
  const manager = await store.managers.getManager(managerId);
  const filters = (manager?.spec as { filters?: DiscoveryFilters } | undefined)?.filters;
  const instances = filters ? applyFilters(filters, checked) : checked;
  const { changed: _changed, ...counts } = await nodes.applyDiscovery(managerId, instances, at.toISOString(), actor);
  return counts;
}

export type NodesChoice = { kind: 'keep' } | { kind: 'delete' } | { kind: 'state'; state: string };


/** `?nodes=keep|delete|state:<state>`; absent → null (the caller decides whether one is needed). */
export function parseNodesChoice(v: unknown): NodesChoice | null {
  if (v === undefined) return null;
  if (v === 'keep') return { kind: 'keep' };
  if (v === 'delete') return { kind: 'delete' };
  if (typeof v === 'string' && v.startsWith('state:') && NODE_STATES.includes(v.slice(6))) return { kind: 'state', state: v.slice(6) };
  throw capstanError('ERR_MANAGER_NODES_CHOICE', `nodes must be keep, delete or state:<state> (${NODE_STATES.join(', ')})`);
}

export interface DeleteOutcome {
  /** Nodes only this manager held, and what became of them. */
  nodes: number;
  choice: NodesChoice['kind'] | 'none';
  /** Terminated nodes a state choice could not move (terminated is final). */
  skipped: string[];
}

/**
 * Delete a manager. Nodes another manager also holds just lose this link. For the nodes only
 * this manager holds, the admin must choose; without a choice (and with such nodes) nothing is
 * deleted and ERR_MANAGER_NODES_CHOICE says how many wait — never a silent reassignment.
 */
/** `nodes`: the node registry the exclusive nodes' deletion or state change goes through (its effects follow). */
export async function deleteManager(store: Store, nodes: NodeRegistry, id: string, choice: NodesChoice | null, at: Date, actor: Actor): Promise<DeleteOutcome> {
  const manager = await store.managers.getManager(id);
  if (!manager) throw capstanError('ERR_MANAGER_UNKNOWN', `manager ${id} is unknown`);
  const exclusive = await store.managers.exclusiveNodes(id);
  if (exclusive.length > 0 && choice === null) {
    throw capstanError('ERR_MANAGER_NODES_CHOICE', `manager ${id} alone holds ${exclusive.length} node(s): choose ?nodes=keep, ?nodes=delete or ?nodes=state:<state>`,
      { details: { nodes: exclusive.length } });
  }
  const when = at.toISOString();
  const skipped: string[] = [];
  if (choice?.kind === 'delete') {
    for (const n of exclusive) {
      await nodes.remove(n, actor, { at: when }).catch((err: { code?: string }) => {
        if (err.code !== 'ERR_NODE_UNKNOWN') throw err;
      });
    }
  } else if (choice?.kind === 'state') {
    for (const n of exclusive) {
      try {
        await nodes.setState(n, choice.state, actor, { at: when, why: `manager ${id} deleted` });
      } catch (err) {
        if ((err as { code?: string }).code !== 'ERR_NODE_TERMINATED') throw err;
        skipped.push(n);
      }
    }
  }
  await store.managers.deleteManager(id);
  return { nodes: exclusive.length, choice: exclusive.length === 0 ? 'none' : choice!.kind, skipped };
}
