/**
 * What each registry write does to a node, as pure functions over NodeRecord. Both backends read
 * the row inside a transaction (Postgres: FOR UPDATE), call one of these and write the result,
 * so the lifecycle rules live in one place and the shared test suite checks them once.
 *
 * The node-manager model (Chef Automate's, as DESIGN.md takes it): `state` is what the node's
 * source says (running, stopped, terminated, missing…; `terminated` is final), `status` is
 * reachability (unknown until first contact, reachable while it sends, unreachable when it has
 * missed its runs or its state is not running/unknown).
 */
import { capstanError } from '@capstan/shared/errors';
import type { Acceptance, HistoryInsert, NodeChange, NodeCreate, NodePatch, NodeRecord, NodeStatus, NodeUpsertFromInventory } from '../store/store.js';
import type { NodeRules } from '../store/rules.js';
import { parseRfc3339, toUtcIso } from '../store/time.js';

/** The state a node starts in when nothing says otherwise: agent and manual nodes run. */
export const DEFAULT_STATE = 'running';
export const TERMINATED = 'terminated';
export const MISSING = 'missing';

/** States that let a node be reachable (DESIGN.md Lifecycle); any other forces `unreachable`. */
export const LIVE_STATES: readonly string[] = ['running', 'unknown'];
/**
 * Every state a node may be in: providers' (running, stopped, terminated), the sweep's
 * (missing), the default (unknown), and retired or decommissioned for nodes an admin retires.
 * What an admin or a manager's deletion sets must be one of them: a misspelt state would make a
 * node unreachable and match no filter.
 */
export const NODE_STATES: readonly string[] = ['running', 'stopped', 'terminated', 'missing', 'unknown', 'retired', 'decommissioned'];

/** States whose nodes are purged after the retention period. */
export const PURGEABLE_STATES: readonly string[] = [MISSING, TERMINATED];

const later = (a: string | null, b: string): string => (a === null || a < b ? b : a);

/**
 * Status after a contact (inventory or run). A contact makes a node reachable, except that a
 * node whose source says stopped/terminated/… stays `unreachable`: the state wins, so a late
 * run from a terminated instance cannot bring it back to life in the registry.
 */
export function statusAfterContact(state: string): NodeStatus {
  return LIVE_STATES.includes(state) ? 'reachable' : 'unreachable';
}

/**
 * A contact at `at` (server clock): a `missing` node is running again (it was only silent), and
 * the status follows the state.
 */
function contact(node: NodeRecord, at: string): NodeRecord {
  const next = { ...node, last_contact_at: later(node.last_contact_at, at) };
  if (node.state === MISSING) {
    next.state = DEFAULT_STATE;
    next.state_changed_at = at;
  }
  next.status = statusAfterContact(next.state);
  return next;
}

function blank(id: string, at: string): NodeRecord {
  return {
    id, hostname: '', name: '', address: null, manager: 'agent', region: null, source_id: null, account_id: null,
    tags: {}, groups: [], status: 'unknown', state: DEFAULT_STATE, accepted: 'pending', certificate: null,
    certificate_fingerprint: null, os_name: null, os_version: null, agent_version: null, policy_server: null,
    created_at: at, updated_at: at, accepted_at: null, last_inventory_at: null, last_run_at: null,
    last_config_id: null, last_contact_at: null, state_changed_at: at, policy_config_id: null, relay: false,
    conflict_certificate: null, conflict_fingerprint: null, conflict_at: null, clock_skew: null, clock_skew_at: null,
  };
}

/** Node time minus server time, in whole seconds (see NodeRecord.clock_skew). */
export function clockSkew(nodeTime: string, serverTime: string): number | null {
  const node = parseRfc3339(nodeTime);
  const server = parseRfc3339(serverTime);
  return node === undefined || server === undefined ? null : Math.round((node - server) / 1000);
}

function withSkew(node: NodeRecord, nodeTime: string | undefined, at: string): NodeRecord {
  const skew = nodeTime === undefined ? null : clockSkew(nodeTime, at);
  return skew === null ? node : { ...node, clock_skew: skew, clock_skew_at: at };
}

/**
 * First inventory of an unknown node: pending, with the certificate it carries (its signature
 * proved the sender holds that key), unless an auto-accept rule matched (`autoAccept`, already
 * checked against revoked certificates by the store). The inventory is a contact, so the status
 * is `reachable`: DESIGN.md reserves `unknown` for "never contacted".
 */
export function nodeFromInventory(inv: NodeUpsertFromInventory, autoAccept: boolean): NodeRecord {
  const at = toUtcIso(inv.received_at, 'received_at');
  const node: NodeRecord = {
    ...blank(inv.id, at),
    hostname: inv.hostname,
    name: inv.hostname,
    certificate: inv.certificate,
    certificate_fingerprint: inv.certificate_fingerprint,
    os_name: inv.os_name,
    os_version: inv.os_version,
    agent_version: inv.agent_version,
    policy_server: inv.policy_server,
    last_inventory_at: at,
    accepted: autoAccept ? 'accepted' : 'pending',
    accepted_at: autoAccept ? at : null,
  };
  return contact(withSkew(node, inv.sent_at, at), at);
}

/**
 * An inventory whose certificate is not the one a node not accepted yet holds: anyone who knows
 * the node id can sign an inventory with a key of their own, so it changes nothing but the
 * recorded conflict (no hostname, no contact, no stored document), which an admin settles when
 * accepting the node.
 */
export function isCertificateConflict(node: NodeRecord, inv: Pick<NodeUpsertFromInventory, 'certificate_fingerprint'>): boolean {
  return node.accepted !== 'accepted' && node.certificate_fingerprint !== null && node.certificate_fingerprint !== inv.certificate_fingerprint;
}

/**
 * A later inventory of a known node. The certificate of an accepted node is pinned: an
 * inventory carrying another one changes nothing about trust (that is what pinning is for;
 * re-keying goes through an admin). A pending or refused node keeps the first certificate it
 * sent, which is what accepting pins; another one is a conflict (isCertificateConflict). A
 * pending node may be accepted here by an auto-accept rule; a refused one never is.
 *
 * An inventory older than the one we hold (a back-filled queue, two servers racing) still proves
 * contact but does not roll the descriptive fields back.
 */
export function mergeInventory(node: NodeRecord, inv: NodeUpsertFromInventory, autoAccept: boolean): NodeRecord {
  const at = toUtcIso(inv.received_at, 'received_at');
  if (isCertificateConflict(node, inv)) {
    if (node.conflict_fingerprint === inv.certificate_fingerprint) return node;
    return {
      ...node, conflict_certificate: inv.certificate, conflict_fingerprint: inv.certificate_fingerprint, conflict_at: at, updated_at: later(node.updated_at, at),
    };
  }
  let next: NodeRecord = contact({ ...node, updated_at: later(node.updated_at, at) }, at);
  if (node.last_inventory_at === null || at >= node.last_inventory_at) {
    Object.assign(next, {
      hostname: inv.hostname,
      // The name follows the hostname until an admin gives the node another one.
      name: node.name === node.hostname ? inv.hostname : node.name,
      os_name: inv.os_name,
      os_version: inv.os_version,
      agent_version: inv.agent_version,
      policy_server: inv.policy_server,
      last_inventory_at: at,
    });
    next = withSkew(next, inv.sent_at, at);
    if (node.accepted !== 'accepted') {
      next.certificate = inv.certificate;
      next.certificate_fingerprint = inv.certificate_fingerprint;
    }
  }
  if (autoAccept && node.accepted === 'pending') next = withAcceptance(next, 'accepted', at);
  return next;
}

/** Manual creation by an admin: accepted at once (the admin vouches), never contacted yet. */
export function manualNode(n: NodeCreate, now: string): NodeRecord {
  return {
    ...blank(n.id, now),
    hostname: n.hostname,
    name: n.name ?? n.hostname,
    address: n.address ?? null,
    manager: n.manager ?? 'manual',
    region: n.region ?? null,
    source_id: n.source_id ?? null,
    account_id: n.account_id ?? null,
    tags: n.tags ?? {},
    groups: n.groups ?? [],
    state: n.state ?? DEFAULT_STATE,
    status: LIVE_STATES.includes(n.state ?? DEFAULT_STATE) ? 'unknown' : 'unreachable',
    accepted: 'accepted',
    certificate: n.certificate ?? null,
    certificate_fingerprint: n.certificate_fingerprint ?? null,
    accepted_at: now,
    relay: n.relay ?? false,
    policy_server: n.policy_server ?? null,
  };
}

/**
 * Acceptance changes. Accepting pins whatever certificate the node holds now (the row keeps it;
 * mergeInventory stops replacing it). accepted_at records when the current acceptance began, so
 * accepting an already accepted node keeps the original time, and leaving `accepted` clears it.
 */
export function withAcceptance(node: NodeRecord, accepted: Acceptance, atRaw: string, fingerprint?: string): NodeRecord {
  const at = toUtcIso(atRaw, 'at');
  if (accepted === 'accepted') node = chooseCertificate(node, fingerprint);
  if (node.accepted === accepted) return node;
  return {
    ...node,
    accepted,
    accepted_at: accepted === 'accepted' ? at : null,
    updated_at: later(node.updated_at, at),
  };
}

/**
 * A state change. `terminated` is final: any other state afterwards is ERR_NODE_TERMINATED.
 * Leaving the live states makes the node unreachable at once. Coming back does not prove
 * contact: a node never heard from returns to `unknown`, any other stays unreachable until its
 * next run or inventory says otherwise.
 */
export function withState(node: NodeRecord, state: string, atRaw: string): NodeRecord {
  const at = toUtcIso(atRaw, 'at');
  if (node.state === state) return node;
  if (node.state === TERMINATED) throw capstanError('ERR_NODE_TERMINATED', `node ${node.id} is terminated; that is final`);
  let status: NodeStatus = node.status;
  if (!LIVE_STATES.includes(state)) status = 'unreachable';
  else if (node.last_contact_at === null && node.last_run_at === null && node.last_inventory_at === null) status = 'unknown';
  return { ...node, state, status, state_changed_at: at, updated_at: later(node.updated_at, at) };
}

/** An admin's edit: the state by its rule, the rest replaced as given. */
export function withPatch(node: NodeRecord, patch: NodePatch, atRaw: string): NodeRecord {
  const at = toUtcIso(atRaw, 'at');
  let next = patch.state !== undefined ? withState(node, patch.state, at) : node;
  const fields: Partial<NodeRecord> = {};
  if (patch.name !== undefined) fields.name = patch.name;
  if (patch.address !== undefined) fields.address = patch.address;
  if (patch.region !== undefined && patch.region !== node.region) {
    // The region is part of a cloud node's identity, which belongs to its provider.
    if (node.source_id !== null) throw capstanError('ERR_CONFLICT', `node ${node.id} has a cloud identity; its region comes from its provider`);
    fields.region = patch.region;
  }
  if (patch.tags !== undefined) fields.tags = patch.tags;
  if (patch.groups !== undefined) fields.groups = patch.groups;
  if (patch.relay !== undefined) {
    // Its renewal request is checked against the pinned certificate: without one, no token ever.
    if (patch.relay && !node.certificate) throw capstanError('ERR_CERTIFICATE', `node ${node.id} has no certificate: a relay needs one`);
    fields.relay = patch.relay;
  }
  if (patch.policy_server !== undefined) fields.policy_server = patch.policy_server;
  const changed = Object.entries(fields).some(([k, v]) => JSON.stringify(v) !== JSON.stringify(next[k as keyof NodeRecord]));
  if (!changed) return next;
  next = { ...next, ...fields, updated_at: later(next.updated_at, at) };
  return next;
}

/**
 * A stored run: last run and config move forward only (a back-filled older run must not move
 * them back), and the run is a contact at the time it was received.
 */
/**
 * The only node fields afterRun changes: the stores write just these after a run (rewriting the
 * whole row made SQLite rewrite every index of nodes, once per ingested run log).
 */
export const AFTER_RUN_FIELDS = [
  'last_config_id', 'last_run_at', 'updated_at', 'last_contact_at', 'state', 'state_changed_at', 'status', 'clock_skew', 'clock_skew_at',
] as const;

/** The newest run is the node's clock sample (a back-filled older one left the node long ago). */
export function afterRun(node: NodeRecord, startedUtc: string, configId: string | null, receivedAt: string): NodeRecord {
  const newest = node.last_run_at === null || node.last_run_at <= startedUtc;
  const next = {
    ...node,
    last_config_id: newest ? configId : node.last_config_id,
    last_run_at: later(node.last_run_at, startedUtc),
    updated_at: later(node.updated_at, receivedAt),
  };
  return contact(newest ? withSkew(next, startedUtc, toUtcIso(receivedAt, 'received_at')) : next, receivedAt);
}

/**
 * A contact that is neither an inventory nor a run (a relay renewing its token, let in at a
 * relay-only endpoint, holding its remote-run link): the same rule as theirs. updated_at moves
 * only when the status or state changes, as the sweep's changes do; a contact older than the one
 * held changes nothing.
 */
export function afterContact(node: NodeRecord, atRaw: string): NodeRecord {
  const at = toUtcIso(atRaw, 'at');
  // Older than the contact held: the node has been heard from since, whatever the sweep did after.
  if (node.last_contact_at !== null && at < node.last_contact_at) return node;
  const next = contact(node, at);
  if (next.last_contact_at === node.last_contact_at && next.status === node.status && next.state === node.state) return node;
  if (next.status !== node.status || next.state !== node.state) next.updated_at = later(node.updated_at, at);
  return next;
}

export function applyChange(node: NodeRecord, change: NodeChange, at: string): NodeRecord {
  switch (change.kind) {
    case 'acceptance': return withAcceptance(node, change.accepted, at, change.fingerprint);
    case 'state': return withState(node, change.state, at);
    case 'patch': return withPatch(node, change.patch, at);
    case 'contact': return afterContact(node, at);
  }
}

/** `ab:CD…` or `AB CD…` → `abcd…`: fingerprints are compared as lowercase hex. */
const normalFingerprint = (fp: string) => fp.replace(/[\s:]/g, '').toLowerCase();

/**
 * The certificate accepting pins: with a conflict, the one whose fingerprint the admin names
 * (the other is dropped); without, the node's own, which a given fingerprint must match.
 */
function chooseCertificate(node: NodeRecord, fingerprint: string | undefined): NodeRecord {
  const fp = fingerprint === undefined ? undefined : normalFingerprint(fingerprint);
  if (node.conflict_fingerprint === null) {
    if (fp !== undefined && fp !== node.certificate_fingerprint) {
      throw capstanError('ERR_CERTIFICATE', `fingerprint ${fp} is not the certificate of node ${node.id} (${node.certificate_fingerprint ?? 'none'})`);
    }
    return node;
  }
  const both = [node.certificate_fingerprint, node.conflict_fingerprint];
  if (fp === undefined) {
    throw capstanError('ERR_CERTIFICATE_CONFLICT', `node ${node.id} sent two certificates (${both.join(', ')}): choose the fingerprint to pin`, {
      details: { fingerprints: both },
    });
  }
  const cleared = { conflict_certificate: null, conflict_fingerprint: null, conflict_at: null };
  if (fp === node.certificate_fingerprint) return { ...node, ...cleared };
  if (fp === node.conflict_fingerprint) return { ...node, certificate: node.conflict_certificate, certificate_fingerprint: fp, ...cleared };
  throw capstanError('ERR_CERTIFICATE', `fingerprint ${fp} is neither of the certificates of node ${node.id} (${both.join(', ')})`);
}

const TRACKED = ['accepted', 'state', 'status'] as const;

/**
 * The transitions between two versions of a node (before is null for a new one), each with its
 * cause; `causes` overrides the cause of one field (an auto-accept names its rule).
 */
export function transitions(
  before: NodeRecord | null,
  after: NodeRecord,
  atRaw: string,
  cause: string,
  causes: Partial<Record<(typeof TRACKED)[number], string>> = {},
): HistoryInsert[] {
  const at = toUtcIso(atRaw, 'at');
  const out: HistoryInsert[] = [];
  for (const field of TRACKED) {
    const from = before ? before[field] : null;
    if (from !== after[field]) out.push({ node_id: after.id, at, field, from, to: after[field], cause: causes[field] ?? cause });
  }
  // A certificate conflict: recorded (from the kept fingerprint to the other one), or settled
  // (from the dropped fingerprint to the chosen one).
  if (before && before.conflict_fingerprint !== after.conflict_fingerprint) {
    const chosen = after.certificate_fingerprint ?? '';
    const dropped = chosen === before.certificate_fingerprint ? before.conflict_fingerprint : before.certificate_fingerprint;
    out.push(after.conflict_fingerprint !== null
      ? { node_id: after.id, at, field: 'certificate', from: after.certificate_fingerprint, to: after.conflict_fingerprint, cause: `${cause}: another certificate for this node id (conflict)` }
      : { node_id: after.id, at, field: 'certificate', from: dropped, to: chosen, cause: `${cause}: certificate chosen` });
  }
  return out;
}

/** The history cause of an inventory's acceptance: the auto-accept rule, or why it did not apply. */
export function acceptCause(inv: NodeUpsertFromInventory, auto: boolean, revoked: boolean): { accepted?: string } {
  if (auto) return { accepted: inv.auto_accept! };
  if (revoked) return { accepted: 'inventory (certificate revoked by a deletion: not auto-accepted)' };
  return {};
}

/** What the store applies in its transactions (store/rules.ts). */
export const NODE_RULES: NodeRules = {
  liveStates: LIVE_STATES,
  missing: MISSING,
  purgeable: PURGEABLE_STATES,
  afterRunFields: AFTER_RUN_FIELDS,
  manualNode,
  nodeFromInventory,
  mergeInventory,
  isCertificateConflict,
  acceptCause,
  afterRun,
  applyChange,
  transitions,
};
