/**
 * What each registry write does to a node, as pure functions over NodeRecord. Both backends read
 * the row inside a transaction (Postgres: FOR UPDATE), call one of these and write the result,
 * so the lifecycle rules live in one place and the shared test suite checks them once.
 */
import type { Acceptance, NodeRecord, NodeStatus, NodeUpsertFromInventory } from './store.js';
import { toUtcIso } from './time.js';

/** The state a node starts in when nothing says otherwise: agent and manual nodes run. */
export const DEFAULT_STATE = 'running';

/** States that let a node be reachable (DESIGN.md Lifecycle); any other forces `unreachable`. */
export const LIVE_STATES: readonly string[] = ['running', 'unknown'];

/**
 * Status after a contact (inventory or run). A contact makes a node reachable, except that a
 * node whose source says stopped/terminated/… stays `unreachable`: the state wins, so a late
 * run from a terminated instance cannot bring it back to life in the registry.
 */
export function statusAfterContact(state: string): NodeStatus {
  return LIVE_STATES.includes(state) ? 'reachable' : 'unreachable';
}

/**
 * First inventory of an unknown node: pending, with the certificate it carries (its signature
 * proved the sender holds that key). The inventory is a contact, so the status is `reachable`:
 * DESIGN.md reserves `unknown` for "never contacted".
 */
export function nodeFromInventory(inv: NodeUpsertFromInventory): NodeRecord {
  const at = toUtcIso(inv.received_at, 'received_at');
  return {
    id: inv.id,
    hostname: inv.hostname,
    status: 'reachable',
    state: DEFAULT_STATE,
    accepted: 'pending',
    certificate: inv.certificate,
    certificate_fingerprint: inv.certificate_fingerprint,
    os_name: inv.os_name,
    os_version: inv.os_version,
    agent_version: inv.agent_version,
    policy_server: inv.policy_server,
    created_at: at,
    updated_at: at,
    accepted_at: null,
    last_inventory_at: at,
    last_run_at: null,
    last_config_id: null,
  };
}

/**
 * A later inventory of a known node. Acceptance never changes here. The certificate of an
 * accepted node is pinned: an inventory carrying another one changes nothing about trust (that
 * is what pinning is for; re-keying goes through an admin). A pending or refused node is not
 * trusted yet, so it shows the newest certificate it has sent, which is what accepting pins.
 *
 * An inventory older than the one we hold (a back-filled queue, two servers racing) still proves
 * contact but does not roll the descriptive fields back.
 */
export function mergeInventory(node: NodeRecord, inv: NodeUpsertFromInventory): NodeRecord {
  const at = toUtcIso(inv.received_at, 'received_at');
  const next: NodeRecord = { ...node, status: statusAfterContact(node.state), updated_at: at };
  if (node.last_inventory_at !== null && at < node.last_inventory_at) return next;
  Object.assign(next, {
    hostname: inv.hostname,
    os_name: inv.os_name,
    os_version: inv.os_version,
    agent_version: inv.agent_version,
    policy_server: inv.policy_server,
    last_inventory_at: at,
  });
  if (node.accepted !== 'accepted') {
    next.certificate = inv.certificate;
    next.certificate_fingerprint = inv.certificate_fingerprint;
  }
  return next;
}

/** Manual creation by an admin: accepted at once (the admin vouches), never contacted yet. */
export function manualNode(
  n: { id: string; hostname: string; certificate?: string | null; certificate_fingerprint?: string | null; state?: string },
  now: string,
): NodeRecord {
  return {
    id: n.id,
    hostname: n.hostname,
    status: 'unknown',
    state: n.state ?? DEFAULT_STATE,
    accepted: 'accepted',
    certificate: n.certificate ?? null,
    certificate_fingerprint: n.certificate_fingerprint ?? null,
    os_name: null,
    os_version: null,
    agent_version: null,
    policy_server: null,
    created_at: now,
    updated_at: now,
    accepted_at: now,
    last_inventory_at: null,
    last_run_at: null,
    last_config_id: null,
  };
}

/**
 * Acceptance changes. Accepting pins whatever certificate the node holds now (the row keeps it;
 * mergeInventory stops replacing it). accepted_at records when the current acceptance began, so
 * accepting an already accepted node keeps the original time, and leaving `accepted` clears it.
 */
export function withAcceptance(node: NodeRecord, accepted: Acceptance, atRaw: string): NodeRecord {
  const at = toUtcIso(atRaw, 'at');
  if (node.accepted === accepted) return node;
  return {
    ...node,
    accepted,
    accepted_at: accepted === 'accepted' ? at : null,
    updated_at: at,
  };
}

/**
 * A state change. Leaving the live states makes the node unreachable at once. Coming back does
 * not prove contact: a node never heard from returns to `unknown`, any other stays unreachable
 * until its next run or inventory says otherwise.
 */
export function withState(node: NodeRecord, state: string, atRaw: string): NodeRecord {
  const at = toUtcIso(atRaw, 'at');
  if (node.state === state) return node;
  const contacted = node.last_run_at !== null || node.last_inventory_at !== null;
  let status: NodeStatus = node.status;
  if (!LIVE_STATES.includes(state)) status = 'unreachable';
  else if (!contacted) status = 'unknown';
  return { ...node, state, status, updated_at: at };
}
