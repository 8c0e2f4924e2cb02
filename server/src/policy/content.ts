/**
 * What a generation computes from the policy model, apart from the store: the model itself, the
 * groups a change touches, a node's directives, and the stored text and expectations of a bundle.
 */
import { bundleExpectations } from '@capstan/shared/compliance/compute';
import { computeConfigId, type BundleDirective, type Directive } from '@capstan/shared/policy/bundle';
import type { Technique } from '@capstan/shared/policy/technique';
import type { ExpectedComponent, PolicyKind, Store } from '../store/store.js';
import { bundleText } from '../store/policy/texts.js';
import { BUILTIN_GROUPS, keepLastSeconds, type GroupDef, type PropertyDef, type RuleDef } from './model.js';
import { usesTechnique } from './techniques.js';
import type { ShownLeaf } from './plan-nodes.js';

export interface PolicyModel {
  directives: Map<string, Directive>;
  groups: Map<string, GroupDef>;
  rules: Map<string, RuleDef>;
  /** Global properties, by name. */
  properties: Map<string, PropertyDef>;
  /** Techniques, by id: what a directive of method `technique` instantiates. */
  techniques: Map<string, Technique>;
}

export async function loadModel(store: Pick<Store, 'listPolicyObjects'>): Promise<PolicyModel> {
  const [d, g, r, p, t] = await Promise.all([store.listPolicyObjects('directive'), store.listPolicyObjects('group'), store.listPolicyObjects('rule'),
    store.listPolicyObjects('property'), store.listPolicyObjects('technique')]);
  return {
    directives: new Map(d.map((o) => [o.id, o.body as unknown as Directive])),
    groups: new Map([...BUILTIN_GROUPS.map((b) => [b.id, b] as const), ...g.map((o) => [o.id, o.body as unknown as GroupDef] as const)]),
    rules: new Map(r.map((o) => [o.id, o.body as unknown as RuleDef])),
    properties: new Map(p.map((o) => [o.id, o.body as unknown as PropertyDef])),
    techniques: new Map(t.map((o) => [o.id, o.body as unknown as Technique])),
  };
}

/** Groups whose properties count: a node's effective properties merge all of them. */
export function propertyGroups(model: PolicyModel): Set<string> {
  return new Set([...model.groups.values()].filter((g) => g.properties && Object.keys(g.properties).length > 0).map((g) => g.id));
}

/** Groups whose members' policy depends on them: those rules target, and those holding properties. */
export function policyGroups(model: PolicyModel): Set<string> {
  const out = propertyGroups(model);
  for (const r of model.rules.values()) r.groups.forEach((g) => out.add(g));
  return out;
}

/**
 * The groups a change to one object can move nodes in and out of, or change the data of. A
 * global property reaches every node with a policy: every group that counts.
 */
export function groupsTouched(model: PolicyModel, kind: PolicyKind, id: string): Set<string> {
  const out = new Set<string>();
  if (kind === 'property') return [...model.rules.values()].some((r) => r.groups.length > 0) ? policyGroups(model) : out;
  // A group no rule uses moves nobody's policy, whatever its members, unless it holds properties.
  if (kind === 'group' && policyGroups(model).has(id)) out.add(id);
  // A technique reaches the nodes of the rules whose directives instantiate it.
  const users = kind === 'technique' ? new Set([...model.directives.values()].filter((d) => usesTechnique(d, id)).map((d) => d.id)) : new Set<string>();
  for (const rule of model.rules.values()) {
    if ((kind === 'rule' && rule.id === id) || (kind === 'directive' && rule.directives.includes(id)) || rule.directives.some((d) => users.has(d))) {
      rule.groups.forEach((g) => out.add(g));
    }
  }
  return out;
}

/** A node's rendered policy under one model, for a plan (per-node.ts RenderedPreview). */
export interface NodeSide {
  properties: Record<string, unknown>;
  /** Secret names used, each with a digest of its value: compared, never shown. */
  secrets: Record<string, string>;
  /** Why the bundle would not be generated (a conflict, a template error). */
  problem?: { code: string; message: string };
  /** Its effective properties' leaves with their origins (plan-nodes.ts), made when asked: for the nodes a plan lists. */
  leaves?: () => ShownLeaf[];
}

/** A node's directives under two models, rendered with its data (PolicyGenerator.preview). */
export interface NodePreview {
  node_id: string;
  before: BundleDirective[];
  after: BundleDirective[];
  sides?: { before: NodeSide; after: NodeSide };
}

/**
 * A node's bundle directives: every directive of every rule (`rules` in id order) naming one of
 * its `groups`, each rule's in its listed order, tagged with the rule id.
 */
export function directivesFor(model: PolicyModel, rules: readonly RuleDef[], groups: ReadonlySet<string>): BundleDirective[] {
  const directives: BundleDirective[] = [];
  for (const r of rules) {
    if (!r.groups.some((g) => groups.has(g))) continue;
    for (const did of r.directives) {
      const d = model.directives.get(did);
      if (d) directives.push({ ...d, rule_id: r.id });
    }
  }
  return directives;
}

export interface Content {
  directives: BundleDirective[];
  json: string;
  configId: string;
  expected: ExpectedComponent[];
  /** Its stored expectations are out of date (see staleExpectations); undefined: not probed yet. */
  stale: boolean | undefined;
  /** Seconds a silent node keeps its last compliance: the longest of its groups' (0: none). */
  keepLast: number;
}

/**
 * Expected components as comparable text, as the store keeps them: each once, in order (a
 * PostgreSQL jsonb column reorders object keys, so objects are not compared as JSON).
 */
export function expectationKey(items: ExpectedComponent[]): string {
  return [...new Set(items.map((e) => `${e.rule_id}\u0000${e.directive_id}\u0000${e.component}`))].join('\n');
}

/**
 * The stored text of a bundle, `JSON.stringify({node_id, config_id, generated_at, directives})`
 * exactly, with the directives' JSON made once per content rather than once per node.
 */
export function bundleJson(nodeId: string, configId: string, generatedAt: string, directivesJson: string): string {
  return bundleText(nodeId, configId, generatedAt, directivesJson);
}

/**
 * A list of expected components made read-only: the nodes sharing it are judged against it, and
 * the judge keeps its index of a frozen list (shared compute.ts) instead of making it per run.
 */
export const frozen = (items: ExpectedComponent[]): ExpectedComponent[] => Object.freeze(items) as ExpectedComponent[];

/** The directives of a group set, shared by the nodes in exactly those groups. */
export function contentOf(model: PolicyModel, rules: readonly RuleDef[], groups: ReadonlySet<string>): Content {
  const directives = directivesFor(model, rules, groups);
  const keepLast = Math.max(0, ...[...groups].map((g) => (model.groups.get(g) ? keepLastSeconds(model.groups.get(g)!) : 0)));
  return { directives, json: JSON.stringify(directives), configId: computeConfigId(directives), expected: frozen(bundleExpectations(directives)), stale: undefined, keepLast };
}

/** A rule reaching a node, through which of its groups, with its directives (PolicyGenerator.explain). */
export interface RuleVia {
  id: string;
  name: string;
  via: string[];
  directives: Array<{ id: string; name: string; method: string; mode: string }>;
}

/** The rules naming any of `groups` (sorted), in id order, each with the groups it reaches them through. */
export function rulesVia(model: PolicyModel, groups: readonly string[]): RuleVia[] {
  return [...model.rules.values()]
    .map((r) => ({ r, via: r.groups.filter((g) => groups.includes(g)) }))
    .filter(({ via }) => via.length > 0)
    .sort((a, b) => (a.r.id < b.r.id ? -1 : a.r.id > b.r.id ? 1 : 0))
    .map(({ r, via }) => ({
      id: r.id, name: r.name, via,
      directives: r.directives.map((id) => model.directives.get(id)).filter((d): d is Directive => d !== undefined)
        .map((d) => ({ id: d.id, name: d.name, method: d.method, mode: d.mode })),
    }));
}
