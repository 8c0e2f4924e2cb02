/**
 * `capstan policy export|diff|apply`: the server's directives, groups, rules and techniques as a directory
 * of files, the plan of making the server match one (POST /api/1/policy/plan: object changes
 * and, per node, the directives it would gain, see changed or lose), and applying that plan with
 * the usual PUT and DELETE calls in an order that keeps every reference valid.
 */
import type { ApiTransport } from './transport.js';
import { POLICY_KINDS, readPolicyDir, type PolicyFiles } from './policy-files.js';
import type { DirectiveRef as Ref, Plan, PlanChange } from '../policy/plan.js';

// The plan's wire shape is the server's own (a type-only import: nothing of the server is loaded).
export type { NodeImpact, Plan, PlanChange } from '../policy/plan.js';

const PLURAL = { directive: 'directives', group: 'groups', rule: 'rules', technique: 'techniques', property: 'properties' } as const;

export async function exportPolicy(api: ApiTransport): Promise<PolicyFiles> {
  const out: PolicyFiles = { directives: [], groups: [], rules: [], techniques: [], properties: [] };
  // The built-in groups (all nodes, …) are the server's, not the files': rules name them by id.
  // A secret property is written without its value (`secret = true`): applying it keeps the server's.
  for (const kind of POLICY_KINDS) out[kind] = ((await api.get(`/api/1/${kind}`)).body.data as Array<{ builtin?: boolean }>).filter((o) => !o.builtin) as never;
  return out;
}

export async function planFor(api: ApiTransport, dir: string, prune: boolean, maxNodes?: number): Promise<Plan> {
  const { techniques, ...files } = await readPolicyDir(dir);
  const query = maxNodes === undefined ? {} : { max_nodes: maxNodes };
  // Techniques only when there are some: a server without them still plans the rest.
  const body = { ...files, ...(techniques.length > 0 && { techniques }), prune };
  const plan = (await api.call('POST', '/api/1/policy/plan', { body, query })).body.data as Plan;
  // The plan shows no secret value; what is applied is the files' own object.
  const local = { ...files, techniques };
  for (const c of plan.changes) {
    const own = c.action === 'delete' ? undefined : local[PLURAL[c.kind]]?.find((o) => o.id === c.id);
    if (own) Object.defineProperty(c, 'object', { value: own, enumerable: false });
  }
  return plan;
}

const sign = { create: '+', update: '~', delete: '-' } as const;
const refs = (list: Ref[]) => list.map((r) => `${r.rule_id}/${r.directive_id}`).join(', ');

/** The plan for people: one line per object change, then one block per node. */
export function planText(plan: Plan): string {
  const lines: string[] = [];
  if (plan.changes.length === 0) return `no changes: the server matches the files (${plan.unchanged} objects)\n`;
  lines.push('Objects:');
  for (const c of plan.changes) lines.push(`  ${sign[c.action]} ${c.kind} ${c.id}${c.fields ? ` (${c.fields.join(', ')})` : ''}`);
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
    const path = `/api/1/${PLURAL[c.kind]}/${encodeURIComponent(c.id)}`;
    if (c.action === 'delete') await api.call('DELETE', path);
    else await api.call('PUT', path, { body: c.object });
    progress(c);
  }
}
