/**
 * Techniques: a named, versioned, parameterised list of generic method calls (RUDDER's technique
 * editor and YAML techniques). `parseTechnique` checks one at save time with errors naming the
 * field (`calls[2].params.path`); `instantiate` expands one for a node — parameter values
 * checked and defaulted, loops unrolled, every string of every call's params rendered with
 * `{{params.x}}`, `{{item}}` and the node data — into the calls a bundle carries
 * (bundle.ts TechniqueCall), each checked by its method as a plain directive's params are.
 */
import { capstanError, isCapstanError } from '../errors.js';
import type { BundleDirective, DirectiveMode, TechniqueCall } from './bundle.js';
import { TECHNIQUE_METHOD } from './bundle.js';
import { parseCondition, resultRefs } from './condition.js';
import { expectedComponents, METHOD_SPECS, validateMethodParams } from './methods.js';
import { renderParams, renderTemplate, templateNames } from './template.js';

export type ParameterType = 'string' | 'list' | 'boolean' | 'number' | 'map';

export interface TechniqueParameter {
  name: string;
  description?: string;
  type: ParameterType;
  default?: unknown;
  required?: boolean;
}

export interface TechniqueCallDef {
  id: string;
  /** The component its reports are filed under (templated: `Package {{item}}`); default: the method's. */
  name?: string;
  method: string;
  params: Record<string, unknown>;
  /** A node condition (condition.ts). */
  condition?: string;
  /** The name of a list parameter: the call runs once per item, `{{item}}` being the item. */
  foreach?: string;
  /** A result condition over earlier calls: `repaired('config') && !error('install')`. */
  if?: string;
  mode?: DirectiveMode;
}

export interface Technique {
  id: string;
  name: string;
  version: string;
  description?: string;
  parameters: TechniqueParameter[];
  calls: TechniqueCallDef[];
}

/** Limits on one technique and on what one instance expands to. */
export const TECHNIQUE_LIMITS = { maxCalls: 200, maxParameters: 100, maxLoopItems: 1000, maxExpandedCalls: 2000, maxBytes: 1024 * 1024 } as const;

const TECHNIQUE_ID = /^[A-Za-z0-9_]{1,128}$/;
const CALL_ID = /^[A-Za-z0-9_-]{1,64}$/;
const PARAM_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
const TYPES: readonly ParameterType[] = ['string', 'list', 'boolean', 'number', 'map'];

function invalid(field: string, what: string): never {
  throw capstanError('ERR_TECHNIQUE_INVALID', `${field} ${what}`, { details: { field } });
}

const isObject = (v: unknown): v is Record<string, unknown> => !!v && typeof v === 'object' && !Array.isArray(v);

function only(v: unknown, field: string, allowed: readonly string[]): Record<string, unknown> {
  if (!isObject(v)) invalid(field || 'technique', 'must be an object');
  const unknown = Object.keys(v).find((k) => !allowed.includes(k));
  if (unknown !== undefined) invalid(field ? `${field}.${unknown}` : unknown, `is not a field of a technique${field ? ' call or parameter' : ''}`);
  return v;
}

function text(v: unknown, field: string, max = 256): string {
  if (typeof v !== 'string' || v.trim().length === 0 || v.length > max || v.includes('\u0000')) invalid(field, `must be a non-empty string of at most ${max} characters`);
  return v;
}

/** Whether `v` is a value of `type`: what a parameter's default and an instance's value must be. */
export function hasType(v: unknown, type: ParameterType): boolean {
  switch (type) {
    case 'string': return typeof v === 'string';
    case 'list': return Array.isArray(v);
    case 'boolean': return typeof v === 'boolean';
    case 'number': return typeof v === 'number' && Number.isFinite(v);
    case 'map': return isObject(v);
  }
}

function parameter(v: unknown, i: number): TechniqueParameter {
  const f = `parameters[${i}]`;
  const p = only(v, f, ['name', 'description', 'type', 'default', 'required']);
  if (typeof p.name !== 'string' || !PARAM_NAME.test(p.name)) invalid(`${f}.name`, 'must be a name of letters, digits and _ (at most 64)');
  const type = (p.type ?? 'string') as ParameterType;
  if (!TYPES.includes(type)) invalid(`${f}.type`, `must be one of ${TYPES.join(', ')}`);
  if (p.default !== undefined && !hasType(p.default, type)) invalid(`${f}.default`, `must be a ${type}`);
  if (p.required !== undefined && typeof p.required !== 'boolean') invalid(`${f}.required`, 'must be true or false');
  if (p.description !== undefined) text(p.description, `${f}.description`, 4096);
  return { name: p.name, type, ...(p.description !== undefined && { description: p.description as string }),
    ...(p.default !== undefined && { default: p.default }), ...(p.required !== undefined && { required: p.required as boolean }) };
}

/** Every string in `v` (deep) with its path under `field`. */
function strings(v: unknown, field: string, out: Array<[string, string]> = []): Array<[string, string]> {
  if (typeof v === 'string') out.push([field, v]);
  else if (Array.isArray(v)) v.forEach((x, i) => strings(x, `${field}.${i}`, out));
  else if (isObject(v)) for (const [k, x] of Object.entries(v)) strings(x, `${field}.${k}`, out);
  return out;
}

/** The names a call's templates read must exist: its parameters, `item` in a loop, `node.*`'s four. */
function checkNames(str: string, field: string, params: ReadonlyMap<string, TechniqueParameter>, loop: boolean): string[] {
  let names: string[];
  try {
    names = templateNames(str);
  } catch (err) {
    throw isCapstanError(err) ? capstanError(err.code as 'ERR_TEMPLATE', `${field}: ${err.message}`, { details: { ...err.details, field } }) : err;
  }
  for (const n of names) {
    const [head, second] = n.split('.');
    if (head === 'params' && (second === undefined || !params.has(second))) invalid(field, `names ${n}, which is not a parameter of the technique`);
    if (head === 'item' && !loop) invalid(field, `names ${n}, but the call has no foreach`);
    if (head === 'node' && second !== undefined && !['id', 'hostname', 'relay', 'properties'].includes(second)) invalid(field, `names ${n}: node has id, hostname, relay and properties`);
  }
  return names;
}

/** A technique body (JSON), checked; ERR_TECHNIQUE_INVALID with `details.field` on the first fault. */
export function parseTechnique(body: unknown): Technique {
  const b = only(body, '', ['id', 'name', 'version', 'description', 'parameters', 'calls']);
  if (JSON.stringify(b).length > TECHNIQUE_LIMITS.maxBytes) invalid('technique', `is larger than ${TECHNIQUE_LIMITS.maxBytes} bytes`);
  if (typeof b.id !== 'string' || !TECHNIQUE_ID.test(b.id)) invalid('id', 'must be 1-128 letters, digits or _');
  const name = text(b.name ?? b.id, 'name');
  if (typeof b.version !== 'string' || !/^\d{1,6}\.\d{1,6}$/.test(b.version)) invalid('version', 'must be a version such as "1.0"');
  if (b.description !== undefined) text(b.description, 'description', 65536);
  const rawParams = b.parameters ?? [];
  if (!Array.isArray(rawParams) || rawParams.length > TECHNIQUE_LIMITS.maxParameters) invalid('parameters', `must be a list of at most ${TECHNIQUE_LIMITS.maxParameters}`);
  const parameters = rawParams.map(parameter);
  const byName = new Map<string, TechniqueParameter>();
  parameters.forEach((p, i) => {
    if (byName.has(p.name)) invalid(`parameters[${i}].name`, `${p.name} is defined twice`);
    byName.set(p.name, p);
  });
  if (!Array.isArray(b.calls) || b.calls.length === 0 || b.calls.length > TECHNIQUE_LIMITS.maxCalls) invalid('calls', `must be a list of 1 to ${TECHNIQUE_LIMITS.maxCalls} calls`);
  const earlier = new Set<string>();
  const calls = b.calls.map((raw: unknown, i: number): TechniqueCallDef => {
    const f = `calls[${i}]`;
    const c = only(raw, f, ['id', 'name', 'method', 'params', 'condition', 'foreach', 'if', 'mode']);
    if (typeof c.id !== 'string' || !CALL_ID.test(c.id)) invalid(`${f}.id`, 'must be 1-64 letters, digits, _ or -');
    if (earlier.has(c.id)) invalid(`${f}.id`, `${c.id} is the id of an earlier call`);
    if (typeof c.method !== 'string' || !METHOD_SPECS.has(c.method)) invalid(`${f}.method`, `must be one of ${[...METHOD_SPECS.keys()].join(', ')}`);
    const params = c.params ?? {};
    if (!isObject(params)) invalid(`${f}.params`, 'must be an object');
    if (c.foreach !== undefined && (typeof c.foreach !== 'string' || byName.get(c.foreach)?.type !== 'list')) invalid(`${f}.foreach`, 'must name a list parameter');
    const loop = c.foreach !== undefined;
    if (c.name !== undefined) {
      const names = checkNames(text(c.name, `${f}.name`), `${f}.name`, byName, loop);
      if (loop && !names.some((n) => n === 'item' || n.startsWith('item.'))) invalid(`${f}.name`, 'must use {{item}} in a loop, so that each item reports its own component');
    } else if (loop) invalid(`${f}.name`, 'is required in a loop, with {{item}} in it');
    const refs = strings(params, `${f}.params`).map(([field, s]) => checkNames(s, field, byName, loop));
    for (const k of ['condition', 'if'] as const) {
      if (c[k] === undefined) continue;
      if (typeof c[k] !== 'string') invalid(`${f}.${k}`, 'must be a string');
      try {
        const tree = parseCondition(c[k] as string, { results: k === 'if' });
        const later = resultRefs(tree).find((r) => !earlier.has(r));
        if (later !== undefined) invalid(`${f}.${k}`, `reads the result of ${later}, which is not an earlier call`);
      } catch (err) {
        if (isCapstanError(err) && err.code === 'ERR_CONDITION_SYNTAX') invalid(`${f}.${k}`, err.message);
        throw err;
      }
    }
    if (c.mode !== undefined && c.mode !== 'enforce' && c.mode !== 'audit') invalid(`${f}.mode`, 'must be enforce or audit');
    earlier.add(c.id);
    const call: TechniqueCallDef = {
      id: c.id, method: c.method, params, ...(c.name !== undefined && { name: c.name as string }),
      ...(c.condition !== undefined && { condition: c.condition as string }), ...(c.foreach !== undefined && { foreach: c.foreach as string }),
      ...(c.if !== undefined && { if: c.if as string }), ...(c.mode !== undefined && { mode: c.mode as DirectiveMode }),
    };
    checkWithDefaults(call, f, byName, refs.flat());
    return call;
  });
  return { id: b.id, name, version: b.version, ...(b.description !== undefined && { description: b.description as string }), parameters, calls };
}

/**
 * A call's params checked by its method now, when what they read is known without a node: only
 * parameters that have defaults (and a loop's default items). Others are checked per node by
 * `instantiate`.
 */
function checkWithDefaults(call: TechniqueCallDef, f: string, params: ReadonlyMap<string, TechniqueParameter>, names: string[]): void {
  const known = names.every((n) => {
    const [head, second] = n.split('.');
    return (head === 'params' && params.get(second!)?.default !== undefined) || ((head === 'item' || n === '.') && call.foreach !== undefined);
  });
  if (!known) return;
  const defaults = Object.fromEntries([...params.values()].filter((p) => p.default !== undefined).map((p) => [p.name, p.default]));
  const items = call.foreach === undefined ? [undefined] : (defaults[call.foreach] as unknown[] | undefined) ?? [];
  for (const item of items.slice(0, 1)) {
    let rendered: Record<string, unknown>;
    try {
      rendered = renderParams(call.params, { params: defaults, ...(item !== undefined && { item }) }).params;
    } catch (err) {
      if (!isCapstanError(err)) throw err;
      throw capstanError(err.code as 'ERR_TEMPLATE', `${f}.params: ${err.message}`, { details: { ...err.details, field: `${f}.params${err.details?.field ? `.${err.details.field as string}` : ''}` } });
    }
    methodCheck(call.method, rendered, `${f}.params`, 'ERR_TECHNIQUE_INVALID');
  }
}

/** The method's own check, its field named under `prefix`. */
function methodCheck(method: string, params: Record<string, unknown>, prefix: string, code: 'ERR_TECHNIQUE_INVALID' | 'ERR_METHOD_PARAMS'): void {
  try {
    validateMethodParams(method, params);
  } catch (err) {
    if (!isCapstanError(err)) throw err;
    const field = typeof err.details?.field === 'string' ? `${prefix}.${err.details.field}` : prefix;
    throw capstanError(code, `${field}: ${err.message}`, { details: { ...err.details, field } });
  }
}

export interface Instance {
  /** The parameter values, defaults filled in: the bundle directive's `params`. */
  params: Record<string, unknown>;
  calls: TechniqueCall[];
  /** Every name the rendering read (root-based paths), and the secrets among them, sorted. */
  reads: string[];
  secrets: string[];
}

/** The parameter values of an instance, checked against the technique and defaulted. */
export function checkValues(t: Technique, values: unknown): Record<string, unknown> {
  if (values !== undefined && !isObject(values)) invalid('params', 'must be an object of parameter values');
  const given = (values ?? {}) as Record<string, unknown>;
  const byName = new Map(t.parameters.map((p) => [p.name, p]));
  const unknown = Object.keys(given).find((k) => !byName.has(k));
  if (unknown !== undefined) invalid(`params.${unknown}`, `is not a parameter of technique ${t.id}`);
  const out: Record<string, unknown> = {};
  for (const p of t.parameters) {
    const v = given[p.name] ?? p.default;
    if (v === undefined) {
      if (p.required) invalid(`params.${p.name}`, 'is required');
      continue;
    }
    if (!hasType(v, p.type)) invalid(`params.${p.name}`, `must be a ${p.type}`);
    out[p.name] = v;
  }
  return out;
}

/**
 * Expand technique `t` with parameter `values` for a node whose data (data.ts nodeData, secret
 * properties as SecretRef) is `data`. Values' own strings are rendered with the node data first,
 * so `${node.properties.owner}` works in a value as in a directive's params.
 */
export function instantiate(t: Technique, values: unknown, data: Record<string, unknown>): Instance {
  const reads = new Set<string>();
  const secrets = new Set<string>();
  const note = (r: { reads: string[]; secrets: string[] }) => {
    r.reads.forEach((x) => reads.add(x));
    r.secrets.forEach((x) => secrets.add(x));
  };
  const given = renderParams((values ?? {}) as Record<string, unknown>, data);
  note(given);
  const params = checkValues(t, isObject(values) ? given.params : values);
  const calls: TechniqueCall[] = [];
  const components = new Map<string, string>();
  t.calls.forEach((def, i) => {
    const f = `calls[${i}]`;
    let items: Array<{ id: string; item?: unknown }> = [{ id: def.id }];
    if (def.foreach !== undefined) {
      const list = (params[def.foreach] ?? []) as unknown[];
      if (list.length > TECHNIQUE_LIMITS.maxLoopItems) invalid(`params.${def.foreach}`, `has more than ${TECHNIQUE_LIMITS.maxLoopItems} items`);
      items = list.map((item, j) => ({ id: `${def.id}.${j}`, item }));
    }
    for (const { id, item } of items) {
      if (calls.length >= TECHNIQUE_LIMITS.maxExpandedCalls) invalid('calls', `expand to more than ${TECHNIQUE_LIMITS.maxExpandedCalls} calls`);
      const scope = { ...data, params, ...(def.foreach !== undefined && { item }) };
      const rendered = withField(`${f}.params`, () => renderParams(def.params, scope));
      note(rendered);
      methodCheck(def.method, rendered.params, `${f}.params`, 'ERR_METHOD_PARAMS');
      const component = def.name !== undefined
        ? withField(`${f}.name`, () => renderTemplate(def.name!, scope))
        : expectedComponents(def.method, rendered.params)[0]!.component;
      if (component.length === 0 || component.length > 256 || /[\r\n]/.test(component)) invalid(`${f}.name`, 'must render to one line of 1 to 256 characters');
      const before = components.get(component);
      if (before !== undefined) invalid(`${f}.name`, `gives component "${component}", which call ${before} reports already: name the calls apart`);
      components.set(component, id);
      calls.push({
        id, component, method: def.method, params: rendered.params,
        ...(def.condition !== undefined && { condition: def.condition }), ...(def.if !== undefined && { if: def.if }), ...(def.mode !== undefined && { mode: def.mode }),
      });
    }
  });
  return { params, calls, reads: [...reads].sort(), secrets: [...secrets].sort() };
}

/** A template error of one field, with the field's path in front. */
function withField<T>(prefix: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (!isCapstanError(err) || !err.code.startsWith('ERR_TEMPLATE')) throw err;
    const field = typeof err.details?.field === 'string' ? `${prefix}.${err.details.field}` : prefix;
    throw capstanError(err.code as 'ERR_TEMPLATE', `${field}: ${err.message}`, { details: { ...err.details, field } });
  }
}

/** The bundle directive of an instance (bundle.ts): `method: "technique"`, the calls expanded. */
export function techniqueDirective(
  d: { id: string; name: string; mode: DirectiveMode; rule_id: string; condition?: string },
  t: Pick<Technique, 'id' | 'version'>,
  instance: Instance,
): BundleDirective {
  return {
    id: d.id, name: d.name, method: TECHNIQUE_METHOD, technique: { id: t.id, version: t.version }, params: instance.params,
    calls: instance.calls, mode: d.mode, rule_id: d.rule_id, ...(d.condition !== undefined && { condition: d.condition }),
  };
}

