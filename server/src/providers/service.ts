/**
 * The door for managers (discovery sources): creating, changing and deleting them, and applying
 * their polls' outcomes, each recorded in the audit log with who acted. The nodes a poll or a
 * deletion moves go through the node registry (registry/nodes.ts), so they are recorded too.
 */
import { capstanError } from '@capstan/shared/errors';
import type { ManagerRecord, Store } from '../store/store.js';
import type { Actor } from '../audit/actor.js';
import type { AuditLog } from '../audit/log.js';
import type { NodeRegistry } from '../registry/nodes.js';
import { applyPoll, checkManager, deleteManager, specToStored, type DeleteOutcome, type NodesChoice, type PollSummary } from './managers.js';

export class ManagerService {
  private readonly now: () => Date;

  constructor(private readonly deps: { store: Store; nodes: NodeRegistry; audit?: AuditLog; now?: () => Date }) {
    this.now = deps.now ?? (() => new Date());
  }

  async create(body: unknown, actor: Actor): Promise<ManagerRecord> {
    const s = checkManager(body);
    await this.checkProvider(s.provider);
    const m = await this.deps.store.managers.createManager({ id: s.id, name: s.name, type: s.type, provider: s.provider, spec: specToStored(s) }, this.now().toISOString());
    await this.deps.audit?.record(actor, { action: 'manager.create', target: m.id, before: null, after: m });
    return m;
  }

  async update(id: string, body: unknown, actor: Actor): Promise<ManagerRecord> {
    const s = checkManager(body, id);
    const old = await this.mustGet(id);
    if (s.provider !== old.provider) await this.checkProvider(s.provider);
    if (old.type !== s.type) throw capstanError('ERR_CONFLICT', `manager ${old.id} is of type ${old.type}; a type never changes (create another manager)`);
    const m = await this.deps.store.managers.updateManager(s.id, { name: s.name, provider: s.provider, spec: specToStored(s) }, this.now().toISOString());
    if (!m) throw capstanError('ERR_MANAGER_UNKNOWN', `manager ${id} is unknown`);
    await this.deps.audit?.record(actor, { action: 'manager.update', target: id, before: old, after: m });
    return m;
  }

  /** Delete a manager, with the admin's choice for the nodes only it holds (providers/managers.ts). */
  async delete(id: string, choice: NodesChoice | null, actor: Actor): Promise<DeleteOutcome> {
    const before = await this.deps.store.managers.getManager(id);
    const out = await deleteManager(this.deps.store, this.deps.nodes, id, choice, this.now(), actor);
    await this.deps.audit?.record(actor, { action: 'manager.delete', target: id, before, after: null });
    return out;
  }

  /** A poll's outcome, from this server's poller or the relay hosting the manager (the actor). */
  poll(managerId: string, outcome: { instances: unknown[] } | { error: string }, actor: Actor, at = this.now()): Promise<PollSummary | null> {
    return applyPoll(this.deps.store, this.deps.nodes, managerId, outcome, at, actor);
  }

  private async mustGet(id: string): Promise<ManagerRecord> {
    const m = await this.deps.store.managers.getManager(id);
    if (!m) throw capstanError('ERR_MANAGER_UNKNOWN', `manager ${id} is unknown`);
    return m;
  }

  /** A manager hosted by a relay names one an admin registered (a typo would never be polled). */
  private async checkProvider(provider: string): Promise<void> {
    if (provider === 'server') return;
    const node = await this.deps.store.getNode(provider);
    if (!node?.relay) {
      throw capstanError('ERR_MANAGER_INVALID', `provider ${provider} is not a registered relay (register it with POST /api/1/nodes and "relay": true, or use "server")`, {
        details: { field: 'provider' },
      });
    }
  }
}
