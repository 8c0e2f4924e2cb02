/**
 * The one door for node changes made by people and programs (not by ingestion, which has its own
 * rules): accept, refuse, create, patch, set-state, remove and record-contact. Each applies its
 * rule through one store call, then announces a NodeChanged to the listeners, which carry out
 * what follows from it (nodeEffects below: the policy regenerated, a demoted relay's tokens
 * renewed, its remote-run link ended). The admin API, the command line, relay contacts and
 * providers all come through here, so a change has the same effects whoever makes it.
 */
import { capstanError } from '@capstan/shared/errors';
import type { Logger } from '@capstan/shared/log';
import type { NodeCreate, NodePatch, NodeRecord, Store } from '../store/store.js';

export type NodeChangeKind = 'accept' | 'refuse' | 'create' | 'patch' | 'state' | 'properties' | 'remove' | 'contact';

export interface NodeChanged {
  kind: NodeChangeKind;
  id: string;
  /** The node before and after (null: did not exist / no longer exists). */
  before: NodeRecord | null;
  after: NodeRecord | null;
  at: string;
  cause: string;
}

export type NodeListener = (e: NodeChanged) => void | Promise<void>;

export interface NodeRegistryDeps {
  store: Store;
  log: Logger;
  now?: () => Date;
}

const unknown = (id: string) => capstanError('ERR_NODE_UNKNOWN', `node ${id} is unknown`);

export class NodeRegistry {
  private readonly listeners: NodeListener[] = [];
  private readonly now: () => Date;

  constructor(private readonly deps: NodeRegistryDeps) {
    this.now = deps.now ?? (() => new Date());
  }

  /** Listen to every change made through the registry (in the order they were added). */
  on(listener: NodeListener): this {
    this.listeners.push(listener);
    return this;
  }

  /** Accept a pending or refused node, pinning its certificate (`fingerprint` with two). */
  async accept(id: string, opts: { fingerprint?: string; cause?: string } = {}): Promise<NodeRecord> {
    const before = await this.deps.store.getNode(id);
    if (!before) throw unknown(id);
    if (!before.certificate) throw capstanError('ERR_CERTIFICATE', `node ${id} has sent no certificate yet`);
    return this.change('accept', before, { kind: 'acceptance', accepted: 'accepted', ...(opts.fingerprint !== undefined && { fingerprint: opts.fingerprint }) }, opts.cause);
  }

  async refuse(id: string, opts: { cause?: string } = {}): Promise<NodeRecord> {
    return this.change('refuse', await this.mustGet(id), { kind: 'acceptance', accepted: 'refused' }, opts.cause);
  }

  async create(input: NodeCreate, opts: { cause?: string } = {}): Promise<NodeRecord> {
    const after = await this.deps.store.createNode(input);
    await this.emit({ kind: 'create', id: after.id, before: null, after, at: after.created_at, cause: opts.cause ?? 'admin' });
    return after;
  }

  async patch(id: string, patch: NodePatch, opts: { cause?: string } = {}): Promise<NodeRecord> {
    return this.change('patch', await this.mustGet(id), { kind: 'patch', patch }, opts.cause);
  }

  async setState(id: string, state: string, opts: { cause?: string; at?: string } = {}): Promise<NodeRecord> {
    return this.change('state', await this.mustGet(id), { kind: 'state', state }, opts.cause, opts.at);
  }

  /** Replace the node's properties (they may move it in or out of groups). */
  async setProperties(id: string, properties: Parameters<Store['setProperties']>[1], opts: { cause?: string } = {}): Promise<NonNullable<Awaited<ReturnType<Store['setProperties']>>>> {
    const node = await this.mustGet(id);
    const props = await this.deps.store.setProperties(id, properties);
    if (props === null) throw unknown(id);
    await this.emit({ kind: 'properties', id, before: node, after: node, at: this.now().toISOString(), cause: opts.cause ?? 'admin' });
    return props;
  }

  /** Delete the node with its runs and history, revoking its certificate. */
  async remove(id: string, opts: { cause?: string; at?: string } = {}): Promise<void> {
    const before = await this.mustGet(id);
    const at = opts.at ?? this.now().toISOString();
    if (!(await this.deps.store.deleteNode(id, at))) throw unknown(id);
    await this.emit({ kind: 'remove', id, before, after: null, at, cause: opts.cause ?? 'admin' });
  }

  /** A contact that is neither an inventory nor a run (a relay's); null when the node is unknown. */
  async recordContact(id: string, at: string, cause = 'contact'): Promise<NodeRecord | null> {
    const before = await this.deps.store.getNode(id);
    if (!before) return null;
    const after = await this.deps.store.changeNode(id, { kind: 'contact' }, at, cause);
    if (after && after !== before && (after.state !== before.state || after.status !== before.status)) {
      await this.emit({ kind: 'contact', id, before, after, at, cause });
    }
    return after;
  }

  private async mustGet(id: string): Promise<NodeRecord> {
    const n = await this.deps.store.getNode(id);
    if (!n) throw unknown(id);
    return n;
  }

  private async change(kind: NodeChangeKind, before: NodeRecord, change: Parameters<Store['changeNode']>[1], cause = 'admin', atGiven?: string): Promise<NodeRecord> {
    const at = atGiven ?? this.now().toISOString();
    const after = await this.deps.store.changeNode(before.id, change, at, cause);
    // Deleted between the read and the change.
    if (!after) throw unknown(before.id);
    await this.emit({ kind, id: after.id, before, after, at, cause });
    return after;
  }

  /** Listeners run in turn; one failing is logged and does not undo the change or stop the others. */
  private async emit(e: NodeChanged): Promise<void> {
    for (const l of this.listeners) {
      try {
        await l(e);
      } catch (err) {
        this.deps.log.warn({ err, nodeId: e.id, change: e.kind }, 'node change effect failed');
      }
    }
  }
}

/** What the effects need; each absent one is skipped (the command line has no relay links). */
export interface NodeEffectDeps {
  store: Store;
  /** Policy regeneration (PolicyGenerator.touch). */
  touch?: (nodeId: string) => void;
  /** The remote-run links relays hold: ended when the relay may no longer hold one. */
  links?: { get(id: string): unknown; end(id: string, reason: string): void };
  now?: () => Date;
}

/**
 * The effects of a node change:
 * - its policy is regenerated (acceptance, tags, groups, state… may move it in or out of groups),
 *   except for a contact that changed neither state nor status in a way groups read;
 * - a relay no longer a relay has its tokens refused from now on (a forced renewal): its next
 *   token carries no relay role;
 * - a relay that is no longer an accepted relay (refused, demoted, deleted) has its link ended.
 */
export function nodeEffects(deps: NodeEffectDeps): NodeListener {
  const now = deps.now ?? (() => new Date());
  return async (e) => {
    deps.touch?.(e.id);
    if (e.before?.relay && e.after && !e.after.relay) {
      await deps.store.identity.forceRenewal([e.id], Math.floor(now().getTime() / 1000) + 1);
    }
    if (deps.links?.get(e.id) && (!e.after || e.after.accepted !== 'accepted' || !e.after.relay)) deps.links.end(e.id, 'token_revoked');
  };
}
