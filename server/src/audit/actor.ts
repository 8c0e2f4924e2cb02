/**
 * Who acted: it travels with every call into the domain (registry, policy, jobs, providers,
 * identity, admins), so that the audit record each change leaves names the same actor whichever
 * door it came through — the admin API, the command line, a relay's contact, an inventory, a
 * discovery poll or the lifecycle sweep.
 */
import type { AdminRole } from '../store/store.js';
import type { AuditChange } from './log.js';

export type ActorKind = 'admin' | 'node' | 'relay' | 'system';

export interface Actor {
  kind: ActorKind;
  /** The admin's name, the node's or relay's id, or the part of the server that acted (`sweep`). */
  name: string;
  /** An admin's role. */
  role?: AdminRole;
  /** The HTTP request the change came with, for the record (method, path, client address). */
  request?: { method: string; path: string; address: string };
  /**
   * An HTTP request's changes, held until its answer is known: the API's audit hook writes them
   * with the answer's status (one record per change; one for the request when there is none).
   */
  pending?: AuditChange[];
}

/** A part of the server acting on its own (`sweep`, `discovery`, `inventory`, `enrollment`). */
export const systemActor = (name: string): Actor => ({ kind: 'system', name });

/** A node acting through what it sends (its inventory, its contacts). */
export const nodeActor = (id: string): Actor => ({ kind: 'node', name: id });

/** A relay acting through its own token (contacts, discovery it hosts). */
export const relayActor = (id: string): Actor => ({ kind: 'relay', name: id });

/**
 * The client address of the admin API's requests that `capstan-server`'s verbs make in process on
 * the server host (cli/in-process.ts): no socket's address is ever this, so it marks them.
 */
export const COMMAND_LINE_ADDRESS = 'local';

/** The words a node's history records as the cause of a change this actor made. */
export function causeOf(actor: Actor, what?: string): string {
  const cli = actor.request?.address === COMMAND_LINE_ADDRESS ? ' (command line)' : '';
  const who = actor.kind === 'admin' ? `admin ${actor.name}${cli}` : actor.kind === 'system' ? actor.name : `${actor.kind} ${actor.name}`;
  return what ? `${who}: ${what}` : who;
}
