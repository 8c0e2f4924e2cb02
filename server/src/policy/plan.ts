/**
 * Policy as code: what making the server's directives, groups, rules and techniques match a desired set
 * would change (`POST /api/1/policy/plan`). Two answers: the objects to create, update and delete
 * (in the order a client applies them), and each node whose bundle would change with the
 * directives it would gain, see changed or lose — computed by the generator's own membership and
 * bundle code (PolicyGenerator.preview), so the plan says what the generation will do.
 * Nothing is written: the client applies the changes with the usual PUT and DELETE calls.
 */
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import { computeConfigId, type BundleDirective, type Directive } from '@capstan/shared/policy/bundle';
import type { PolicyKind, Store } from '../store/store.js';
import { loadModel, type NodePreview, type PolicyModel } from './content.js';
import type { PolicyGenerator } from './generate.js';
import { missingFacts, type FactWarning } from './fact-check.js';
import type { Technique } from '@capstan/shared/policy/technique';
import { BUILTIN_GROUP_IDS, checkPropertyName, parseDirective, parseGroup, parseProperty, parseRule, parseTechniqueObject, withoutSecrets, type GroupDef, type PropertyDef, type RuleDef } from './model.js';
import { checkTechniqueUse, followTechnique, techniqueUsers } from './techniques.js';
import { NO_DEADLINE, type DeadlineCheck } from './deadline.js';
import { jsonBytes, textBytes, UNBOUNDED, type PlanBounds } from './plan-memory.js';
import { leafChanges, nodeChangeView, nodeLevelChanges, parseNodeFile, type LeafChange, type NodeFileDef, type ShownLeaf } from './plan-nodes.js';
import type { LevelChange } from '../registry/node-properties.js';

/** Nodes listed in a plan unless the request says otherwise (`max_nodes`). */
export const DEFAULT_PLAN_NODES = 1000;
export const MAX_PLAN_NODES = 100_000;

export interface PlanRequest {
  directives: Directive[];
  groups: GroupDef[];
  rules: RuleDef[];
  techniques: Technique[];
  /** Global properties (`properties/<name>.json` in a policy directory). */
  properties: PropertyDef[];
  /** Delete what the request does not name (otherwise it is left alone). */
  prune: boolean;
  /** Objects to delete by name (a change request's deletions). */
  deletes?: Array<{ kind: PolicyKind; id: string }>;
  /** Nodes whose own properties the request sets (`nodes/<id>` in a policy directory): those alone. */
  nodes?: NodeFileDef[];
}

export type PlanAction = 'create' | 'update' | 'delete';

export interface PlanChange {
  /** A policy object's kind, or `node`: a node's own properties (plan-nodes.ts). */
  kind: PolicyKind | 'node';
  id: string;
  action: PlanAction;
  /** Top-level fields whose value differs (update only); a node's: the property names that change. */
  fields?: string[];
  /** The object as it will be saved (create, update); a node's `{id, properties}`, secrets as `{"secret": true}`. */
  object?: Record<string, unknown>;
  /** A node's: each property created, changed or removed, with values but a secret's. */
  properties?: LevelChange[];
}

export interface DirectiveRef {
  rule_id: string;
  directive_id: string;
}

export interface NodeImpact {
  node_id: string;
  hostname: string | null;
  config_id_before: string | null;
  config_id_after: string | null;
  added: DirectiveRef[];
  changed: DirectiveRef[];
  removed: DirectiveRef[];
  /** Rendered parameter values that change, by field (`content`, `calls.0.params.path`); values not shown. */
  values?: Array<DirectiveRef & { field: string }>;
  /** Bundle properties (not secret) whose effective value changes. */
  properties?: string[];
  /** Secrets used whose value changes, or that start or stop being used: names only. */
  secrets?: string[];
  /** Leaves of its effective properties whose value or origin changes, with both (a secret's without value). */
  effective?: LeafChange[];
  /** The node's bundle would not be generated after the change: why (a conflict, a template error). */
  problem?: { code: string; message: string };
}

export interface Plan {
  changes: PlanChange[];
  unchanged: number;
  nodes: NodeImpact[];
  nodes_total: number;
  nodes_truncated: boolean;
  /** What is saved but likely wrong: a condition reading a fact none of its nodes has (fact-check.ts). */
  warnings: FactWarning[];
}

/** In the order objects are saved: techniques before the directives naming them, those before rules. */
const KINDS = ['technique', 'property', 'directive', 'group', 'rule'] as const;
const PLURAL = { directive: 'directives', group: 'groups', rule: 'rules', technique: 'techniques', property: 'properties' } as const;

function bad(message: string, field: string): never {
  throw capstanError('ERR_BAD_REQUEST', message, { details: { field } });
}

/** `{directives, groups, rules, techniques, prune?}`, each object checked as its POST would check it. */
export function parsePlanRequest(body: unknown): PlanRequest {
  if (!body || typeof body !== 'object' || Array.isArray(body)) bad('body must be a JSON object {"directives", "groups", "rules", "techniques", "properties", "prune"}', '');
  const b = body as Record<string, unknown>;
  const unknown = Object.keys(b).filter((k) => !['directives', 'groups', 'rules', 'techniques', 'properties', 'nodes', 'prune'].includes(k));
  if (unknown.length) bad(`unknown fields: ${unknown.join(', ')}`, unknown[0]!);
  if (b.prune !== undefined && typeof b.prune !== 'boolean') bad('prune must be true or false', 'prune');
  const out: PlanRequest = { directives: [], groups: [], rules: [], techniques: [], properties: [], prune: b.prune === true };
  for (const kind of KINDS) {
    const field = PLURAL[kind];
    const list = b[field] ?? [];
    if (!Array.isArray(list)) bad(`${field} must be a list of objects`, field);
    const seen = new Set<string>();
    list.forEach((item, i) => {
      let obj: { id: string };
      try {
        obj = kind === 'directive' ? parseDirective(item) : kind === 'group' ? parseGroup(item) : kind === 'technique' ? parseTechniqueObject(item)
          : kind === 'property' ? planProperty(item) : parseRule(item);
      } catch (err) {
        // The field is named in the whole body: `directives[2].params.path`.
        if (!isCapstanError(err)) throw err;
        const inner = err.details?.field;
        throw capstanError(err.code as 'ERR_BAD_REQUEST', `${field}[${i}]: ${err.message}`, {
          details: { ...err.details, field: `${field}[${i}]${typeof inner === 'string' && inner ? `.${inner}` : ''}` },
        });
      }
      if (seen.has(obj.id)) bad(`${kind} ${obj.id} is given twice`, `${field}[${i}].id`);
      seen.add(obj.id);
      (out[field] as Array<typeof obj>).push(obj);
    });
  }
  if (b.nodes !== undefined) out.nodes = parseNodes(b.nodes);
  return out;
}

/** `nodes`: each `{id, properties}` once (plan-nodes.ts), fields named in the body. */
function parseNodes(list: unknown): NodeFileDef[] {
  if (!Array.isArray(list)) bad('nodes must be a list of objects', 'nodes');
  const seen = new Set<string>();
  return list.map((item, i) => {
    let n: NodeFileDef;
    try {
      n = parseNodeFile(item);
    } catch (err) {
      if (!isCapstanError(err)) throw err;
      const inner = err.details?.field;
      throw capstanError(err.code as 'ERR_BAD_REQUEST', `nodes[${i}]: ${err.message}`, { details: { ...err.details, field: `nodes[${i}]${typeof inner === 'string' && inner ? `.${inner}` : ''}` } });
    }
    if (seen.has(n.id)) bad(`node ${n.id} is given twice`, `nodes[${i}].id`);
    seen.add(n.id);
    return n;
  });
}

/**
 * A property file: as a PUT takes it, or `{secret: true}` with no value, as `policy export` writes
 * a secret: the server keeps the value it has (desiredModel).
 */
function planProperty(item: unknown): PropertyDef {
  const o = item as Record<string, unknown>;
  if (o && typeof o === 'object' && o.secret === true && !Object.hasOwn(o, 'value') && Object.keys(o).every((k) => k === 'id' || k === 'secret')) {
    return { id: checkPropertyName(o.id), secret: true, value: undefined as unknown as PropertyDef['value'] };
  }
  return parseProperty(item);
}

/** JSON with object keys sorted: the stored body and a parsed one compare by content. */
export function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o).filter((k) => o[k] !== undefined).sort().map((k) => `${JSON.stringify(k)}:${canonical(o[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

/** The model the request describes: the current one with its objects put (and the rest removed with prune). */
export function desiredModel(current: PolicyModel, req: PlanRequest, deadline: DeadlineCheck = NO_DEADLINE): PolicyModel {
  // Pruning never removes the built-in groups: they are not the files' to manage.
  const builtins = [...current.groups].filter(([id]) => BUILTIN_GROUP_IDS.has(id));
  const next: PolicyModel = req.prune
    ? { directives: new Map(), groups: new Map(builtins), rules: new Map(), properties: new Map(), techniques: new Map() }
    : { directives: new Map(current.directives), groups: new Map(current.groups), rules: new Map(current.rules), properties: new Map(current.properties), techniques: new Map(current.techniques) };
  for (const t of req.techniques) next.techniques.set(t.id, t);
  for (const [i, p] of (req.properties ?? []).entries()) {
    const kept = p.value === undefined ? current.properties.get(p.id) : p;
    if (!kept?.secret && p.value === undefined) bad(`property ${p.id} is given as a secret without a value, and the server has no secret of that name to keep`, `properties[${i}].value`);
    next.properties.set(p.id, kept!);
  }
  for (const d of req.directives) next.directives.set(d.id, d);
  for (const g of req.groups) next.groups.set(g.id, g);
  for (const r of req.rules) next.rules.set(r.id, r);
  for (const d of req.deletes ?? []) if (!(d.kind === 'group' && BUILTIN_GROUP_IDS.has(d.id))) modelMap(next, d.kind).delete(d.id);
  // As a save does (service.ts), a directive the request leaves alone follows its technique's
  // new version; one the request gives must name the version the request gives.
  const given = new Set(req.directives.map((d) => d.id));
  for (const t of req.techniques) {
    deadline.checkNow();
    for (const d of techniqueUsers(next.directives.values(), t.id)) {
      if (!given.has(d.id) && d.technique!.version !== t.version) next.directives.set(d.id, { ...d, technique: { id: t.id, version: t.version } });
    }
  }
  return next;
}

/**
 * Rules of the desired model may only name its directives and groups, its technique directives
 * only its techniques, at their version, with values that fit.
 */
function checkReferences(model: PolicyModel, deadline: DeadlineCheck): void {
  for (const d of model.directives.values()) {
    deadline.check();
    try {
      checkTechniqueUse(d, model.techniques);
    } catch (err) {
      if (!isCapstanError(err)) throw err;
      throw capstanError(err.code as 'ERR_BAD_REQUEST', err.message, { details: { ...err.details, field: `directives.${d.id}.${String(err.details?.field ?? 'technique')}` } });
    }
  }
  for (const r of model.rules.values()) {
    deadline.check();
    for (const [field, known] of [['directives', model.directives], ['groups', model.groups]] as const) {
      const missing = r[field].filter((id) => !known.has(id));
      if (missing.length) bad(`rule ${r.id} names unknown ${field}: ${missing.join(', ')}`, `rules.${r.id}.${field}`);
    }
  }
}

/**
 * A changed technique is saved before the directives naming it (objectChanges' order), and its
 * save checks the directives as they are then (service.ts): a plan whose technique the stored
 * directives' values would not fit could not be applied, so it is refused now, not half-way.
 */
function checkTechniqueSaves(before: PolicyModel, after: PolicyModel): void {
  for (const [id, t] of after.techniques) {
    if (canonical(before.techniques.get(id)) === canonical(t)) continue;
    try {
      followTechnique(t, techniqueUsers(before.directives.values(), id));
    } catch (err) {
      if (!isCapstanError(err)) throw err;
      throw capstanError('ERR_CONFLICT', `${err.message}; saved first, the technique would be refused: give the new parameter a default, save the directives' values, then drop the default`,
        { details: { field: `techniques.${id}.parameters` } });
    }
  }
}

function modelMap(model: PolicyModel, kind: PolicyKind): Map<string, object> {
  return kind === 'directive' ? model.directives : kind === 'group' ? model.groups : kind === 'technique' ? model.techniques
    : kind === 'property' ? model.properties : model.rules;
}

/** A change of a policy object (not of a node's properties). */
export type ObjectChange = PlanChange & { kind: PolicyKind };

/** Object changes, in the order that keeps every reference valid while they are applied. */
export function objectChanges(before: PolicyModel, after: PolicyModel): { changes: ObjectChange[]; unchanged: number } {
  const puts: ObjectChange[] = [];
  const deletes: ObjectChange[] = [];
  let unchanged = 0;
  for (const kind of KINDS) {
    const [b, a] = [modelMap(before, kind), modelMap(after, kind)];
    for (const id of [...a.keys()].sort()) {
      // Built-in groups are in both models, never changed by a plan, and not counted.
      if (kind === 'group' && BUILTIN_GROUP_IDS.has(id)) continue;
      const next = a.get(id) as Record<string, unknown>;
      const prev = b.get(id) as Record<string, unknown> | undefined;
      if (!prev) puts.push({ kind, id, action: 'create', object: next });
      // A secret's value counts in the comparison, and is never shown: only that it changed.
      else if (canonical(prev) === canonical(next)) unchanged++;
      else {
        const fields = [...new Set([...Object.keys(prev), ...Object.keys(next)])].filter((f) => canonical(prev[f]) !== canonical(next[f])).sort();
        puts.push({ kind, id, action: 'update', fields, object: next });
      }
    }
    for (const id of [...b.keys()].sort()) if (!a.has(id)) deletes.push({ kind, id, action: 'delete' });
  }
  // Saved in KINDS order (what is named before what names it); deleted the other way round:
  // rules, then directives and groups, then techniques.
  const rank = (k: PolicyKind) => (k === 'rule' ? 0 : k === 'technique' ? 2 : 1);
  deletes.sort((x, y) => rank(x.kind) - rank(y.kind));
  return { changes: [...puts, ...deletes], unchanged };
}

const refKey = (d: BundleDirective) => `${d.rule_id}\u0000${d.id}`;
const ref = (d: BundleDirective): DirectiveRef => ({ rule_id: d.rule_id, directive_id: d.id });

/** The directives a node gains, sees changed and loses; null when its bundle stays the same. */
export function directiveImpact(before: BundleDirective[], after: BundleDirective[]): Pick<NodeImpact, 'added' | 'changed' | 'removed'> | null {
  const was = new Map(before.map((d) => [refKey(d), d]));
  const now = new Map(after.map((d) => [refKey(d), d]));
  const added = after.filter((d) => !was.has(refKey(d))).map(ref);
  const changed = after.filter((d) => was.has(refKey(d)) && canonical(was.get(refKey(d))) !== canonical(d)).map(ref);
  const removed = before.filter((d) => !now.has(refKey(d))).map(ref);
  // Reordering a rule's directives is a new config id too (docs/policy.md): reported, with no
  // directive to name, as a changed bundle.
  if (!added.length && !changed.length && !removed.length && computeConfigId(before) === computeConfigId(after)) return null;
  return { added, changed, removed };
}

/** Leaf paths under which two JSON values differ (a list or scalar is a leaf). */
function changedPaths(a: unknown, b: unknown, path: string, out: string[]): void {
  const isObj = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
  if (isObj(a) && isObj(b)) {
    for (const k of [...new Set([...Object.keys(a), ...Object.keys(b)])].sort()) changedPaths(a[k], b[k], path ? `${path}.${k}` : k, out);
  } else if (canonical(a) !== canonical(b)) out.push(path);
}

/** What of a node's rendered data changes (NodeImpact values, properties, secrets, problem); null when nothing. */
export function renderedImpact(p: NodePreview): Pick<NodeImpact, 'values' | 'properties' | 'secrets' | 'problem'> | null {
  const out: Pick<NodeImpact, 'values' | 'properties' | 'secrets' | 'problem'> = {};
  const was = new Map(p.before.map((d) => [refKey(d), d]));
  const values: NonNullable<NodeImpact['values']> = [];
  for (const d of p.after) {
    const old = was.get(refKey(d));
    if (!old) continue;
    const fields: string[] = [];
    changedPaths({ params: old.params, calls: old.calls }, { params: d.params, calls: d.calls }, '', fields);
    for (const f of fields) values.push({ ...ref(d), field: f.replace(/^params\./, '') });
  }
  if (values.length) out.values = values;
  const sides = p.sides;
  if (sides) {
    const props: string[] = [];
    changedPaths(sides.before.properties, sides.after.properties, '', props);
    const names = [...new Set(props.map((x) => x.split('.')[0]!))];
    if (names.length) out.properties = names;
    const secrets = [...new Set([...Object.keys(sides.before.secrets), ...Object.keys(sides.after.secrets)])].filter((n) => sides.before.secrets[n] !== sides.after.secrets[n]).sort();
    if (secrets.length) out.secrets = secrets;
    if (sides.after.problem) out.problem = { code: sides.after.problem.code, message: sides.after.problem.message };
  }
  return Object.keys(out).length ? out : null;
}

/**
 * The plan. Nodes are previewed one at a time (preview.ts): each node's impact is made and its
 * rendering dropped; what the plan keeps (the listed nodes' impacts, the nodes a conditioned
 * directive reaches) is charged to its bounds (plan-memory.ts), as is what the preview holds.
 */
export async function planPolicy(store: Store, generator: PolicyGenerator, req: PlanRequest, maxNodes: number, bounds: PlanBounds = UNBOUNDED): Promise<Plan> {
  const before = await loadModel(store);
  bounds.checkNow();
  const after = desiredModel(before, req, bounds);
  checkReferences(after, bounds);
  bounds.checkNow();
  checkTechniqueSaves(before, after);
  bounds.checkNow();
  const objects = objectChanges(before, after);
  bounds.checkNow();
  // Listed nodes' own properties: after every object, so a plan applies them last.
  const own = await nodeLevelChanges(store, req.nodes ?? [], bounds);
  const changes: PlanChange[] = [...objects.changes, ...own.changed.map(nodeChangeView)];
  const unchanged = objects.unchanged + own.unchanged;
  const levels = new Map(own.changed.map((c) => [c.id, c.after]));
  // The nodes each changed directive with a condition reaches, for its fact warnings.
  const conditioned = new Map<string, string[]>();
  for (const c of changes) if (c.kind === 'directive' && c.action !== 'delete' && after.directives.get(c.id)?.condition) conditioned.set(c.id, []);
  const nodes: NodeImpact[] = [];
  let total = 0;
  const compared = new WeakMap<object, WeakMap<object, LeafChange[]>>();
  const changesOf = (b: ShownLeaf[], a: ShownLeaf[]) => {
    let byAfter = compared.get(b);
    if (!byAfter) compared.set(b, (byAfter = new WeakMap()));
    let out = byAfter.get(a);
    if (!out) byAfter.set(a, (out = leafChanges(b, a)));
    return out;
  };
  const each = async (p: NodePreview) => {
    bounds.check();
    for (const [id, reached] of conditioned) {
      if (!p.after.some((x) => x.id === id)) continue;
      reached.push(p.node_id);
      bounds.charge(textBytes(p.node_id), 'the nodes a conditioned directive reaches');
    }
    const rendered = renderedImpact(p);
    const impact = directiveImpact(p.before, p.after) ?? (rendered ? { added: [], changed: [], removed: [] } : null);
    if (!impact) return;
    total++;
    if (nodes.length >= maxNodes) return;
    const node = await store.getNode(p.node_id);
    // The effective leaves whose value or origin change, for the nodes listed only (shared lists compared once).
    const effective = p.sides?.before.leaves && p.sides.after.leaves ? changesOf(p.sides.before.leaves(), p.sides.after.leaves()) : [];
    const kept: NodeImpact = {
      node_id: p.node_id,
      hostname: node?.hostname ?? null,
      config_id_before: p.before.length ? computeConfigId(p.before) : null,
      config_id_after: p.after.length ? computeConfigId(p.after) : null,
      ...impact,
      ...rendered,
      ...(effective.length > 0 && { effective }),
    };
    bounds.charge(jsonBytes(kept), `the impact on node ${p.node_id}`);
    nodes.push(kept);
  };
  if (changes.length) await generator.preview(before, after, objects.changes, each, bounds, levels);
  const warnings: FactWarning[] = [];
  for (const [id, reached] of conditioned) {
    bounds.checkNow();
    warnings.push(...await missingFacts(store, after.directives.get(id)!, reached));
  }
  const shown = changes.map((c) => (c.object ? { ...c, object: withoutSecrets(c.object) } : c));
  return { changes: shown, unchanged, nodes, nodes_total: total, nodes_truncated: total > nodes.length, warnings };
}
