/**
 * The door for what bootstrap jobs need from an admin: SSH credentials (sealed with this
 * server's identity secret before they are stored) and the host keys pinned on first use. Each
 * change is recorded in the audit log; a credential's secrets never are.
 */
import { capstanError } from '@capstan/shared/errors';
import type { CredentialRecord, Store } from '../store/store.js';
import type { Actor } from '../audit/actor.js';
import type { AuditLog } from '../audit/log.js';
import type { KeySealer } from '../identity/seal.js';
import { parseCredentialRequest, sealCredential } from './credentials.js';

export class CredentialService {
  private readonly now: () => Date;

  constructor(private readonly deps: { store: Store; sealer: KeySealer; audit?: AuditLog; now?: () => Date }) {
    this.now = deps.now ?? (() => new Date());
  }

  /** A credential from its request body (checked here): the metadata, never a secret, is answered. */
  async create(body: unknown, actor: Actor): Promise<CredentialRecord> {
    const request = parseCredentialRequest(body);
    const created = await this.deps.store.bootstrap.createCredential(await sealCredential(request, this.deps.sealer, this.now()));
    await this.deps.audit?.record(actor, { action: 'credential.create', target: created.id, before: null, after: created });
    return created;
  }

  async delete(id: string, actor: Actor): Promise<void> {
    const before = (await this.deps.store.bootstrap.listCredentials()).find((c) => c.id === id) ?? null;
    if (!(await this.deps.store.bootstrap.deleteCredential(id))) throw capstanError('ERR_CREDENTIAL_UNKNOWN', `credential ${id} is unknown`);
    await this.deps.audit?.record(actor, { action: 'credential.delete', target: id, before, after: null });
  }

  /** Clear a node's pinned host key (after a legitimate key change). */
  async clearHostKey(nodeId: string, actor: Actor): Promise<void> {
    const before = await this.deps.store.bootstrap.getHostKey(nodeId);
    if (!(await this.deps.store.bootstrap.clearHostKey(nodeId))) throw capstanError('ERR_NOT_FOUND', `no host key is pinned for node ${nodeId}`);
    await this.deps.audit?.record(actor, { action: 'node.host_key.clear', target: nodeId, before, after: null });
  }
}
