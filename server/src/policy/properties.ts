/**
 * Node properties, merged: JSON values at three levels — global, policy group, node — make one
 * node's effective properties, global < groups (ascending `priority`, 0 by default) < node.
 * Objects merge key by key; lists and scalars are replaced whole (RUDDER's default inheritance).
 * Each leaf keeps its origin (which level, which group) and what it overrode. Pure: the policy
 * generation calls it and decides (docs/policy.md, Properties).
 *
 * Conflict: two groups of equal priority that set one path to different values, where not both
 * are objects. The merge returns the conflicts, each with both groups; the node's policy is then
 * not generated (ERR_PROPERTY_CONFLICT). A conflict is a property of the groups alone: neither a
 * group of higher priority nor the node's own value settles it, as in RUDDER, so removing a
 * node's override can never bring a conflict to light later. Give one group a higher priority.
 *
 * A property is secret when any level marks it so ("once secret, always secret": a level that
 * overrides part of a secret cannot make the rest readable).
 */
import { capstanError } from '@capstan/shared/errors';
import type { JsonValue } from '@capstan/shared/filter/properties';

/** A JSON value, as properties hold them at every level (the node level's type, shared with filters). */
export type Json = JsonValue;

export interface PropertyInput {
  value: Json;
  secret?: boolean;
}

/** Properties of one level, by name. */
export type PropertySet = Record<string, PropertyInput>;

export interface GroupProperties {
  id: string;
  priority?: number;
  properties: PropertySet;
}

export type Origin = { level: 'global' } | { level: 'group'; id: string } | { level: 'node' };

/** Where one leaf of the effective properties comes from, and what it replaced. */
export interface LeafOrigin {
  /** The leaf's path: the property's name, then keys (lists are leaves). */
  path: string[];
  value: Json;
  origin: Origin;
  /** Values that level replaced at this path (or under it, with their own path), earliest first. */
  overridden?: Array<{ origin: Origin; value: Json; path: string[] }>;
}

export interface Conflict {
  path: string[];
  priority: number;
  /** The groups of that priority that set the path, by id, with their values. */
  groups: Array<{ id: string; value: Json }>;
}

export interface MergedProperties {
  effective: Record<string, Json>;
  /** One entry per leaf of `effective`, sorted by path. */
  origins: LeafOrigin[];
  /** Names of the secret properties, sorted. */
  secrets: string[];
  /** Empty unless two groups of equal priority disagree; sorted by path. */
  conflicts: Conflict[];
}

/** Limits on one level's properties. */
export const PROPERTY_SET_LIMITS = { maxProperties: 500, maxNameLength: 255, maxValueBytes: 64 * 1024, maxDepth: 16, maxPriority: 1_000_000 } as const;
/** Names: letters, digits, `_` and `-` (no dot: a name is the first step of a path). */
export const PROPERTY_NAME = /^[A-Za-z0-9_][A-Za-z0-9_-]*$/;

export const isPlainObject = (v: unknown): v is { [k: string]: Json } => v !== null && typeof v === 'object' && !Array.isArray(v);

/** One value merged over another: objects key by key, anything else replaces. */
export function mergeValues(under: Json | undefined, over: Json): Json {
  if (!isPlainObject(over) || !isPlainObject(under)) return structuredClone(over);
  const out: { [k: string]: Json } = { ...under };
  for (const [k, v] of Object.entries(over)) out[k] = mergeValues(Object.hasOwn(under, k) ? under[k] : undefined, v);
  return out;
}

export function deepEqual(a: Json, b: Json): boolean {
  if (a === b) return true;
  if (Array.isArray(a) || Array.isArray(b)) return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => deepEqual(x, b[i]!));
  if (!isPlainObject(a) || !isPlainObject(b)) return false;
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => Object.hasOwn(b, k) && deepEqual(a[k]!, b[k]!));
}

const key = (path: readonly string[]) => JSON.stringify(path);

/** The leaves of `v` under `path`: itself unless it is a non-empty object. */
function leaves(v: Json, path: string[], out: Array<[string[], Json]> = []): Array<[string[], Json]> {
  if (isPlainObject(v) && Object.keys(v).length > 0) for (const [k, x] of Object.entries(v)) leaves(x, [...path, k], out);
  else out.push([path, v]);
  return out;
}

class Merger {
  readonly effective: Record<string, Json> = {};
  private readonly origins = new Map<string, LeafOrigin>();

  apply(set: PropertySet, origin: Origin): void {
    for (const [name, { value }] of Object.entries(set)) {
      this.effective[name] = this.at([name], Object.hasOwn(this.effective, name) ? this.effective[name] : undefined, value, origin);
    }
  }

  private at(path: string[], under: Json | undefined, over: Json, origin: Origin): Json {
    if (isPlainObject(over) && isPlainObject(under)) {
      const out: { [k: string]: Json } = { ...under };
      for (const [k, v] of Object.entries(over)) out[k] = this.at([...path, k], Object.hasOwn(under, k) ? under[k] : undefined, v, origin);
      // An empty object that was a leaf, now filled: the leaves under it carry the origins.
      if (Object.keys(out).length > 0) this.origins.delete(key(path));
      return out;
    }
    // Replaced: the leaves at or under this path are what the new value overrides.
    const overridden: NonNullable<LeafOrigin['overridden']> = [];
    const prefix = key(path).slice(0, -1);
    for (const [k, o] of [...this.origins]) {
      if (k === key(path) || k.startsWith(`${prefix},`)) {
        overridden.push(...(o.overridden ?? []), { origin: o.origin, value: o.value, path: o.path });
        this.origins.delete(k);
      }
    }
    const value = structuredClone(over);
    const fresh = leaves(value, path);
    // Each new leaf lists what it replaced on its own branch: the same path, above it or under it.
    const onBranch = (a: string[], b: string[]) => a.slice(0, Math.min(a.length, b.length)).every((s, i) => s === b[i]);
    for (const [p, v] of fresh) {
      const mine = overridden.filter((x) => onBranch(x.path, p));
      this.origins.set(key(p), { path: p, value: v, origin, ...(mine.length > 0 && { overridden: mine }) });
    }
    return value;
  }

  sortedOrigins(): LeafOrigin[] {
    return [...this.origins.values()].sort((a, b) => (key(a.path) < key(b.path) ? -1 : 1));
  }
}

/** Where groups of one priority disagree (module comment); symmetric, whatever their order. */
function tierConflicts(path: string[], entries: Array<{ id: string; value: Json }>, priority: number, out: Conflict[]): void {
  if (entries.length < 2) return;
  if (entries.every((e) => isPlainObject(e.value))) {
    const keys = [...new Set(entries.flatMap((e) => Object.keys(e.value as object)))].sort();
    for (const k of keys) {
      const sub = entries.filter((e) => Object.hasOwn(e.value as object, k)).map((e) => ({ id: e.id, value: (e.value as { [k: string]: Json })[k]! }));
      tierConflicts([...path, k], sub, priority, out);
    }
    return;
  }
  if (entries.every((e) => deepEqual(e.value, entries[0]!.value))) return;
  out.push({ path, priority, groups: [...entries].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)) });
}

/** A node's effective properties, their origins, its secrets and the conflicts among its groups. */
export function mergeProperties(global: PropertySet, groups: readonly GroupProperties[], node: PropertySet): MergedProperties {
  const ordered = [...groups].sort((a, b) => (a.priority ?? 0) - (b.priority ?? 0) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const m = new Merger();
  m.apply(global, { level: 'global' });
  for (const g of ordered) m.apply(g.properties, { level: 'group', id: g.id });
  m.apply(node, { level: 'node' });

  const conflicts: Conflict[] = [];
  const tiers = new Map<number, GroupProperties[]>();
  for (const g of ordered) tiers.set(g.priority ?? 0, [...(tiers.get(g.priority ?? 0) ?? []), g]);
  for (const [priority, tier] of tiers) {
    if (tier.length < 2) continue;
    const names = [...new Set(tier.flatMap((g) => Object.keys(g.properties)))].sort();
    for (const name of names) {
      tierConflicts([name], tier.filter((g) => Object.hasOwn(g.properties, name)).map((g) => ({ id: g.id, value: g.properties[name]!.value })), priority, conflicts);
    }
  }
  conflicts.sort((a, b) => (key(a.path) < key(b.path) ? -1 : key(a.path) > key(b.path) ? 1 : a.priority - b.priority));

  const secrets = new Set<string>();
  for (const set of [global, ...groups.map((g) => g.properties), node]) {
    for (const [name, p] of Object.entries(set)) if (p.secret === true) secrets.add(name);
  }
  return { effective: m.effective, origins: m.sortedOrigins(), secrets: [...secrets].sort(), conflicts };
}

function depthOf(v: Json): number {
  if (Array.isArray(v)) return 1 + Math.max(0, ...v.map(depthOf));
  if (isPlainObject(v)) return 1 + Math.max(0, ...Object.values(v).map(depthOf));
  return 0;
}

/**
 * One level's properties as an admin sends them, `{<name>: {value, secret?}}`, checked against
 * PROPERTY_SET_LIMITS; ERR_PROPERTIES_INVALID naming the field. A secret's value is a string (it
 * is sealed as text).
 */
export function checkPropertySet(v: unknown, field = 'properties'): PropertySet {
  const bad = (f: string, m: string): never => { throw capstanError('ERR_PROPERTIES_INVALID', `${f} ${m}`, { details: { field: f } }); };
  if (!isPlainObject(v)) bad(field, 'must be an object of {value, secret?} by name');
  const entries = Object.entries(v as object);
  if (entries.length > PROPERTY_SET_LIMITS.maxProperties) bad(field, `holds more than ${PROPERTY_SET_LIMITS.maxProperties} properties`);
  const out: PropertySet = {};
  for (const [name, p] of entries) {
    const f = `${field}.${name}`;
    if (name.length > PROPERTY_SET_LIMITS.maxNameLength || !PROPERTY_NAME.test(name)) bad(f, `is not a property name (letters, digits, _ and -, at most ${PROPERTY_SET_LIMITS.maxNameLength})`);
    if (!isPlainObject(p) || !Object.hasOwn(p, 'value') || Object.keys(p).some((k) => k !== 'value' && k !== 'secret')) bad(f, 'must be {value, secret?}');
    const { value, secret } = p as { value: Json; secret?: unknown };
    if (secret !== undefined && typeof secret !== 'boolean') bad(`${f}.secret`, 'must be true or false');
    if (secret === true && typeof value !== 'string') bad(`${f}.value`, 'of a secret must be a string');
    const text = JSON.stringify(value);
    if (text === undefined || Buffer.byteLength(text) > PROPERTY_SET_LIMITS.maxValueBytes) bad(`${f}.value`, `must be JSON of at most ${PROPERTY_SET_LIMITS.maxValueBytes} bytes`);
    if (depthOf(value) > PROPERTY_SET_LIMITS.maxDepth) bad(`${f}.value`, `is nested deeper than ${PROPERTY_SET_LIMITS.maxDepth}`);
    out[name] = { value: JSON.parse(text) as Json, ...(secret === true && { secret: true }) };
  }
  return out;
}

/** A group's priority: an integer, 0 when absent. */
export function checkPriority(v: unknown, field = 'priority'): number {
  if (v === undefined) return 0;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || Math.abs(v) > PROPERTY_SET_LIMITS.maxPriority) {
    throw capstanError('ERR_PROPERTIES_INVALID', `${field} must be an integer between -${PROPERTY_SET_LIMITS.maxPriority} and ${PROPERTY_SET_LIMITS.maxPriority}`, { details: { field } });
  }
  return v;
}
