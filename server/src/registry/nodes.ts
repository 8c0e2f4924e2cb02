/**
 * The one door for node changes, whoever makes them: admins (the API, the command line), nodes
 * (inventories), relays (their contacts), and the server itself (discovery polls, the lifecycle
 * sweep). Each applies its rule through one store call, records the change in the audit log with
 * who acted (audit/actor.ts) and the node before and after, then announces a NodeChanged to the
 * listeners, which carry out what follows (nodeEffects below: the policy regenerated, a demoted
 * relay's tokens renewed, its remote-run link ended). So a change has the same effects and the
 * same record whichever way it came.
 */
import { capstanError } from '@capstan/shared/errors';
import type { Logger } from '@capstan/shared/log';
import type { JsonValue } from '@capstan/shared/filter/properties';
import { EMPTY_LEVEL, levelView, parseNodeLevel, type LevelView } from './node-properties.js';
import type { CloudIdentity, NodePropertyLevel, DiscoveredInstance, DiscoverySummary, NodeChange, NodeCreate, NodePatch, NodeRecord, NodeUpsertFromInventory, Store, SweptNode } from '../store/store.js';
import { causeOf, type Actor } from '../audit/actor.js';
import type { AuditLog } from '../audit/log.js';

export type NodeChangeKind = 'accept' | 'refuse' | 'create' | 'patch' | 'state' | 'properties' | 'remove' | 'contact' | 'inventory' | 'discovery' | 'sweep';

export interface NodeChanged {
  kind: NodeChangeKind;
  id: string;
  /** The node before and after (null: did not exist / no longer exists, or not read: a sweep's bulk step). */
  before: NodeRecord | null;
  after: NodeRecord | null;
  at: string;
  actor: Actor;
  /** A sweep's step: which, and what the store said of the node it moved. */
  swept?: { step: 'unreachable' | 'missing' | 'purge'; node: SweptNode };
}

export type NodeListener = (e: NodeChanged) => void | Promise<void>;

export interface NodeRegistryDeps {
  store: Store;
  log: Logger;
  /** Where every change is recorded; absent in tests of the rules alone. */
  audit?: AuditLog;
  now?: () => Date;
}

const unknown = (id: string) => capstanError('ERR_NODE_UNKNOWN', `node ${id} is unknown`);

/** What the audit log keeps of a node: everything but the certificates' text (their fingerprints stay). */
export function nodeAuditView(n: NodeRecord | null): Record<string, unknown> | null {
  if (!n) return null;
  const { certificate: _c, conflict_certificate: _cc, ...rest } = n;
  return rest;
}

/** A sweep's step as audit state: the fields it moved. */
const sweptState = (s: SweptNode['before']) => ({ state: s.state, status: s.status });

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
  async accept(id: string, actor: Actor, opts: { fingerprint?: string } = {}): Promise<NodeRecord> {
    const before = await this.deps.store.getNode(id);
    if (!before) throw unknown(id);
    if (!before.certificate) throw capstanError('ERR_CERTIFICATE', `node ${id} has sent no certificate yet`);
    return this.change('accept', before, { kind: 'acceptance', accepted: 'accepted', ...(opts.fingerprint !== undefined && { fingerprint: opts.fingerprint }) }, actor);
  }

  async refuse(id: string, actor: Actor): Promise<NodeRecord> {
    return this.change('refuse', await this.mustGet(id), { kind: 'acceptance', accepted: 'refused' }, actor);
  }

  async create(input: NodeCreate, actor: Actor): Promise<NodeRecord> {
    const after = await this.deps.store.createNode(input);
    await this.done('create', 'node.create', null, after, after.created_at, actor);
    return after;
  }

  async patch(id: string, patch: NodePatch, actor: Actor): Promise<NodeRecord> {
    return this.change('patch', await this.mustGet(id), { kind: 'patch', patch }, actor);
  }

  async setState(id: string, state: string, actor: Actor, opts: { at?: string; why?: string } = {}): Promise<NodeRecord> {
    return this.change('state', await this.mustGet(id), { kind: 'state', state }, actor, opts.at, opts.why);
  }

  /**
   * Replace the node's plain properties (they may move it in or out of groups); its secret ones
   * stay, but for those `properties` names (then plain).
   */
  async setProperties(id: string, properties: Record<string, JsonValue>, actor: Actor): Promise<Record<string, JsonValue>> {
    return (await this.writeLevel(id, actor, () => this.deps.store.setProperties(id, properties))).properties;
  }

  /**
   * Replace the node's own properties, plain and secret, as the level form gives them
   * (node-properties.ts: a secret given as `{"secret": true}` keeps its value). Returns them as
   * they may be shown.
   */
  async setOwnProperties(id: string, level: unknown, actor: Actor, field = 'properties'): Promise<LevelView> {
    return levelView(await this.writeLevel(id, actor, (stored) => {
      const next = parseNodeLevel(level, stored, field, id);
      return this.deps.store.setProperties(id, next.properties, next.secrets);
    }));
  }

  /** The node's own properties as they may be shown (secrets without their values). */
  async ownProperties(id: string): Promise<LevelView> {
    const level = await this.deps.store.getNodeLevel(id);
    if (!level) throw unknown(id);
    return levelView(level);
  }

  /** One write of a node's properties, audited without any secret's value, and announced. */
  private async writeLevel(id: string, actor: Actor, write: (stored: NodePropertyLevel) => Promise<unknown>): Promise<NodePropertyLevel> {
    const node = await this.mustGet(id);
    const before = await this.deps.store.getNodeLevel(id);
    if (before === null || (await write(before)) === null) throw unknown(id);
    const after = (await this.deps.store.getNodeLevel(id)) ?? EMPTY_LEVEL;
    const at = this.now().toISOString();
    await this.deps.audit?.record(actor, { action: 'node.properties.update', target: id, before: levelView(before), after: levelView(after) });
    await this.emit({ kind: 'properties', id, before: node, after: node, at, actor });
    return after;
  }

  /** Delete the node with its runs and history, revoking its certificate. */
  async remove(id: string, actor: Actor, opts: { at?: string } = {}): Promise<void> {
    const before = await this.mustGet(id);
    const at = opts.at ?? this.now().toISOString();
    if (!(await this.deps.store.deleteNode(id, at))) throw unknown(id);
    await this.done('remove', 'node.delete', before, null, at, actor);
  }

  /**
   * A contact that is neither an inventory nor a run (a relay's); null when the node is unknown.
   * Recorded (audit, listeners) only when it moved the node's state or status.
   */
  async recordContact(id: string, at: string, actor: Actor, why = 'contact'): Promise<NodeRecord | null> {
    const before = await this.deps.store.getNode(id);
    if (!before) return null;
    const after = await this.deps.store.changeNode(id, { kind: 'contact' }, at, causeOf(actor, why));
    if (after && after !== before && (after.state !== before.state || after.status !== before.status)) {
      await this.done('contact', 'node.contact', before, after, at, actor);
    }
    return after;
  }

  /**
   * A node's inventory (ingest): registers a newcomer (pending, or accepted by an auto-accept
   * rule) or refreshes a known node. Every inventory may move the node in or out of dynamic
   * groups, so the listeners hear of each; the audit log records those that registered the node
   * or changed its acceptance, state, status or certificate.
   */
  async recordInventory(inv: NodeUpsertFromInventory, actor: Actor): Promise<NodeRecord> {
    const before = await this.deps.store.getNode(inv.id);
    const after = await this.deps.store.upsertFromInventory(inv);
    const moved = !before || before.accepted !== after.accepted || before.state !== after.state || before.status !== after.status
      || before.conflict_fingerprint !== after.conflict_fingerprint;
    // The audit record and the listeners' writes (the events) are asked for in the same turn and
    // awaited: one commit can hold them, and those of the other inventories of that turn.
    await Promise.all([
      moved ? this.deps.audit?.record(actor, { action: before ? 'node.inventory' : 'node.register', target: inv.id, before: nodeAuditView(before), after: nodeAuditView(after) }, { grouped: true }) : undefined,
      this.emit({ kind: 'inventory', id: after.id, before, after, at: inv.received_at, actor }),
    ]);
    return after;
  }

  /** An agent enrolling on a discovered instance takes over its row (see ManagerStore.adoptDiscovered). */
  async adoptDiscovered(nodeId: string, identity: CloudIdentity, at: string, actor: Actor): Promise<boolean> {
    const adopted = await this.deps.store.managers.adoptDiscovered(nodeId, identity, at);
    if (adopted) {
      const after = await this.deps.store.getNode(nodeId);
      await this.done('discovery', 'node.adopt', null, after, at, actor);
    }
    return adopted;
  }

  /**
   * A claim an admin confirmed (providers/claims.ts): the node takes over the discovered row with
   * this identity (ManagerStore.joinDiscovered); false when there is none to take over.
   */
  async joinDiscovered(nodeId: string, identity: CloudIdentity, discoveredId: string, actor: Actor): Promise<NodeRecord | null> {
    const before = await this.mustGet(nodeId);
    const at = this.now().toISOString();
    if (!(await this.deps.store.managers.joinDiscovered(nodeId, identity, at, `claim confirmed by ${actor.name}: joined discovered node ${discoveredId}`))) return null;
    const after = await this.mustGet(nodeId);
    await this.done('discovery', 'node.claim.confirm', before, after, at, actor);
    return after;
  }

  /** A discovery poll's instances, applied to the manager's nodes; each node it moved is recorded. */
  async applyDiscovery(managerId: string, instances: DiscoveredInstance[], at: string, actor: Actor): Promise<DiscoverySummary> {
    const summary = await this.deps.store.managers.applyDiscovery(managerId, instances, at);
    for (const c of summary.changed) {
      await this.done('discovery', `node.discovery.${c.change}`, c.before, c.after, at, actor);
    }
    return summary;
  }

  /**
   * One step of the lifecycle sweep (markUnreachable, markMissing, purgeNodes): the store moves a
   * batch of nodes in one statement and says which; each is recorded and announced.
   */
  async sweepStep(step: 'unreachable' | 'missing' | 'purge', run: () => Promise<SweptNode[]>, at: string, actor: Actor): Promise<number> {
    const moved = await run();
    for (const n of moved) {
      await this.deps.audit?.record(actor, { action: `node.sweep.${step}`, target: n.id, before: sweptState(n.before), after: n.after && sweptState(n.after) });
      await this.emit({ kind: 'sweep', id: n.id, before: null, after: null, at, actor, swept: { step, node: n } });
    }
    return moved.length;
  }

  /** The clock skew seen on an upload refused for it (a run from the future); false when unknown. */
  recordClockSkew(id: string, skewSeconds: number, at: string): Promise<boolean> {
    return this.deps.store.recordClockSkew(id, skewSeconds, at);
  }

  private async mustGet(id: string): Promise<NodeRecord> {
    const n = await this.deps.store.getNode(id);
    if (!n) throw unknown(id);
    return n;
  }

  private async change(kind: NodeChangeKind, before: NodeRecord, change: NodeChange, actor: Actor, atGiven?: string, why?: string): Promise<NodeRecord> {
    const at = atGiven ?? this.now().toISOString();
    const after = await this.deps.store.changeNode(before.id, change, at, causeOf(actor, why));
    // Deleted between the read and the change.
    if (!after) throw unknown(before.id);
    const action = kind === 'patch' ? 'node.update' : `node.${kind}`;
    await this.done(kind, action, before, after, at, actor);
    return after;
  }

  /** Record a change in the audit log, then tell the listeners. */
  private async done(kind: NodeChangeKind, action: string, before: NodeRecord | null, after: NodeRecord | null, at: string, actor: Actor): Promise<void> {
    const id = (after ?? before)!.id;
    await this.deps.audit?.record(actor, { action, target: id, before: nodeAuditView(before), after: nodeAuditView(after) });
    await this.emit({ kind, id, before, after, at, actor });
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

/** What the effects need; each absent one is skipped (capstan-server's admin verbs hold no relay links). */
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
 * - its policy is regenerated (acceptance, tags, groups, state, an inventory's facts… may move it
 *   in or out of groups);
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
    if (deps.links?.get(e.id) && e.kind !== 'sweep' && (!e.after || e.after.accepted !== 'accepted' || !e.after.relay)) deps.links.end(e.id, 'token_revoked');
  };
}
