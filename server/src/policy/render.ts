/**
 * A node's policy as data reaches it (docs/policy.md, Properties, Templates, Secrets): its
 * effective properties (global < its groups by ascending priority < its own), its node data, and
 * its directives rendered with them — params as text, a file_from_template's template (inline, or
 * read from the shared folder: shared-templates.ts) into `content`, a technique's directive
 * expanded — with every secret it uses sealed to its pinned
 * certificate. Pure but for the sealing's randomness; the generator decides who is rendered.
 *
 * What a template reads decides how much of a node is needed: a directive set whose templates
 * read nothing, with no properties in play, is shared by every node with the same groups (the
 * generator's fast path); one reading only `node.properties.*` is shared too by the nodes
 * without properties of their own; one reading facts or `node.id`/`hostname`/`relay` is
 * rendered per node.
 */
import { createHash } from 'node:crypto';
import { capstanError, isCapstanError, type ErrorCode } from '@capstan/shared/errors';
import { TECHNIQUE_METHOD, type BundleDirective, type Directive } from '@capstan/shared/policy/bundle';
import { nodeData } from '@capstan/shared/policy/data';
import { validateMethodParams } from '@capstan/shared/policy/methods';
import { markedSecrets, sealForNode, sealKeyId, type SealedSecret } from '@capstan/shared/policy/secrets';
import { instantiate, techniqueDirective, type Instance, type Technique } from '@capstan/shared/policy/technique';
import { renderParams, renderTemplate, SecretRef, templateNames } from '@capstan/shared/policy/template';
import type { PolicyNodeInput } from '../store/store.js';
import type { PolicyModel } from './content.js';
import { mergeProperties, mergeValues, type Conflict, type GroupProperties, type Json, type MergedProperties, type PropertySet } from './properties.js';
import { callSource, directiveSources, NO_TEMPLATES, templateSource, type TemplateSet } from './shared-templates.js';

/** What a directive's templates read of a node. */
export interface Needs {
  /** Some string of its params (or its technique's calls) is a template. */
  templated: boolean;
  /** Facts: inventory paths (the node's inventory is read). */
  facts: boolean;
  /** `node.id`, `node.hostname` or `node.relay`: different on every node. */
  node: boolean;
}

const NONE: Needs = { templated: false, facts: false, node: false };

/** A template's names sorted into what they need (a name in a section may be relative: a fact, to be safe). */
function classify(names: string[], out: Needs): void {
  for (const n of names) {
    const [head, second] = n.split('.');
    if (head === 'params' || head === 'item' || n === '.') continue;
    if (head === 'node') {
      if (second !== 'properties') out.node = true;
    } else out.facts = true;
  }
}

/** Whether a string may be a template: a mustache tag or RUDDER's `${node…}`. */
/** Whether a string is a template the server renders per node (mustache, or RUDDER's `${node.…}`). */
export const templated = (s: string) => s.includes('{{') || s.includes('${node');

function walkStrings(v: unknown, each: (s: string) => void): void {
  if (typeof v === 'string') each(v);
  else if (Array.isArray(v)) v.forEach((x) => walkStrings(x, each));
  else if (v !== null && typeof v === 'object') Object.values(v).forEach((x) => walkStrings(x, each));
}

/**
 * What one directive reads (its technique's calls, its shared-folder template too); a template
 * that does not parse, or cannot be read, counts as reading everything.
 */
export function directiveNeeds(d: Directive, model: PolicyModel, templates: TemplateSet = NO_TEMPLATES): Needs {
  const out: Needs = { ...NONE };
  const names = (s: string) => {
    out.templated = true;
    try {
      classify(templateNames(s), out);
    } catch {
      // Rendering will say what is wrong, per node.
      out.facts = out.node = true;
    }
  };
  const look = (s: string) => {
    if (templated(s)) names(s);
  };
  walkStrings(d.params, look);
  for (const source of directiveSources(d, model)) {
    // Rendered into `content` even when it holds no tag (the node writes only `content`).
    const t = templates.get(source);
    if (t && 'text' in t) names(t.text);
    else out.templated = out.facts = out.node = true;
  }
  if (d.method === TECHNIQUE_METHOD) {
    out.templated = true;
    const t = model.techniques.get(techniqueRef(d)?.id ?? '');
    walkStrings(t?.calls.map((c) => [c.params, c.name ?? '']), look);
  }
  return out;
}

/** The needs of a directive set: what any of them reads. */
export function setNeeds(directives: readonly Directive[], cache: Map<string, Needs>, model: PolicyModel, templates: TemplateSet = NO_TEMPLATES): Needs {
  const out: Needs = { ...NONE };
  for (const d of directives) {
    let n = cache.get(d.id);
    if (!n) cache.set(d.id, (n = directiveNeeds(d, model, templates)));
    out.templated ||= n.templated;
    out.facts ||= n.facts;
    out.node ||= n.node;
  }
  return out;
}

const techniqueRef = (d: Directive) => (d as Directive & { technique?: { id: string; version: string } }).technique;

/** The global level of the model's properties. */
export function globalLevel(model: PolicyModel): PropertySet {
  return Object.fromEntries([...model.properties.values()].map((p) => [p.id, { value: p.value, ...(p.secret === true && { secret: true }) }]));
}

/** The group levels of a node in `groups`. */
export function groupLevels(model: PolicyModel, groups: Iterable<string>): GroupProperties[] {
  const out: GroupProperties[] = [];
  for (const id of groups) {
    const g = model.groups.get(id);
    if (g?.properties && Object.keys(g.properties).length > 0) out.push({ id, priority: g.priority ?? 0, properties: g.properties });
  }
  return out;
}

/** The node level: the admin's node properties, JSON values by name, and its secrets (their text). */
export function nodeLevel(props: Record<string, Json>, secrets: Record<string, string> = {}): PropertySet {
  const out: PropertySet = Object.fromEntries(Object.entries(props).map(([k, v]) => [k, { value: v }]));
  for (const [k, v] of Object.entries(secrets)) out[k] = { value: v, secret: true };
  return out;
}

export function mergeFor(model: PolicyModel, groups: Iterable<string>, nodeProps: Record<string, Json>, nodeSecrets?: Record<string, string>): MergedProperties {
  return mergeProperties(globalLevel(model), groupLevels(model, groups), nodeLevel(nodeProps, nodeSecrets));
}

/** Why a node's policy was not generated: the previous bundle stays until it is fixed. */
export interface NodeProblem {
  code: string;
  message: string;
  /** The directive (and its rule) whose rendering failed. */
  directive_id?: string;
  rule_id?: string;
  /** The template field, or the name that was not defined. */
  field?: string;
  name?: string;
  /** Equal-priority groups that disagree (ERR_PROPERTY_CONFLICT). */
  conflicts?: Conflict[];
}

export class RenderError extends Error {
  constructor(readonly problem: NodeProblem) {
    super(problem.message);
  }
}

export function conflictProblem(conflicts: Conflict[]): NodeProblem {
  const c = conflicts[0]!;
  return {
    code: 'ERR_PROPERTY_CONFLICT',
    message: `property ${c.path.join('.')} is set differently by groups ${c.groups.map((g) => g.id).join(' and ')} of equal priority ${c.priority}: give one a higher priority`,
    conflicts,
  };
}

/** The effective properties a bundle carries: the secret ones left out. */
export function publicProperties(m: Effective): Record<string, Json> {
  if (m.secrets.length === 0) return m.effective;
  const secret = new Set(m.secrets);
  return Object.fromEntries(Object.entries(m.effective).filter(([k]) => !secret.has(k)));
}

/** The text a secret seals: a string as it is, any other JSON as JSON. */
const secretText = (v: Json | undefined) => (typeof v === 'string' ? v : JSON.stringify(v ?? null));

/** A sealed value kept for a node, with the digest of its key and plaintext. */
export interface KeptSeal {
  digest: string;
  sealed: SealedSecret;
}

/**
 * Sealed values kept per node while the plaintext and the node's key are unchanged: sealing is
 * randomised, and a fresh seal each generation would change the config id every time. What it
 * seals afresh or forgets is noted for the store (kept.ts), so a restarted server reuses them.
 */
export class SealCache {
  private readonly byNode = new Map<string, Map<string, KeptSeal>>();
  private readonly sealed = new Map<string, { nodeId: string; name: string; kept: KeptSeal }>();
  private readonly dropped = new Map<string, { nodeId: string; name: string }>();

  /** A seal the store kept (a previous process's). */
  load(nodeId: string, name: string, kept: KeptSeal): void {
    let mine = this.byNode.get(nodeId);
    if (!mine) this.byNode.set(nodeId, (mine = new Map()));
    mine.set(name, kept);
  }

  seal(nodeId: string, name: string, plaintext: string, certificate: string): SealedSecret {
    const digest = createHash('sha256').update(`${sealKeyId(certificate)}\u0000${plaintext}`).digest('hex');
    let mine = this.byNode.get(nodeId);
    const kept = mine?.get(name);
    if (kept && kept.digest === digest) return kept.sealed;
    const sealed = sealForNode(plaintext, certificate);
    if (!mine) this.byNode.set(nodeId, (mine = new Map()));
    mine.set(name, { digest, sealed });
    const k = JSON.stringify([nodeId, name]);
    this.dropped.delete(k);
    this.sealed.set(k, { nodeId, name, kept: { digest, sealed } });
    return sealed;
  }

  /** Forget what a node no longer uses. */
  keepOnly(nodeId: string, names: ReadonlySet<string>): void {
    const mine = this.byNode.get(nodeId);
    if (!mine) return;
    for (const n of [...mine.keys()]) {
      if (names.has(n)) continue;
      mine.delete(n);
      const k = JSON.stringify([nodeId, n]);
      this.sealed.delete(k);
      this.dropped.set(k, { nodeId, name: n });
    }
    if (mine.size === 0) this.byNode.delete(nodeId);
  }

  /** What was sealed afresh and forgotten since the last call. */
  drain(): { sealed: Array<{ nodeId: string; name: string; kept: KeptSeal }>; dropped: Array<{ nodeId: string; name: string }> } {
    const out = { sealed: [...this.sealed.values()], dropped: [...this.dropped.values()] };
    this.sealed.clear();
    this.dropped.clear();
    return out;
  }
}

export interface Rendered {
  directives: BundleDirective[];
  properties: Record<string, Json>;
  /** The secrets the rendered directives use, by name (their plaintext, sealed by the caller). */
  secrets: string[];
}

/** What generation needs of a merge: the effective values and the secret names. */
export type Effective = Pick<MergedProperties, 'effective' | 'secrets'>;

/** The data templates read: node data with the secret properties as SecretRef. */
export function templateData(nodeId: string, input: Pick<PolicyNodeInput, 'hostname' | 'relay' | 'inventory'>, m: Effective): Record<string, unknown> {
  const props: Record<string, unknown> = { ...m.effective };
  for (const s of m.secrets) props[s] = new SecretRef(s);
  const inventory = input.inventory ? JSON.parse(input.inventory) as unknown : {};
  return nodeData(inventory, { id: nodeId, hostname: input.hostname, relay: input.relay, properties: props });
}

/**
 * A node's own properties over the merge of its global and group levels (`base`): its plain
 * values merged in, its secrets (text) replacing what the name held, and secret from then on.
 */
export function withNodeLevel(base: Effective, own: Record<string, Json>, secrets: Record<string, string> = {}): Effective {
  const names = Object.keys(secrets);
  if (Object.keys(own).length === 0 && names.length === 0) return base;
  const effective = { ...base.effective };
  for (const [k, v] of Object.entries(own)) effective[k] = mergeValues(effective[k], v);
  for (const k of names) effective[k] = secrets[k]!;
  return { effective, secrets: names.length === 0 ? base.secrets : [...new Set([...base.secrets, ...names])].sort() };
}

function fail(err: unknown, d: BundleDirective): never {
  if (!isCapstanError(err)) throw err;
  const field = typeof err.details?.field === 'string' ? err.details.field : undefined;
  const name = typeof err.details?.name === 'string' ? err.details.name : undefined;
  throw new RenderError({
    code: err.code, message: `directive ${d.id} (rule ${d.rule_id}): ${err.message}`, directive_id: d.id, rule_id: d.rule_id,
    ...(field !== undefined && { field }), ...(name !== undefined && { name }),
  });
}

/**
 * A shared-folder template rendered in `file` mode, as an inline one is; its errors say which
 * template (field `source`) and keep the name that was not defined.
 */
function renderSource(source: string, templates: TemplateSet, data: Record<string, unknown>): { content: string; sha256: string } {
  const t = templates.get(source);
  if (!t) throw capstanError('ERR_NOT_FOUND', `shared-folder template ${source} was not read`, { details: { field: 'source' } });
  if ('error' in t) {
    throw capstanError(t.error.code, t.error.message, { details: { field: 'source', ...(t.error.code === 'ERR_TEMPLATE_LIMIT' && { limit: 'maxTemplateBytes' }) } });
  }
  try {
    return { content: renderTemplate(t.text, data, { mode: 'file' }), sha256: t.sha256 };
  } catch (err) {
    if (!isCapstanError(err)) throw err;
    throw capstanError(err.code as ErrorCode, `shared-folder template ${source}: ${err.message}`, { details: { ...err.details, field: 'source' } });
  }
}

/**
 * A technique's file_from_template calls naming a `source`: each rendered in `file` mode with the
 * call's data (the node's, `params.*`, `item` in a loop) into the call's `content`. The source
 * must be a plain path (it is read before any node is rendered).
 */
function renderCallSources(t: Technique, instance: Instance, data: Record<string, unknown>, templates: TemplateSet): void {
  instance.calls.forEach((call) => {
    const dot = call.id.lastIndexOf('.');
    const def = t.calls.find((c) => c.id === call.id) ?? t.calls.find((c) => c.foreach !== undefined && c.id === call.id.slice(0, dot));
    const source = def ? callSource(def) : undefined;
    if (!def || source === undefined) return;
    const field = `calls[${t.calls.indexOf(def)}].params.source`;
    if (templated(source)) throw capstanError('ERR_TEMPLATE', `technique ${t.id}, call ${def.id}: a shared-folder source must be a plain path, not a template`, { details: { field } });
    const scope = { ...data, params: instance.params, ...(def.foreach !== undefined && { item: (instance.params[def.foreach] as unknown[])[Number(call.id.slice(dot + 1))] }) };
    try {
      const r = renderSource(source, templates, scope);
      call.params = { ...call.params, source, content: r.content, source_sha256: r.sha256 };
    } catch (err) {
      if (!isCapstanError(err)) throw err;
      throw capstanError(err.code as ErrorCode, `technique ${t.id}, call ${call.id}: ${err.message}`, { details: { ...err.details, field } });
    }
  });
}

/** One directive rendered for a node (see the module comment); RenderError on any fault. */
function renderOne(d: BundleDirective, data: Record<string, unknown>, model: PolicyModel, needs: Needs, templates: TemplateSet): BundleDirective {
  try {
    if (d.method === TECHNIQUE_METHOD) {
      const ref = techniqueRef(d);
      const t = ref ? model.techniques.get(ref.id) : undefined;
      if (!ref || !t || t.version !== ref.version) {
        throw capstanError('ERR_NOT_FOUND', `technique ${ref?.id ?? '(none)'} version ${ref?.version ?? '(none)'} does not exist`, { details: { field: 'technique' } });
      }
      const instance = instantiate(t, d.params, data);
      renderCallSources(t, instance, data, templates);
      return techniqueDirective(d, t, instance);
    }
    if (!needs.templated) return d;
    let params: Record<string, unknown>;
    if (d.method === 'file_from_template' && typeof d.params.template === 'string') {
      // An inline template is rendered once, in file mode (rendered with the other params as
      // text too, it was rendered twice for one result). It is kept as written (for display),
      // in its place; the node writes `content`.
      const { template, ...others } = d.params;
      const rendered = renderParams(others, data).params;
      params = Object.fromEntries(Object.keys(d.params).map((k) => [k, k === 'template' ? template : rendered[k]]));
      params.content = renderTemplate(template, data, { mode: 'file', field: 'template' });
    } else params = renderParams(d.params, data).params;
    const source = templateSource(d);
    if (source !== undefined) {
      // The path is kept as written, with the sha256 of the file rendered (for display and diffs).
      const r = renderSource(source, templates, data);
      Object.assign(params, { source, content: r.content, source_sha256: r.sha256 });
    }
    validateMethodParams(d.method, params);
    return { ...d, params };
  } catch (err) {
    if (err instanceof RenderError) throw err;
    fail(err, d);
  }
}

/** A node's directives rendered with its data; the caller seals `secrets`. */
export function renderDirectives(
  directives: readonly BundleDirective[], data: Record<string, unknown>, model: PolicyModel, needsOf: Map<string, Needs>, templates: TemplateSet = NO_TEMPLATES,
): Rendered {
  const out: BundleDirective[] = [];
  for (const d of directives) out.push(renderOne(d, data, model, needsOf.get(d.id) ?? directiveNeeds(d, model, templates), templates));
  const secrets = [...markedSecrets(out.map((d) => [d.params, d.calls ?? []]))].sort();
  return { directives: out, properties: {}, secrets };
}

/** The plaintext of each secret a node uses, from its effective properties. */
export function secretValues(m: Effective, names: readonly string[]): Map<string, string> {
  return new Map(names.map((n) => [n, secretText(m.effective[n])]));
}
