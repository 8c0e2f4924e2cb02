/**
 * Change requests, as RUDDER's change validation and a pull request work: a proposed set of
 * directive, group, rule and technique changes (and deletions), with its impact — which nodes get which new,
 * changed or lost directive (plan.ts) — and the version of every object it touches (its base).
 * Another admin approves or rejects it with a comment; deploying applies exactly the stored
 * objects through the PolicyService door, and is refused (ERR_CHANGE_STALE) when any of them
 * changed since it was proposed: what was reviewed is no longer what would land. Every step is in
 * the audit log. Which roles must go through review is `[policy] review_roles` (service.ts).
 */
import { randomUUID } from 'node:crypto';
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import type { Actor } from '../audit/actor.js';
import type { AuditLog } from '../audit/log.js';
import type { ChangeRequestRecord, ChangeRequestStatus, PolicyKind, Store } from '../store/store.js';
import { checkId, checkPropertyName as parsePropertyName, withoutSecrets } from './model.js';
import { directiveImpact, objectChanges, parsePlanRequest, desiredModel, type Plan, type PlanRequest } from './plan.js';
import { loadModel, type NodePreview } from './content.js';
import type { PlanBounds } from './plan-memory.js';
import type { PolicyService } from './service.js';

/** Nodes kept in a change request's impact (the rest are counted). */
export const IMPACT_NODES = 1000;
export const MAX_TITLE = 200;
export const MAX_DESCRIPTION = 10_000;
export const MAX_COMMENT = 10_000;

const KINDS: readonly PolicyKind[] = ['technique', 'property', 'directive', 'group', 'rule'];
const PLURAL = { directive: 'directives', group: 'groups', rule: 'rules', technique: 'techniques', property: 'properties' } as const;

/** The plan request a stored change set stands for (its objects were checked when it was proposed). */
const requestOf = (c: ChangeSet): PlanRequest => ({
  directives: c.directives as unknown as PlanRequest['directives'], groups: c.groups as unknown as PlanRequest['groups'],
  rules: c.rules as unknown as PlanRequest['rules'], techniques: (c.techniques ?? []) as unknown as PlanRequest['techniques'],
  properties: (c.properties ?? []) as unknown as PlanRequest['properties'], prune: false, deletes: c.delete,
});

/** A change set as shown and audited: secret values left out (model.ts withoutSecrets). */
const shownChanges = (c: ChangeSet): ChangeSet => ({
  ...c, groups: c.groups.map((g) => withoutSecrets(g)), ...(c.properties && { properties: c.properties.map((p) => withoutSecrets(p)) }),
});

/** What a change request proposes, as stored: objects checked as their save checks them. */
export interface ChangeSet {
  directives: Array<Record<string, unknown>>;
  groups: Array<Record<string, unknown>>;
  rules: Array<Record<string, unknown>>;
  /** Absent in a request stored before techniques were policy objects. */
  techniques?: Array<Record<string, unknown>>;
  /** Global properties (absent in requests stored before properties were objects). */
  properties?: Array<Record<string, unknown>>;
  delete: Array<{ kind: PolicyKind; id: string }>;
}

/** One touched object's version when the request was made: its `updated_at`, null when absent. */
export interface BaseEntry {
  kind: PolicyKind;
  id: string;
  updated_at: string | null;
}

function bad(message: string, field: string): never {
  throw capstanError('ERR_BAD_REQUEST', message, { details: { field } });
}

function text(v: unknown, field: string, max: number, required: boolean): string {
  if (v === undefined && !required) return '';
  if (typeof v !== 'string' || (required && v.trim() === '') || v.length > max || v.includes('\u0000')) bad(`${field} must be ${required ? 'a non-empty' : 'a'} string of at most ${max} characters`, field);
  return v;
}

/** `{title, description?, directives?, groups?, rules?, techniques?, delete?: [{kind, id}]}`, each object checked as its save would. */
export function parseProposal(body: unknown): { title: string; description: string; request: PlanRequest; changes: ChangeSet } {
  if (!body || typeof body !== 'object' || Array.isArray(body)) bad('body must be a JSON object {"title", "directives", "groups", "rules", "delete"}', '');
  const { title, description, delete: del, ...objects } = body as Record<string, unknown>;
  const request = parsePlanRequest(objects);
  if (request.prune) bad('a change request names what it deletes (delete), it does not prune', 'prune');
  // A node's own properties are its record's, set at once (PUT /api/1/nodes/<id>/properties/own).
  if (request.nodes) bad('a change request carries policy objects, not nodes\' own properties: set those with PUT /api/1/nodes/<id>/properties/own', 'nodes');
  if (del !== undefined && !Array.isArray(del)) bad('delete must be a list of {"kind", "id"}', 'delete');
  const deletes = ((del ?? []) as unknown[]).map((d, i) => {
    const o = d as Record<string, unknown>;
    if (!o || typeof o !== 'object' || !KINDS.includes(o.kind as PolicyKind)) bad(`delete[${i}].kind must be directive, group, rule, technique or property`, `delete[${i}].kind`);
    const kind = o.kind as PolicyKind;
    const id = kind === 'property' ? parsePropertyName(o.id, `delete[${i}].id`) : checkId(o.id, `delete[${i}].id`);
    if (request[PLURAL[kind]].some((x) => x.id === id)) bad(`${kind} ${id} is both saved and deleted`, `delete[${i}].id`);
    return { kind, id };
  });
  if (request.directives.length + request.groups.length + request.rules.length + request.techniques.length + request.properties.length + deletes.length === 0) {
    bad('a change request changes at least one object', 'directives');
  }
  return {
    title: text(title, 'title', MAX_TITLE, true),
    description: text(description, 'description', MAX_DESCRIPTION, false),
    request: { ...request, deletes },
    changes: {
      directives: request.directives as unknown as ChangeSet['directives'], groups: request.groups as unknown as ChangeSet['groups'],
      rules: request.rules as unknown as ChangeSet['rules'], techniques: request.techniques as unknown as NonNullable<ChangeSet['techniques']>, delete: deletes,
      ...(request.properties.length > 0 && { properties: request.properties as unknown as ChangeSet['properties'] }),
    },
  };
}

export interface ChangeRequestView extends ChangeRequestRecord {
  /** Objects changed since the request was made: it can no longer be deployed as reviewed. */
  stale: BaseEntry[];
}

export class ChangeRequestService {
  private readonly now: () => Date;

  constructor(private readonly deps: { store: Store; policy: PolicyService; audit?: AuditLog; now?: () => Date }) {
    this.now = deps.now ?? (() => new Date());
  }

  private async base(changes: ChangeSet): Promise<BaseEntry[]> {
    const out: BaseEntry[] = [];
    const touched = [...KINDS.flatMap((k) => (changes[PLURAL[k]] ?? []).map((o) => ({ kind: k, id: o.id as string }))), ...changes.delete];
    for (const t of touched) out.push({ ...t, updated_at: (await this.deps.store.getPolicyObject(t.kind, t.id))?.updated_at ?? null });
    return out;
  }

  /** The touched objects whose version is no longer the one in `base`. */
  async staleOf(r: ChangeRequestRecord): Promise<BaseEntry[]> {
    const base = r.base as BaseEntry[];
    const now = await this.base(r.changes as ChangeSet);
    return base.filter((b, i) => now[i]?.updated_at !== b.updated_at);
  }

  private async view(r: ChangeRequestRecord): Promise<ChangeRequestView> {
    return { ...r, changes: shownChanges(r.changes as ChangeSet), stale: r.status === 'open' || r.status === 'approved' ? await this.staleOf(r) : [] };
  }

  async propose(body: unknown, actor: Actor, bounds?: PlanBounds): Promise<ChangeRequestView> {
    const p = parseProposal(await this.keptSecrets(body));
    // The impact is the plan's (policy/plan.ts), with the static groups' nodes checked, under the plans' bounds.
    const impact: Plan = await this.deps.policy.planRequest(p.request, IMPACT_NODES, bounds);
    const at = this.now().toISOString();
    const rec: ChangeRequestRecord = {
      id: randomUUID(), title: p.title, description: p.description, author: actor.name, status: 'open', created_at: at, updated_at: at,
      changes: p.changes, base: await this.base(p.changes), impact, reviews: [], deployed_at: null, deployed_by: null,
    };
    await this.deps.store.reviews.insertChangeRequest(rec);
    await this.deps.audit?.record(actor, { action: 'change_request.propose', target: rec.id, before: null, after: { title: rec.title, changes: shownChanges(p.changes) } });
    return this.view(rec);
  }

  /** A proposal's groups with their secrets sent as `{"secret": true}` keeping the saved values (service.ts withKeptSecrets). */
  private async keptSecrets(body: unknown): Promise<unknown> {
    const groups = body && typeof body === 'object' && !Array.isArray(body) ? (body as { groups?: unknown }).groups : undefined;
    if (!Array.isArray(groups)) return body;
    const out: unknown[] = [];
    for (const [i, g] of groups.entries()) {
      try {
        out.push(await this.deps.policy.withKeptSecrets('group', g));
      } catch (err) {
        if (isCapstanError(err) && typeof err.details?.field === 'string') throw capstanError(err.code as 'ERR_PROPERTIES_INVALID', err.message, { details: { field: `groups[${i}].${err.details.field}` } });
        throw err;
      }
    }
    return { ...(body as object), groups: out };
  }

  async get(id: string): Promise<ChangeRequestView> {
    const r = await this.deps.store.reviews.getChangeRequest(id);
    if (!r) throw capstanError('ERR_NOT_FOUND', `change request ${id} does not exist`);
    return this.view(r);
  }

  /** Approve or reject an open request: another admin than its author, with a comment. */
  async review(id: string, verdict: 'approved' | 'rejected', comment: unknown, actor: Actor): Promise<ChangeRequestView> {
    const text_ = text(comment ?? '', 'comment', MAX_COMMENT, false);
    const r = await this.get(id);
    if (r.status !== 'open') throw capstanError('ERR_CHANGE_REQUEST_STATE', `change request ${id} is ${r.status}: only an open one is reviewed`);
    if (verdict === 'approved' && r.author === actor.name) {
      throw capstanError('ERR_CHANGE_REQUEST_STATE', `${actor.name} proposed change request ${id}: another admin approves it`);
    }
    const at = this.now().toISOString();
    const ok = await this.deps.store.reviews.transitionChangeRequest(id, 'open', verdict, at, { review: { admin: actor.name, verdict, comment: text_, at } });
    if (!ok) throw capstanError('ERR_CHANGE_REQUEST_STATE', `change request ${id} was reviewed meanwhile`);
    await this.deps.audit?.record(actor, { action: `change_request.${verdict === 'approved' ? 'approve' : 'reject'}`, target: id, before: { status: 'open' }, after: { status: verdict, comment: text_ } });
    return this.get(id);
  }

  /**
   * Apply an approved request's objects exactly as stored, through the PolicyService door, once
   * none of them changed since it was proposed; then it is deployed.
   */
  async deploy(id: string, actor: Actor): Promise<ChangeRequestView> {
    const r = await this.get(id);
    if (r.status !== 'approved') throw capstanError('ERR_CHANGE_REQUEST_STATE', `change request ${id} is ${r.status}: only an approved one is deployed`);
    if (r.stale.length > 0) {
      throw capstanError('ERR_CHANGE_STALE', `change request ${id} was made against other versions of ${r.stale.map((s) => `${s.kind} ${s.id}`).join(', ')}: propose it again`);
    }
    // The stored objects, secrets included (the view leaves them out).
    const c = (await this.deps.store.reviews.getChangeRequest(id))!.changes as ChangeSet;
    // The whole set is checked against today's model before anything is written (a rule naming a
    // directive deleted since, a static member gone): refused whole, never applied in part.
    await this.deps.policy.planRequest(requestOf(c), 1);
    // The plan's order: directives and groups before the rules naming them, rules deleted first.
    const before = await loadModel(this.deps.store);
    const { changes } = objectChanges(before, desiredModel(before, requestOf(c)));
    for (const step of changes) {
      if (step.action === 'delete') await this.deps.policy.delete(step.kind, step.id, actor, { reviewed: true });
      else await this.deps.policy.save(step.kind, step.object!, actor, null, { reviewed: true });
    }
    const at = this.now().toISOString();
    await this.deps.store.reviews.transitionChangeRequest(id, 'approved', 'deployed', at, { deployed_by: actor.name });
    await this.deps.audit?.record(actor, { action: 'change_request.deploy', target: id, before: { status: 'approved' }, after: { status: 'deployed', objects: changes.length } });
    return this.get(id);
  }

  async list(status: ChangeRequestStatus | undefined, page: number, perPage: number) {
    return this.deps.store.reviews.listChangeRequests({ ...(status && { status }), page, per_page: perPage });
  }

  /** A node's directives before and after the request, as its bundle would carry them (the rendered diff of one node). */
  async nodeDiff(id: string, nodeId: string, bounds?: PlanBounds): Promise<{ node_id: string; before: unknown[]; after: unknown[]; impact: ReturnType<typeof directiveImpact> }> {
    await this.get(id);
    const c = (await this.deps.store.reviews.getChangeRequest(id))!.changes as ChangeSet;
    const before = await loadModel(this.deps.store);
    const after = desiredModel(before, requestOf(c));
    const { changes } = objectChanges(before, after);
    let p: NodePreview | undefined;
    await this.deps.policy.generator.preview(before, after, changes, (x) => {
      if (x.node_id === nodeId) p = x;
    }, bounds);
    if (!p) return { node_id: nodeId, before: [], after: [], impact: null };
    return { node_id: nodeId, before: p.before, after: p.after, impact: directiveImpact(p.before, p.after) };
  }
}
