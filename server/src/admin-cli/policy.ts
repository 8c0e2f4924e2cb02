/**
 * `capstan policy export|diff|apply`: the server's directives, groups, rules, techniques, global
 * properties and nodes' own properties as a directory of files, the plan of making the server
 * match one (POST /api/1/policy/plan: object changes and, per node, the directives it would gain,
 * see changed or lose, and its effective properties that change with their origins), and
 * applying that plan with the usual PUT and DELETE calls in an order that keeps every reference valid.
 */
import type { ApiTransport } from './transport.js';
import { POLICY_KINDS, readPolicyDir, type PolicyFiles } from './policy-files.js';
import { capstanError } from '@capstan/shared/errors';
import type { DirectiveRef as Ref, Plan, PlanChange } from '../policy/plan.js';
import type { LeafChange } from '../policy/plan-nodes.js';
import type { LevelChange } from '../registry/node-properties.js';

// The plan's wire shape is the server's own (a type-only import: nothing of the server is loaded).
export type { NodeImpact, Plan, PlanChange } from '../policy/plan.js';

const PLURAL = { directive: 'directives', group: 'groups', rule: 'rules', technique: 'techniques', property: 'properties', node: 'nodes' } as const;

/** Where a change is applied: a policy object's own path, a node's own properties. */
const changePath = (c: PlanChange) => (c.kind === 'node' ? `/api/1/nodes/${encodeURIComponent(c.id)}/properties/own` : `/api/1/${PLURAL[c.kind]}/${encodeURIComponent(c.id)}`);

export async function exportPolicy(api: ApiTransport): Promise<PolicyFiles> {
  const out: PolicyFiles = { directives: [], groups: [], rules: [], techniques: [], properties: [], nodes: [] };
  // The built-in groups (all nodes, …) are the server's, not the files': rules name them by id.
  // A secret property is written without its value (`secret = true`): applying it keeps the server's.
  for (const kind of POLICY_KINDS) {
    if (kind === 'nodes') continue;
    out[kind] = ((await api.get(`/api/1/${kind}`)).body.data as Array<{ builtin?: boolean }>).filter((o) => !o.builtin) as never;
  }
  // Every node with properties of its own, its secrets as `secret = true` as well.
  out.nodes = (await api.all('/api/1/node-properties')).data as Array<Record<string, unknown>>;
  return out;
}

export async function planFor(api: ApiTransport, dir: string, prune: boolean, maxNodes?: number): Promise<Plan> {
  const { techniques, nodes, ...files } = await readPolicyDir(dir);
  const query = maxNodes === undefined ? {} : { max_nodes: maxNodes };
  // Techniques and nodes only when there are some: a server without them still plans the rest.
  const body = { ...files, ...(techniques.length > 0 && { techniques }), ...(nodes && nodes.length > 0 && { nodes }), prune };
  const plan = (await api.call('POST', '/api/1/policy/plan', { body, query })).body.data as Plan;
  // The plan shows no secret value; what is applied is the files' own object.
  const local = { ...files, techniques, nodes };
  for (const c of plan.changes) {
    const own = c.action === 'delete' ? undefined : local[PLURAL[c.kind]]?.find((o) => o.id === c.id);
    if (own) Object.defineProperty(c, 'object', { value: own, enumerable: false });
  }
  return plan;
}

const sign = { create: '+', update: '~', delete: '-' } as const;
const refs = (list: Ref[]) => list.map((r) => `${r.rule_id}/${r.directive_id}`).join(', ');
const json = (v: unknown) => JSON.stringify(v);
const originText = (o: { level: string; id?: string }) => (o.level === 'group' ? `group ${o.id}` : o.level);

/** One of a node's own properties as a plan changes it: values shown, a secret's never. */
function propertyLine(c: LevelChange): string {
  // A side without a value is a secret one, or none at all (created, deleted).
  const was = Object.hasOwn(c, 'before') ? json(c.before) : c.action === 'create' ? 'none' : '(secret)';
  const now = Object.hasOwn(c, 'after') ? json(c.after) : c.action === 'delete' ? 'none' : '(secret)';
  if (c.action === 'create') return `+ ${c.name} = ${now}`;
  if (c.action === 'delete') return `- ${c.name} (was ${was})`;
  return `~ ${c.name}: ${was === '(secret)' && now === '(secret)' ? '(secret) changed, value not shown' : `${was} -> ${now}`}`;
}

/** One effective leaf before and after: value (or secret) and where it comes from. */
function leafLine(l: LeafChange): string {
  const side = (x: LeafChange['before']) => (x ? `${x.secret ? '(secret)' : json(x.value)} (${originText(x.origin)})` : 'none');
  return `${l.path.join('.')}: ${side(l.before)} -> ${side(l.after)}`;
}

/** The plan for people: one line per object change, then one block per node. */
export function planText(plan: Plan): string {
  const lines: string[] = [];
  if (plan.changes.length === 0) return `no changes: the server matches the files (${plan.unchanged} objects)\n`;
  lines.push('Objects:');
  for (const c of plan.changes) {
    lines.push(`  ${sign[c.action]} ${c.kind} ${c.id}${c.fields ? ` (${c.kind === 'node' ? 'properties: ' : ''}${c.fields.join(', ')})` : ''}`);
    for (const p of c.properties ?? []) lines.push(`      ${propertyLine(p)}`);
  }
  const count = (a: string) => plan.changes.filter((c) => c.action === a).length;
  lines.push(`  ${count('create')} to create, ${count('update')} to update, ${count('delete')} to delete, ${plan.unchanged} unchanged`);
  lines.push('', `Nodes whose policy would change: ${plan.nodes_total}${plan.nodes_truncated ? ` (first ${plan.nodes.length} shown)` : ''}`);
  for (const n of plan.nodes) {
    lines.push(`  ${n.node_id}${n.hostname ? ` (${n.hostname})` : ''}: config ${n.config_id_before ?? 'none'} -> ${n.config_id_after ?? 'none'}`);
    if (n.added.length) lines.push(`    + ${refs(n.added)}`);
    if (n.changed.length) lines.push(`    ~ ${refs(n.changed)}`);
    if (n.removed.length) lines.push(`    - ${refs(n.removed)}`);
    if (n.values?.length) lines.push(`    values: ${n.values.map((v) => `${v.rule_id}/${v.directive_id} ${v.field}`).join(', ')}`);
    if (n.properties?.length) lines.push(`    properties: ${n.properties.join(', ')}`);
    for (const l of n.effective ?? []) lines.push(`      ${leafLine(l)}`);
    if (n.secrets?.length) lines.push(`    secrets changed: ${n.secrets.join(', ')}`);
    if (n.problem) lines.push(`    ! not generated: ${n.problem.code} ${n.problem.message}`);
  }
  if (plan.warnings?.length) {
    lines.push('', 'Warnings:');
    for (const w of plan.warnings) lines.push(`  ${w.kind} ${w.id} ${w.field}: ${w.message}`);
  }
  return `${lines.join('\n')}\n`;
}

/**
 * The plan's changes as one change request (POST /api/1/change-requests): its objects as the
 * plan will save them, its deletions by name; another admin approves and deploys it.
 */
export async function proposePlan(api: ApiTransport, plan: Plan, title: string, description?: string): Promise<{ id: string; status: string }> {
  // A node's own properties are the node's record, not policy objects: no change request carries them.
  const nodes = plan.changes.filter((c) => c.kind === 'node').map((c) => c.id);
  if (nodes.length) {
    throw capstanError('ERR_POLICY_FILE', `the files change the own properties of nodes ${nodes.join(', ')}, which a change request cannot carry: apply a directory holding only nodes/ without --propose, and propose the rest`);
  }
  const body: Record<string, unknown> = { title, ...(description && { description }), directives: [], groups: [], rules: [], techniques: [], properties: [], delete: [] };
  for (const c of plan.changes) {
    if (c.action === 'delete') (body.delete as unknown[]).push({ kind: c.kind, id: c.id });
    else (body[PLURAL[c.kind]] as unknown[]).push(c.object);
  }
  return (await api.call('POST', '/api/1/change-requests', { body })).body.data as { id: string; status: string };
}

/** Apply a plan's changes in order; `progress` hears each one done. */
export async function applyPlan(api: ApiTransport, plan: Plan, progress: (c: PlanChange) => void): Promise<void> {
  for (const c of plan.changes) {
    const path = changePath(c);
    if (c.action === 'delete') await api.call('DELETE', path);
    else await api.call('PUT', path, { body: c.object });
    progress(c);
  }
}
