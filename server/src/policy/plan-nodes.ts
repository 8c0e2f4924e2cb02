/**
 * Node properties in a plan (`nodes` of POST /api/1/policy/plan; `nodes/<id>.toml` in a policy
 * directory): each listed node's own properties as the file gives them, in the level form
 * (registry/node-properties.ts), compared with what the node has. A listed node's own properties
 * become exactly the file's; a node the request does not list is left alone, prune or not: the
 * files manage the nodes they name, and values set on other nodes by other means stay.
 */
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import type { NodePropertyLevel, Store } from '../store/store.js';
import { EMPTY_LEVEL, levelChanges, levelView, parseNodeLevel, type LevelChange } from '../registry/node-properties.js';
import { MAX_FILTER_VALUES } from '../registry/filters.js';
import { checkId } from './model.js';
import { isPlainObject, type LeafOrigin, type Origin } from './properties.js';
import { jsonBytes, UNBOUNDED, type PlanBounds } from './plan-memory.js';

/** A node's own properties as a plan request gives them: the level form, secrets possibly as `{"secret": true}`. */
export interface NodeFileDef {
  id: string;
  properties: Record<string, unknown>;
}

/** A listed node whose own properties change: what it has and what it would have. */
export interface NodeLevelChange {
  id: string;
  before: NodePropertyLevel;
  after: NodePropertyLevel;
  changes: LevelChange[];
}

function bad(message: string, field: string): never {
  throw capstanError('ERR_BAD_REQUEST', message, { details: { field } });
}

/** One item of `nodes`: `{id, properties}`, checked for its shape (the values in nodeLevelChanges). */
export function parseNodeFile(item: unknown): NodeFileDef {
  if (!isPlainObject(item)) bad('must be an object {"id", "properties"}', '');
  const o = item as Record<string, unknown>;
  const unknown = Object.keys(o).filter((k) => k !== 'id' && k !== 'properties');
  if (unknown.length) bad(`unknown fields: ${unknown.join(', ')}`, unknown[0]!);
  const id = checkId(o.id);
  const properties = o.properties ?? {};
  if (!isPlainObject(properties)) throw capstanError('ERR_PROPERTIES_INVALID', 'properties must be an object of {value, secret?} by name', { details: { field: 'properties' } });
  return { id, properties: properties as Record<string, unknown> };
}

/**
 * The listed nodes whose own properties would change, and how many would not. Each must be a
 * node the registry knows (`nodes[i].id`); its properties are checked as a save checks them
 * (`nodes[i].properties.<name>.value`), a secret given as `{"secret": true}` keeping the node's.
 */
export async function nodeLevelChanges(store: Store, files: readonly NodeFileDef[], bounds: PlanBounds = UNBOUNDED): Promise<{ changed: NodeLevelChange[]; unchanged: number }> {
  const known = new Set<string>();
  for (let i = 0; i < files.length; i += MAX_FILTER_VALUES) {
    bounds.checkNow();
    for (const id of await store.listNodeIds([{ key: 'id', values: files.slice(i, i + MAX_FILTER_VALUES).map((f) => f.id) }])) known.add(id);
  }
  const changed: NodeLevelChange[] = [];
  let unchanged = 0;
  for (let i = 0; i < files.length; i += MAX_FILTER_VALUES) {
    const chunk = files.slice(i, i + MAX_FILTER_VALUES);
    // Only nodes with properties are in the answer; the others have none.
    const stored = await store.policyNodeInputs(chunk.map((f) => f.id), {});
    for (const [j, f] of chunk.entries()) {
      bounds.check();
      if (!known.has(f.id)) bad(`node ${f.id} is unknown`, `nodes[${i + j}].id`);
      const s = stored.get(f.id);
      const before = s ? { properties: s.properties, secrets: s.secrets ?? {} } : EMPTY_LEVEL;
      let after: NodePropertyLevel;
      try {
        after = parseNodeLevel(f.properties, before, 'properties', f.id);
      } catch (err) {
        if (!isCapstanError(err)) throw err;
        throw capstanError(err.code as 'ERR_PROPERTIES_INVALID', `nodes[${i + j}]: ${err.message}`, { details: { ...err.details, field: `nodes[${i + j}].${String(err.details?.field)}` } });
      }
      const changes = levelChanges(before, after);
      if (changes.length === 0) {
        unchanged++;
        continue;
      }
      bounds.charge(jsonBytes(before) + jsonBytes(after), `the properties of node ${f.id}`);
      changed.push({ id: f.id, before, after, changes });
    }
  }
  return { changed, unchanged };
}

/** A listed node's change as the plan shows it: the property names, and each change without a secret's value. */
export function nodeChangeView(c: NodeLevelChange): { kind: 'node'; id: string; action: 'update'; fields: string[]; properties: LevelChange[]; object: Record<string, unknown> } {
  return { kind: 'node', id: c.id, action: 'update', fields: c.changes.map((x) => x.name), properties: c.changes, object: { id: c.id, properties: levelView(c.after) } };
}

/** A leaf of a node's effective properties as a plan shows it: a secret's without its value. */
export interface ShownLeaf {
  path: string[];
  value?: unknown;
  secret?: true;
  origin: Origin;
}

/** The leaves of a merge as they may be shown (`secrets`: the names that are secret). */
export function shownLeaves(origins: readonly LeafOrigin[], secrets: readonly string[]): ShownLeaf[] {
  const secret = new Set(secrets);
  return origins.map((o) => (secret.has(o.path[0]!) ? { path: o.path, secret: true as const, origin: o.origin } : { path: o.path, value: o.value, origin: o.origin }));
}

/** A leaf whose value or origin changes, before and after (absent: no leaf at that path). */
export interface LeafChange {
  path: string[];
  before?: Omit<ShownLeaf, 'path'>;
  after?: Omit<ShownLeaf, 'path'>;
}

/** The leaves that change between two sides, in path order. */
export function leafChanges(before: readonly ShownLeaf[], after: readonly ShownLeaf[]): LeafChange[] {
  const key = (l: ShownLeaf) => JSON.stringify(l.path);
  const text = (l: ShownLeaf | undefined) => (l ? JSON.stringify([l.value, l.secret === true, l.origin]) : '');
  const was = new Map(before.map((l) => [key(l), l]));
  const now = new Map(after.map((l) => [key(l), l]));
  const out: LeafChange[] = [];
  for (const k of [...new Set([...was.keys(), ...now.keys()])].sort()) {
    const [b, a] = [was.get(k), now.get(k)];
    if (text(b) === text(a)) continue;
    const strip = (l: ShownLeaf) => ({ ...(Object.hasOwn(l, 'value') && { value: l.value }), ...(l.secret && { secret: true as const }), origin: l.origin });
    out.push({ path: (a ?? b)!.path, ...(b && { before: strip(b) }), ...(a && { after: strip(a) }) });
  }
  return out;
}
