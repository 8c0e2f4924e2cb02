/**
 * The events of changes made outside a store transaction that writes events itself: node changes
 * through the registry (a listener), admin actions (the audit log's records), and deployments
 * (the policy generator's). Runs and jobs write theirs inside their own transactions (rules.ts).
 */
import type { AuditInsert, EventInsert } from '../store/store.js';
import type { NodeChanged, NodeListener } from '../registry/nodes.js';
import { causeOf } from '../audit/actor.js';
import { event, MAX_LISTED } from './types.js';
import type { EventService } from './service.js';

/** The events one node change makes (none for most: an inventory refreshing a known node). */
export function nodeChangeEvents(e: NodeChanged): EventInsert[] {
  const out: EventInsert[] = [];
  const by = causeOf(e.actor);
  if (e.swept) {
    const n = e.swept.node;
    const data = { hostname: n.hostname ?? null, relay: n.policy_server ?? null, last_contact_at: n.last_contact_at ?? null };
    if (e.swept.step === 'unreachable') out.push(event('node.no_answer', 'warning', n.id, e.at, data));
    if (e.swept.step === 'missing') out.push(event('node.missing', 'warning', n.id, e.at, { ...data, state_was: n.before.state }));
    if (e.swept.step === 'purge') out.push(event('node.deleted', 'info', n.id, e.at, { ...data, by }));
    return out;
  }
  const { before, after } = e;
  if (!after) {
    if (before) out.push(event('node.deleted', 'info', before.id, e.at, { hostname: before.hostname, relay: before.policy_server, by }));
    return out;
  }
  const base = { hostname: after.hostname, relay: after.policy_server };
  if (after.accepted !== before?.accepted) {
    if (after.accepted === 'pending') out.push(event('node.pending', 'warning', after.id, e.at, { ...base, os: after.os_name, agent_version: after.agent_version }));
    if (after.accepted === 'accepted') out.push(event('node.accepted', 'info', after.id, e.at, { ...base, by }));
    if (after.accepted === 'refused') out.push(event('node.refused', 'info', after.id, e.at, { ...base, by }));
  }
  // A silent node heard from again through a contact or an inventory (a run's is in the run's transaction).
  if (before?.status === 'unreachable' && after.status === 'reachable') {
    out.push(event('node.answering', 'info', after.id, e.at, { ...base, silent_since: before.last_contact_at }));
  }
  return out;
}

export function nodeEvents(events: EventService): NodeListener {
  // The registry waits for its listeners: an inventory's events share their commit with the
  // other inventories' of the same turn (an enrolment wave).
  return (e) => events.emit(nodeChangeEvents(e), { grouped: e.kind === 'inventory' });
}

/** An admin's action, as the audit log records it (only admins': the others tell their own events). */
export function adminActionEvent(rec: AuditInsert): EventInsert | null {
  if (rec.actor_kind !== 'admin' || rec.status >= 400) return null;
  return event('admin.action', 'info', rec.target !== null && rec.action.startsWith('node.') ? rec.target : null, rec.at, {
    admin: rec.admin, role: rec.role, action: rec.action, target: rec.target, method: rec.method || null, path: rec.path || null,
  });
}

/** Nodes whose policy changed (a generation): one event, listing the first nodes. */
export function deployedEvent(nodes: readonly string[], at: string): EventInsert | null {
  if (nodes.length === 0) return null;
  return event('policy.deployed', 'info', nodes.length === 1 ? nodes[0]! : null, at, { nodes: nodes.length, node_ids: nodes.slice(0, MAX_LISTED) });
}

/**
 * Nodes whose policy could not be generated (a property conflict, a template error): one event,
 * the first node's problem named; only new or changed problems are told.
 */
export function policyFailedEvent(problems: ReadonlyArray<{ node_id: string; problem: { code: string; message: string } }>, at: string): EventInsert | null {
  if (problems.length === 0) return null;
  const first = problems[0]!;
  return event('policy.failed', 'error', problems.length === 1 ? first.node_id : null, at, {
    nodes: problems.length, node_ids: problems.slice(0, MAX_LISTED).map((p) => p.node_id), code: first.problem.code, message: first.problem.message,
  });
}
