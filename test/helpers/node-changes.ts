/**
 * The node changes by name, for tests that set a node up (or check a rule) on the store itself:
 * each is the store's one node update (`changeNode`) with a fixed kind, as the node registry
 * (server/src/registry/nodes.ts) calls it.
 */
import { silentLogger } from '@capstan/shared/log';
import type { Actor } from '@capstan/server/audit/actor';
import { AuditLog } from '@capstan/server/audit/log';
import { NodeRegistry } from '@capstan/server/registry/nodes';
import type { Acceptance, NodePatch, NodeRecord, Store } from '@capstan/server/store/index';

type Changes = Pick<Store, 'changeNode'>;

export function setAcceptance(store: Changes, id: string, accepted: Acceptance, at: string, cause = 'admin', fingerprint?: string): Promise<NodeRecord | null> {
  return store.changeNode(id, { kind: 'acceptance', accepted, ...(fingerprint !== undefined && { fingerprint }) }, at, cause);
}

export function setState(store: Changes, id: string, state: string, at: string, cause = 'admin'): Promise<NodeRecord | null> {
  return store.changeNode(id, { kind: 'state', state }, at, cause);
}

export function updateNode(store: Changes, id: string, patch: NodePatch, at: string, cause = 'admin'): Promise<NodeRecord | null> {
  return store.changeNode(id, { kind: 'patch', patch }, at, cause);
}

export function recordContact(store: Changes, id: string, at: string, cause = 'contact'): Promise<NodeRecord | null> {
  return store.changeNode(id, { kind: 'contact' }, at, cause);
}

/** The node registry on `store` (audited, no effects), for tests that ingest or sweep without a server. */
export function registryOn(store: Store): NodeRegistry {
  return new NodeRegistry({ store, log: silentLogger, audit: new AuditLog({ admins: store.admins, log: silentLogger }) });
}

/** An admin acting from a test, as the API makes one from a request's principal. */
export const TEST_ADMIN: Actor = { kind: 'admin', name: 'admin', role: 'admin' };
