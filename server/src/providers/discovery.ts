/**
 * What a provider's poll does to nodes, as pure functions (like ../registry/rules.ts), so both backends apply
 * the same lifecycle: the cloud's state is the node's state (`terminated` is final, `stopped`
 * makes it unreachable), a held node the poll no longer sees is `missing`.
 */
import { randomUUID } from 'node:crypto';
import { capstanError } from '@capstan/shared/errors';
import type { DiscoveredInstance, ManagerRecord, NodeRecord } from '../store/store.js';
import type { DiscoveryRules } from '../store/rules.js';
import { MAX_TAGS } from '../store/input.js';
import { toUtcIso } from '../store/time.js';
import { manualNode, MISSING, TERMINATED, withState } from '../registry/rules.js';

const TAG_KEY = /^[^=\u0000-\u001f\u007f]{1,128}$/;
const NO_CONTROL = /^[^\u0000-\u001f\u007f]{0,256}$/;

/** Cloud tags as node tags: keys the registry cannot hold (`=`, control characters) are dropped. */
export function cloudTags(tags: Record<string, string>): Record<string, string> {
  const kept = Object.entries(tags).filter(([k, v]) => TAG_KEY.test(k) && typeof v === 'string' && NO_CONTROL.test(v));
  return Object.fromEntries(kept.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).slice(0, MAX_TAGS));
}

const text = (v: unknown, field: string, max = 255): string => {
  if (typeof v !== 'string' || v.length === 0 || v.length > max || !NO_CONTROL.test(v)) {
    throw capstanError('ERR_BAD_REQUEST', `discovered instance: ${field} must be 1 to ${max} characters without control characters`);
  }
  return v;
};

/** Check one instance as received (from a relay, it is input like any other). */
export function checkInstance(raw: unknown): DiscoveredInstance {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw capstanError('ERR_BAD_REQUEST', 'discovered instance must be an object');
  const i = raw as Record<string, unknown>;
  const state = i.state;
  if (state !== 'running' && state !== 'stopped' && state !== 'terminated') {
    throw capstanError('ERR_BAD_REQUEST', 'discovered instance: state must be running, stopped or terminated');
  }
  const tags = i.tags ?? {};
  if (typeof tags !== 'object' || Array.isArray(tags) || tags === null) throw capstanError('ERR_BAD_REQUEST', 'discovered instance: tags must be an object');
  return {
    source_id: text(i.source_id, 'source_id'),
    region: text(i.region, 'region'),
    account_id: text(i.account_id, 'account_id'),
    hostname: text(i.hostname, 'hostname', 253),
    ...(i.name !== undefined && { name: text(i.name, 'name') }),
    address: i.address === null || i.address === undefined ? null : text(i.address, 'address'),
    state,
    tags: cloudTags(tags as Record<string, string>),
  };
}

/** A newly discovered instance: accepted (the admin's cloud account vouches for it), no agent yet. */
export function discoveredNode(inst: DiscoveredInstance, manager: ManagerRecord, atRaw: string): NodeRecord {
  const at = toUtcIso(atRaw, 'at');
  return manualNode({
    id: randomUUID(),
    hostname: inst.hostname,
    name: inst.name ?? inst.hostname,
    address: inst.address,
    manager: manager.id,
    region: inst.region,
    source_id: inst.source_id,
    account_id: inst.account_id,
    tags: cloudTags(inst.tags),
    state: inst.state,
  }, at);
}

/**
 * A known node seen again. `terminated` is final: a terminated node stays so whatever the cloud
 * says (an instance id is never reused). Cloud tags overwrite the same keys, other tags stay.
 */
export function rediscovered(node: NodeRecord, inst: DiscoveredInstance, atRaw: string): NodeRecord {
  const at = toUtcIso(atRaw, 'at');
  let next = node.state === TERMINATED ? node : withState(node, inst.state, at);
  const tags = { ...next.tags, ...cloudTags(inst.tags) };
  const fields: Partial<NodeRecord> = {};
  if (JSON.stringify(cloudTags(tags)) !== JSON.stringify(next.tags)) fields.tags = cloudTags(tags);
  if (inst.address !== null && inst.address !== next.address) fields.address = inst.address;
  if (Object.keys(fields).length > 0) next = { ...next, ...fields, updated_at: next.updated_at < at ? at : next.updated_at };
  return next;
}

/** A held node the poll did not see. */
export function disappeared(node: NodeRecord, atRaw: string): NodeRecord {
  if (node.state === TERMINATED || node.state === MISSING) return node;
  return withState(node, MISSING, atRaw);
}

/**
 * The discovered row an agent takes over: it gets the agent's id and goes back to `pending`
 * without a certificate, so the inventory that follows is handled as any newcomer's (pinning,
 * auto-accept rules). Claiming an instance id therefore grants nothing.
 */
export function adopted(node: NodeRecord, nodeId: string, atRaw: string): NodeRecord {
  const at = toUtcIso(atRaw, 'at');
  return { ...node, id: nodeId, accepted: 'pending', accepted_at: null, certificate: null, certificate_fingerprint: null, updated_at: at };
}

/** What the store applies when a poll's outcome is written (its transactions call these). */
export const DISCOVERY_RULES: DiscoveryRules = { discoveredNode, rediscovered, disappeared, adopted };
