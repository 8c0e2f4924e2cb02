/**
 * The policy model as an admin writes it (DESIGN.md "Policy model"): directives, groups and
 * rules, checked at the door. A directive's parameters go through the same validation the agent
 * applies (shared/src/policy/methods.ts), its condition through the agent's parser, and a group's
 * filter through the node list's own filter checks, so nothing the server accepts can be
 * refused later by the node for a reason the admin could have been told about.
 */
import { parseDuration } from '@capstan/shared/config';
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import { TECHNIQUE_METHOD, type Directive, type DirectiveMode } from '@capstan/shared/policy/bundle';
import { parseCondition } from '@capstan/shared/policy/condition';
import { validateMethodParams } from '@capstan/shared/policy/methods';
import { parseTechnique, type Technique } from '@capstan/shared/policy/technique';
import { templateNames } from '@capstan/shared/policy/template';
import { templated } from './render.js';
import { checkFilters, isFilterKey } from '../registry/filters.js';
import type { NodeFilter } from '../store/store.js';
import { checkPriority, checkPropertySet, isPlainObject, PROPERTY_NAME, PROPERTY_SET_LIMITS, type Json, type PropertySet } from './properties.js';

/** Ids travel in every report line, between `@@` separators: keep them to a safe alphabet. */
const ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
export const MAX_NAME_LENGTH = 256;
/** Limits on one object, so a single request cannot make generation unbounded. */
export const MAX_GROUP_NODES = 100_000;
export const MAX_RULE_REFS = 1000;
export const MAX_PARAMS_BYTES = 1024 * 1024;

export interface GroupDef {
  id: string;
  name: string;
  nodes?: string[];
  filter?: NodeFilter[];
  /**
   * What becomes of a silent member's last compliance (RUDDER's compliance expiration policy):
   * `expire_immediately` (the default: all its items are no answer once it missed its runs) or
   * `keep_last` for `duration` more. A node in several groups keeps the longest.
   */
  compliance_expiration?: { policy: 'expire_immediately' } | { policy: 'keep_last'; duration: string };
  /** Properties its members inherit (docs/policy.md, Properties), over the global ones. */
  properties?: PropertySet;
  /** Among a node's groups, a higher priority's properties win; equal priorities must agree. */
  priority?: number;
}

/** A global property: a policy object whose id is the property's name. */
export interface PropertyDef {
  id: string;
  value: Json;
  secret?: boolean;
}

/** Longest keep-last duration allowed on a group. */
export const MAX_KEEP_LAST_MS = 365 * 86_400_000;

/** Seconds a group keeps a silent member's last compliance (0: expire immediately). */
export function keepLastSeconds(g: GroupDef): number {
  const e = g.compliance_expiration;
  if (!e || e.policy !== 'keep_last') return 0;
  return Math.ceil((parseDuration(e.duration) ?? 0) / 1000);
}

export interface RuleDef {
  id: string;
  name: string;
  directives: string[];
  groups: string[];
}

/** Refused input; `field` (its path in the body) goes to the error's details and the answer. */
function bad(message: string, field?: string): never {
  throw capstanError('ERR_BAD_REQUEST', message, field === undefined ? {} : { details: { field } });
}

function onlyFields(body: unknown, allowed: readonly string[]): Record<string, unknown> {
  if (!body || typeof body !== 'object' || Array.isArray(body)) bad('body must be a JSON object');
  const unknown = Object.keys(body).filter((k) => !allowed.includes(k));
  if (unknown.length) bad(`unknown fields: ${unknown.join(', ')}`, unknown[0]);
  return body as Record<string, unknown>;
}

export function checkId(v: unknown, what = 'id'): string {
  if (typeof v !== 'string' || !ID.test(v)) bad(`${what} must be 1-128 letters, digits, '_', '.' or '-', starting with a letter or digit`, what);
  return v;
}

function name(v: unknown): string {
  if (typeof v !== 'string' || v.trim().length === 0 || v.length > MAX_NAME_LENGTH || v.includes('\u0000')) {
    bad(`name must be a non-empty string of at most ${MAX_NAME_LENGTH} characters`, 'name');
  }
  return v;
}

function idList(v: unknown, field: string, max: number): string[] {
  if (!Array.isArray(v)) bad(`${field} must be a list of ids`, field);
  if (v.length > max) bad(`${field} may hold at most ${max} ids`, field);
  v.forEach((x, i) => checkId(x, `${field}[${i}]`));
  return [...new Set(v as string[])];
}

/** A directive body (POST, or PUT with the id from the path). */
export function parseDirective(body: unknown, pathId?: string): Directive {
  const b = onlyFields(body, ['id', 'name', 'method', 'params', 'mode', 'condition', 'technique']);
  const id = checkId(b.id ?? pathId);
  if (pathId !== undefined && id !== pathId) bad('id in the body differs from the one in the path', 'id');
  if (typeof b.method !== 'string') throw capstanError('ERR_METHOD_PARAMS', 'method must be a string', { details: { field: 'method' } });
  const params = b.params ?? {};
  if (JSON.stringify(params).length > MAX_PARAMS_BYTES) throw capstanError('ERR_METHOD_PARAMS', `params larger than ${MAX_PARAMS_BYTES} bytes`, { details: { field: 'params' } });
  // A technique's directive: its values are checked against the stored technique by the
  // service (techniques.ts), which knows it; here only the reference's shape.
  const technique = b.method === TECHNIQUE_METHOD ? techniqueRef(b.technique, params) : undefined;
  if (technique === undefined && b.technique !== undefined) bad(`technique is only for method "${TECHNIQUE_METHOD}"`, 'technique');
  if (technique === undefined) methodParams(b.method, params);
  const mode = (b.mode ?? 'enforce') as DirectiveMode;
  if (mode !== 'enforce' && mode !== 'audit') bad('mode must be enforce or audit', 'mode');
  const d: Directive = { id, name: name(b.name ?? id), method: b.method, params: params as Record<string, unknown>, mode, ...(technique && { technique }) };
  if (b.condition !== undefined && b.condition !== null && b.condition !== '') {
    if (typeof b.condition !== 'string') throw capstanError('ERR_CONDITION_SYNTAX', 'condition must be a string', { details: { field: 'condition' } });
    try {
      parseCondition(b.condition); // ERR_CONDITION_SYNTAX with the position
    } catch (err) {
      if (isCapstanError(err)) throw capstanError('ERR_CONDITION_SYNTAX', err.message, { details: { field: 'condition' } });
      throw err;
    }
    d.condition = b.condition;
  }
  return d;
}

/**
 * A plain directive's params, checked by its method; the field named in the request body. A field
 * whose value is a template (`{{…}}`, `${node.…}`) is checked once rendered, for each node
 * (render.ts): here its template must parse, and the method may refuse it as written.
 */
function methodParams(method: string, params: unknown): void {
  try {
    validateMethodParams(method, params);
  } catch (err) {
    // The method names the field under params; the answer names it in the request body.
    const field = isCapstanError(err) ? err.details?.field : undefined;
    if (!isCapstanError(err) || typeof field !== 'string' || field === 'method' || field === 'params') throw err;
    const value = field.split('.').reduce<unknown>((v, k) => (v !== null && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined), params);
    if (typeof value === 'string' && templated(value)) {
      try {
        templateNames(value);
        return;
      } catch (e) {
        if (isCapstanError(e)) throw capstanError(e.code as Parameters<typeof capstanError>[0], e.message, { details: { ...e.details, field: `params.${field}` } });
        throw e;
      }
    }
    throw capstanError('ERR_METHOD_PARAMS', err.message, { details: { ...err.details, field: `params.${field}` } });
  }
}

/** `{"id", "version"}` of a technique directive, and its values an object. */
function techniqueRef(v: unknown, params: unknown): { id: string; version: string } {
  const t = onlyFieldsAt(v, 'technique', ['id', 'version']);
  if (typeof t.id !== 'string' || !/^[A-Za-z0-9_]{1,128}$/.test(t.id)) bad('technique.id must be a technique id (1-128 letters, digits or _)', 'technique.id');
  if (typeof t.version !== 'string' || !/^\d{1,6}\.\d{1,6}$/.test(t.version)) bad('technique.version must be a version such as "1.0"', 'technique.version');
  if (!params || typeof params !== 'object' || Array.isArray(params)) throw capstanError('ERR_METHOD_PARAMS', 'params must be an object of the technique\'s parameter values', { details: { field: 'params' } });
  return { id: t.id, version: t.version };
}

function onlyFieldsAt(v: unknown, field: string, allowed: readonly string[]): Record<string, unknown> {
  if (!v || typeof v !== 'object' || Array.isArray(v)) bad(`${field} must be an object {${allowed.map((a) => `"${a}"`).join(', ')}}`, field);
  const unknown = Object.keys(v).find((k) => !allowed.includes(k));
  if (unknown !== undefined) bad(`${field}.${unknown} is not a field of ${field}`, `${field}.${unknown}`);
  return v as Record<string, unknown>;
}

/**
 * A technique body (POST, or PUT with the id from the path): parseTechnique's checks, each fault
 * ERR_TECHNIQUE_INVALID naming its field. The object's id is the technique's id.
 */
export function parseTechniqueObject(body: unknown, pathId?: string): Technique {
  const b = body && typeof body === 'object' && !Array.isArray(body) && pathId !== undefined && (body as Record<string, unknown>).id === undefined ? { ...body, id: pathId } : body;
  const t = parseTechnique(b);
  if (pathId !== undefined && t.id !== pathId) bad('id in the body differs from the one in the path', 'id');
  return t;
}

/**
 * Groups every server has, whatever the admin defined: rules may target them; they cannot be
 * changed or deleted. Their members follow the registry like any dynamic group's.
 */
export const BUILTIN_GROUPS: readonly GroupDef[] = [
  { id: 'all-nodes', name: 'All nodes', filter: [] },
  { id: 'all-nodes-with-agent', name: 'All nodes with an agent', filter: [{ key: 'has_agent', values: ['true'] }] },
  { id: 'all-relays', name: 'All relays', filter: [{ key: 'relay', values: ['true'] }] },
];
export const BUILTIN_GROUP_IDS = new Set(BUILTIN_GROUPS.map((g) => g.id));

/**
 * Group filters: an expression of the filter language (docs/filters.md), or the node list's
 * `{key, values, exclude}` objects; both are checked by the node list's code. An expression is
 * kept as the filter `{"key": "q", "values": [<expression>]}`.
 */
function filters(v: unknown): NodeFilter[] {
  if (typeof v === 'string') v = [{ key: 'q', values: [v] }];
  if (!Array.isArray(v)) bad('filter must be a list of {"key", "values", "exclude"} objects', 'filter');
  const list = v.map((f, i): NodeFilter => {
    const o = onlyFields(f, ['key', 'values', 'exclude']);
    if (typeof o.key !== 'string' || !isFilterKey(o.key)) bad(`filter[${i}].key ${JSON.stringify(o.key)} is not a node filter key`, `filter[${i}].key`);
    const values = typeof o.values === 'string' ? [o.values] : o.values;
    return { key: o.key, values: values as string[], ...(o.exclude !== undefined && { exclude: o.exclude as boolean }) };
  });
  try {
    checkFilters({ filters: list });
  } catch (err) {
    if (isCapstanError(err)) throw capstanError(err.code as 'ERR_BAD_REQUEST', err.message, { details: { ...err.details, field: 'filter' } });
    throw err;
  }
  return list;
}

function expiration(v: unknown): NonNullable<GroupDef['compliance_expiration']> {
  const field = 'compliance_expiration';
  const o = onlyFields(v, ['policy', 'duration']);
  if (o.policy === 'expire_immediately') {
    if (o.duration !== undefined) bad('expire_immediately takes no duration', `${field}.duration`);
    return { policy: 'expire_immediately' };
  }
  if (o.policy !== 'keep_last') bad('compliance_expiration.policy must be expire_immediately or keep_last', `${field}.policy`);
  const ms = typeof o.duration === 'string' ? parseDuration(o.duration) : null;
  if (ms === null || ms <= 0 || ms > MAX_KEEP_LAST_MS) bad('keep_last needs a duration such as "1d", at most 365 days', `${field}.duration`);
  return { policy: 'keep_last', duration: o.duration as string };
}

export function parseGroup(body: unknown, pathId?: string): GroupDef {
  const b = onlyFields(body, ['id', 'name', 'nodes', 'filter', 'compliance_expiration', 'properties', 'priority']);
  const id = checkId(b.id ?? pathId);
  if (pathId !== undefined && id !== pathId) bad('id in the body differs from the one in the path', 'id');
  if (BUILTIN_GROUP_IDS.has(id)) throw capstanError('ERR_CONFLICT', `${id} is a built-in group: it cannot be changed`, { details: { field: 'id' } });
  const g: GroupDef = { id, name: name(b.name ?? id) };
  if (b.nodes !== undefined) {
    if (!Array.isArray(b.nodes) || b.nodes.some((n) => typeof n !== 'string' || n.length === 0 || n.length > 256 || n.includes('\u0000'))) {
      bad('nodes must be a list of node ids', 'nodes');
    }
    if (b.nodes.length > MAX_GROUP_NODES) bad(`nodes may hold at most ${MAX_GROUP_NODES} ids`, 'nodes');
    g.nodes = [...new Set(b.nodes as string[])].sort();
  }
  if (b.filter !== undefined) g.filter = filters(b.filter);
  if (g.nodes === undefined && g.filter === undefined) bad('a group needs nodes, a filter, or both', 'nodes');
  if (b.compliance_expiration !== undefined) g.compliance_expiration = expiration(b.compliance_expiration);
  if (b.properties !== undefined) g.properties = checkPropertySet(b.properties);
  if (b.priority !== undefined) g.priority = checkPriority(b.priority);
  return g;
}

/** A rule body; references are checked against the stored model by the caller. */
export function parseRule(body: unknown, pathId?: string): RuleDef {
  const b = onlyFields(body, ['id', 'name', 'directives', 'groups']);
  const id = checkId(b.id ?? pathId);
  if (pathId !== undefined && id !== pathId) bad('id in the body differs from the one in the path', 'id');
  return {
    id,
    name: name(b.name ?? id),
    directives: idList(b.directives ?? [], 'directives', MAX_RULE_REFS),
    groups: idList(b.groups ?? [], 'groups', MAX_RULE_REFS),
  };
}

/**
 * A global property body, `{id?, value, secret?}` (PUT /api/1/properties/<name>): checked by the
 * limits of one level's properties (properties.ts), ERR_PROPERTIES_INVALID naming the field.
 */
export function checkPropertyName(v: unknown, field = 'id'): string {
  if (typeof v !== 'string' || v.length > PROPERTY_SET_LIMITS.maxNameLength || !PROPERTY_NAME.test(v)) {
    throw capstanError('ERR_PROPERTIES_INVALID', `${field} must be a property name (letters, digits, _ and -, at most ${PROPERTY_SET_LIMITS.maxNameLength})`, { details: { field } });
  }
  return v;
}

export function parseProperty(body: unknown, pathId?: string): PropertyDef {
  const b = onlyFields(body, ['id', 'value', 'secret']);
  const id = checkPropertyName(b.id ?? pathId);
  if (pathId !== undefined && id !== pathId) bad('id in the body differs from the one in the path', 'id');
  if (!Object.hasOwn(b, 'value')) throw capstanError('ERR_PROPERTIES_INVALID', 'value is required', { details: { field: 'value' } });
  let checked: PropertySet;
  try {
    checked = checkPropertySet({ [id]: { value: b.value, ...(b.secret !== undefined && { secret: b.secret }) } });
  } catch (err) {
    // The set names `properties.<id>.value`; the body's own field is `value` (or `secret`).
    if (!isCapstanError(err)) throw err;
    const field = String(err.details?.field ?? '').replace(`properties.${id}`, '').replace(/^\./, '') || 'value';
    throw capstanError('ERR_PROPERTIES_INVALID', err.message.replace(`properties.${id}`, 'property'), { details: { field } });
  }
  const p = checked[id]!;
  return { id, value: p.value, ...(p.secret === true && { secret: true }) };
}

/**
 * A body as it may be shown, audited or planned: a secret property's value is left out (a
 * global property's own, and a group's secret properties), `"secret": true` says there is one.
 */
export function withoutSecrets(body: Record<string, unknown>): Record<string, unknown>;
export function withoutSecrets(body: Record<string, unknown> | null): Record<string, unknown> | null;
export function withoutSecrets(body: Record<string, unknown> | null): Record<string, unknown> | null {
  if (!body) return body;
  if (body.secret === true && 'value' in body) {
    const { value: _hidden, ...rest } = body;
    return rest;
  }
  const props = body.properties as Record<string, { value: unknown; secret?: boolean }> | undefined;
  if (!props || typeof props !== 'object' || !Object.values(props).some((p) => p?.secret === true)) return body;
  return { ...body, properties: Object.fromEntries(Object.entries(props).map(([k, p]) => [k, p.secret === true ? { secret: true } : p])) };
}

/**
 * A group body whose secret properties given as `{"secret": true}` (no value: what the API shows
 * of them) take the value of `saved`'s secret of that name (PolicyService.withKeptSecrets).
 * Anything else is left for parseGroup to check.
 */
export async function keepGroupSecrets(body: unknown, pathId: string | undefined, saved: (id: string) => Promise<{ body: Record<string, unknown> } | null>): Promise<unknown> {
  if (!isPlainObject(body) || !isPlainObject(body.properties)) return body;
  const props = body.properties as Record<string, unknown>;
  const kept = Object.keys(props).filter((k) => {
    const p = props[k];
    return isPlainObject(p) && p.secret === true && !Object.hasOwn(p, 'value') && Object.keys(p).length === 1;
  });
  if (kept.length === 0) return body;
  const id = typeof body.id === 'string' ? body.id : pathId;
  const before = typeof id === 'string' ? await saved(id) : null;
  const stored = (before?.body.properties ?? {}) as Record<string, { value?: unknown; secret?: boolean }>;
  const out: Record<string, unknown> = { ...props };
  for (const k of kept) {
    const s = Object.hasOwn(stored, k) ? stored[k] : undefined;
    if (s?.secret !== true || !Object.hasOwn(s, 'value')) {
      throw capstanError('ERR_PROPERTIES_INVALID', `properties.${k}.value is required: ${id ?? 'the group'} has no saved secret ${k} to keep`, { details: { field: `properties.${k}.value` } });
    }
    out[k] = { value: s.value, secret: true };
  }
  return { ...body, properties: out };
}
