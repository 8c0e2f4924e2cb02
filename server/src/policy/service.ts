/**
 * The door for policy changes: saving and deleting directives, groups, rules and techniques with
 * the rules that keep the model whole (a rule names only what exists, a static group only known
 * nodes, a directive only a saved technique's version with values that fit it, nothing is
 * deleted from under a rule or a directive, the built-in groups never change), the regeneration of
 * the nodes a change reaches, and the audit record of who changed what, before and after. The
 * admin API and policy as code (`capstan policy apply`) come through here alike.
 */
import { missingFacts, type FactWarning } from './fact-check.js';
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import type { Logger } from '@capstan/shared/log';
import type { PolicyKind, PolicyObjectRecord, Store } from '../store/store.js';
import type { Actor } from '../audit/actor.js';
import type { AuditLog } from '../audit/log.js';
import { MAX_FILTER_VALUES } from '../registry/filters.js';
import type { GenerationStats, PolicyGenerator } from './generate.js';
import type { Directive } from '@capstan/shared/policy/bundle';
import type { Technique } from '@capstan/shared/policy/technique';
import { BUILTIN_GROUP_IDS, BUILTIN_GROUPS, keepGroupSecrets, parseDirective, parseGroup, parseProperty, parseRule, parseTechniqueObject, withoutSecrets } from './model.js';
import { checkTechniqueUse, followTechnique, techniqueUsers } from './techniques.js';
import { parsePlanRequest, planPolicy, type Plan, type PlanRequest } from './plan.js';
import type { PolicyKeyring } from './key.js';
import { effectiveProperties, type EffectiveProperties } from './effective.js';
import type { PlanBounds } from './plan-memory.js';

export const POLICY_PLURAL: Record<PolicyKind, string> = { directive: 'directives', group: 'groups', rule: 'rules', technique: 'techniques', property: 'properties' };

const notFound = (kind: PolicyKind, id: string) => capstanError('ERR_NOT_FOUND', `${kind} ${id} does not exist`);

/** An object as the API shows it: its body and when it was last saved; built-in groups marked. */
export type PolicyView = Record<string, unknown>;

const view = (o: Pick<PolicyObjectRecord, 'body' | 'updated_at'>): PolicyView => ({ ...withoutSecrets(o.body), updated_at: o.updated_at });

/** Check a body as its kind's POST (or PUT, with the id of the path) would. */
export function parsePolicyObject(kind: PolicyKind, body: unknown, pathId?: string): Record<string, unknown> {
  const obj = kind === 'directive' ? parseDirective(body, pathId) : kind === 'group' ? parseGroup(body, pathId)
    : kind === 'technique' ? parseTechniqueObject(body, pathId) : kind === 'property' ? parseProperty(body, pathId) : parseRule(body, pathId);
  return obj as unknown as Record<string, unknown>;
}

export interface PolicyServiceDeps {
  store: Store;
  generator: PolicyGenerator;
  /** The policy signing key (absent on the command line, which signs nothing). */
  key?: PolicyKeyring;
  audit?: AuditLog;
  log: Logger;
  now?: () => Date;
  /**
   * Admin roles whose policy changes must go through a change request (`[policy] review_roles`):
   * their direct saves and deletes are refused (ERR_REVIEW_REQUIRED); a deployed change request
   * applies its objects as reviewed.
   */
  reviewRoles?: readonly string[];
}

/** How a change reaches the door: `reviewed` when a deployed change request applies it. */
export interface ChangeOptions {
  reviewed?: boolean;
}

export class PolicyService {
  private readonly now: () => Date;

  constructor(private readonly deps: PolicyServiceDeps) {
    this.now = deps.now ?? (() => new Date());
  }

  get generator(): PolicyGenerator {
    return this.deps.generator;
  }

  /** A node's effective properties, their origins and conflicts (policy/effective.ts); null: unknown node. */
  effective(nodeId: string): Promise<EffectiveProperties | null> {
    return effectiveProperties(this.deps.store, this.deps.generator, nodeId);
  }

  /** Every object of a kind; groups begin with the built-in ones. */
  async list(kind: PolicyKind): Promise<PolicyView[]> {
    const builtins = kind === 'group' ? BUILTIN_GROUPS.map((g) => ({ ...g, builtin: true })) : [];
    return [...builtins, ...(await this.deps.store.listPolicyObjects(kind)).map(view)];
  }

  async get(kind: PolicyKind, id: string): Promise<PolicyView> {
    if (kind === 'group' && BUILTIN_GROUP_IDS.has(id)) return { ...BUILTIN_GROUPS.find((g) => g.id === id)!, builtin: true };
    const o = await this.deps.store.getPolicyObject(kind, id);
    if (!o) throw notFound(kind, id);
    return view(o);
  }

  /**
   * A group body as an editor sends it back: a secret property it cannot read (the API shows
   * `{"secret": true}`, no value) given as `{"secret": true}` keeps the value the saved group
   * `id` has for it. ERR_PROPERTIES_INVALID naming `properties.<name>.value` when the saved group
   * has no secret of that name: a new secret comes with its value. Other bodies, as they are.
   */
  async withKeptSecrets(kind: PolicyKind, body: unknown, pathId?: string): Promise<unknown> {
    return kind === 'group' ? keepGroupSecrets(body, pathId, (id) => this.deps.store.getPolicyObject('group', id)) : body;
  }

  /** Whether this actor's direct changes must go through review (a change request). */
  reviewRequired(actor: Actor): boolean {
    return actor.kind === 'admin' && actor.role !== undefined && (this.deps.reviewRoles ?? []).includes(actor.role);
  }

  private checkReview(actor: Actor, opts: ChangeOptions, what: string): void {
    if (!opts.reviewed && this.reviewRequired(actor)) {
      throw capstanError('ERR_REVIEW_REQUIRED', `${actor.name} has role ${actor.role}, whose policy changes go through review: propose ${what} as a change request`);
    }
  }

  /**
   * Save a checked object (parsePolicyObject) and regenerate the nodes it reaches before
   * answering. `mustExist`: true to update only, false to create only, null for either.
   */
  async save(kind: PolicyKind, body: Record<string, unknown>, actor: Actor, mustExist: boolean | null, opts: ChangeOptions = {}): Promise<{
    object: PolicyView; created: boolean; regenerated: Pick<GenerationStats, 'nodes' | 'changed'>; warnings?: FactWarning[];
  }> {
    const id = body.id as string;
    this.checkReview(actor, opts, `${kind} ${id}`);
    const { store } = this.deps;
    let before: PolicyObjectRecord | null = null;
    const moved: Array<{ before: Directive; after: Directive }> = [];
    // The checks run inside the generator's queue, so a concurrent delete cannot slip between.
    const { result, stats } = await this.deps.generator.change(kind, id, async () => {
      if (kind === 'rule') await this.checkRefs(body as { directives: string[]; groups: string[] });
      if (kind === 'group') await this.checkGroupNodes(body as { nodes?: string[] });
      if (kind === 'directive') checkTechniqueUse(body as unknown as Directive, await this.techniqueOf(body as unknown as Directive));
      // A technique's directives are checked against it; those on another version follow it.
      const follow = kind === 'technique' ? followTechnique(body as unknown as Technique, techniqueUsers(await this.directives(), id)) : [];
      before = await store.getPolicyObject(kind, id);
      if (mustExist === false && before) throw capstanError('ERR_CONFLICT', `${kind} ${id} already exists`);
      if (mustExist === true && !before) throw notFound(kind, id);
      const at = this.now().toISOString();
      await store.putPolicyObject(kind, id, body, at);
      for (const d of follow) {
        const was = await store.getPolicyObject('directive', d.id);
        await store.putPolicyObject('directive', d.id, d as unknown as Record<string, unknown>, at);
        moved.push({ before: was!.body as unknown as Directive, after: d });
      }
      return store.getPolicyObject(kind, id);
    });
    const was = before as PolicyObjectRecord | null;
    // Audit records never hold a secret's value: only that it is one (and so, that it changed).
    await this.deps.audit?.record(actor, { action: `${kind}.${was ? 'update' : 'create'}`, target: id, before: withoutSecrets(was?.body ?? null), after: withoutSecrets(result!.body) });
    for (const m of moved) await this.deps.audit?.record(actor, { action: 'directive.update', target: m.after.id, before: m.before, after: m.after });
    const warnings = kind === 'directive' ? await this.factWarnings(result!.body as unknown as Directive) : [];
    return { object: view(result!), created: !was, regenerated: { nodes: stats.nodes, changed: stats.changed }, ...(warnings.length > 0 && { warnings }) };
  }

  /** A saved directive's condition reading a fact none of the nodes its rules reach has. */
  private async factWarnings(d: Directive): Promise<FactWarning[]> {
    if (!d.condition) return [];
    const groups = (await this.deps.store.listPolicyObjects('rule')).filter((r) => (r.body.directives as string[]).includes(d.id)).flatMap((r) => r.body.groups as string[]);
    return groups.length ? missingFacts(this.deps.store, d, [{ key: 'group', values: [...new Set(groups)] }]) : [];
  }

  async delete(kind: PolicyKind, id: string, actor: Actor, opts: ChangeOptions = {}): Promise<void> {
    this.checkReview(actor, opts, `deleting ${kind} ${id}`);
    if (kind === 'group' && BUILTIN_GROUP_IDS.has(id)) throw capstanError('ERR_CONFLICT', `${id} is a built-in group: it cannot be deleted`);
    const { store } = this.deps;
    let before: PolicyObjectRecord | null = null;
    const { result } = await this.deps.generator.change(kind, id, async () => {
      if (kind === 'technique') {
        const users = techniqueUsers(await this.directives(), id).map((d) => d.id);
        if (users.length) throw capstanError('ERR_CONFLICT', `technique ${id} is used by directives: ${users.join(', ')}`);
      } else if (kind === 'directive' || kind === 'group') {
        const rules = await this.referencedBy(kind, id);
        if (rules.length) throw capstanError('ERR_CONFLICT', `${kind} ${id} is used by rules: ${rules.join(', ')}`);
      }
      before = await store.getPolicyObject(kind, id);
      return store.deletePolicyObject(kind, id);
    });
    if (!result) throw notFound(kind, id);
    await this.deps.audit?.record(actor, { action: `${kind}.delete`, target: id, before: withoutSecrets((before as PolicyObjectRecord | null)?.body ?? null), after: null });
  }

  /**
   * What making the server match a desired set of objects would change, and for which nodes
   * (policy/plan.ts). Writes nothing; the static groups' nodes are checked as a save would.
   */
  async plan(body: unknown, maxNodes: number, bounds?: PlanBounds): Promise<Plan> {
    return this.planRequest(parsePlanRequest(body), maxNodes, bounds);
  }

  /** plan() of a request already parsed (a change request's). */
  async planRequest(plan: PlanRequest, maxNodes: number, bounds?: PlanBounds): Promise<Plan> {
    for (const [i, g] of plan.groups.entries()) {
      bounds?.check();
      try {
        await this.checkGroupNodes(g);
      } catch (err) {
        if (isCapstanError(err)) throw capstanError('ERR_BAD_REQUEST', `groups[${i}]: ${err.message}`, { details: { field: `groups[${i}].nodes` } });
        throw err;
      }
    }
    return planPolicy(this.deps.store, this.deps.generator, plan, maxNodes, bounds);
  }

  /**
   * A new active policy key, endorsed by the previous one. Bundles are signed when served, so the
   * next fetch of every node carries the new signature and the endorsement chain.
   */
  async rotateKey(actor: Actor): Promise<Awaited<ReturnType<PolicyKeyring['rotate']>>> {
    if (!this.deps.key) throw capstanError('ERR_CONFLICT', 'this process holds no policy key');
    const r = await this.deps.key.rotate();
    await this.deps.audit?.record(actor, { action: 'policy_key.rotate', target: r.key_id, before: { key_id: r.previous_key_id }, after: { key_id: r.key_id } });
    return r;
  }

  /** A rule may only name directives and groups that exist. */
  private async checkRefs(rule: { directives: string[]; groups: string[] }): Promise<void> {
    for (const [kind, ids] of [['directive', rule.directives], ['group', rule.groups]] as const) {
      const known = new Set((await this.deps.store.listPolicyObjects(kind)).map((o) => o.id));
      if (kind === 'group') BUILTIN_GROUP_IDS.forEach((id) => known.add(id));
      const missing = ids.filter((i) => !known.has(i));
      if (missing.length) throw capstanError('ERR_BAD_REQUEST', `rule names unknown ${POLICY_PLURAL[kind]}: ${missing.join(', ')}`, { details: { field: POLICY_PLURAL[kind] } });
    }
  }

  /**
   * A static group may only name nodes the registry knows (as a job's static nodes): an unknown id
   * is a typo that would silently leave the node it meant out of the group's rules.
   */
  private async checkGroupNodes(group: { nodes?: string[] }): Promise<void> {
    const ids = group.nodes ?? [];
    const missing: string[] = [];
    for (let i = 0; i < ids.length; i += MAX_FILTER_VALUES) {
      const chunk = ids.slice(i, i + MAX_FILTER_VALUES);
      const known = new Set(await this.deps.store.listNodeIds([{ key: 'id', values: chunk }]));
      missing.push(...chunk.filter((id) => !known.has(id)));
    }
    if (missing.length) {
      const shown = missing.slice(0, 10).join(', ') + (missing.length > 10 ? ` and ${missing.length - 10} more` : '');
      throw capstanError('ERR_BAD_REQUEST', `group names unknown nodes: ${shown}`, { details: { field: 'nodes' } });
    }
  }

  private async directives(): Promise<Directive[]> {
    return (await this.deps.store.listPolicyObjects('directive')).map((o) => o.body as unknown as Directive);
  }

  /** The technique a directive names, as the map checkTechniqueUse reads (empty: none). */
  private async techniqueOf(d: Directive): Promise<Map<string, Technique>> {
    const o = d.technique ? await this.deps.store.getPolicyObject('technique', d.technique.id) : null;
    return new Map(o ? [[o.id, o.body as unknown as Technique]] : []);
  }

  /** Rules naming a directive or group: such an object cannot be deleted from under them. */
  private async referencedBy(kind: 'directive' | 'group', id: string): Promise<string[]> {
    const field = kind === 'directive' ? 'directives' : 'groups';
    return (await this.deps.store.listPolicyObjects('rule')).filter((r) => (r.body[field] as string[]).includes(id)).map((r) => r.id);
  }
}
