/**
 * Node data: the one set of names that filters (`fact:<path>`), conditions (`fact('<path>')`) and
 * templates (`{{ <path> }}`) read, so that one word means one thing everywhere
 * (docs/policy.md, "Node data").
 *
 * The namespace is the node's inventory document (`os.name`, `fqdn`, `cpus.count`,
 * `disks.0.size`, `interfaces.0.name`, `machine_id`, …) with the node's custom facts also hoisted
 * to the top level, as Puppet and Salt present them: the custom fact `role` is `role` everywhere,
 * and stays reachable at its place in the inventory, `facts.role`. A custom fact never shadows an
 * inventory field (the inventory wins; the fact stays at `facts.<name>`), nor a reserved name.
 * Conditions and templates also see `node.*`, the registry's view: `node.id`, `node.hostname`,
 * `node.relay` and `node.properties.<path>`.
 *
 * Left out of the namespace: `packages` (the filter language has `package:<name>`, and a list of
 * thousands of pairs is no fact) and `certificate` (a PEM nobody filters on, and the biggest leaf
 * an index would keep per node).
 */
import { flattenFacts } from '../filter/evaluate.js';

/** Inventory fields that are not node data (see the module comment). */
export const EXCLUDED_FIELDS: ReadonlySet<string> = new Set(['packages', 'certificate']);

/**
 * Top-level names the namespace reserves: `node` (the registry's view), and in a technique's
 * calls `params` (its parameters) and `item` (the current loop item). An inventory field or
 * custom fact of such a name is reachable only at its place (`facts.node`).
 */
export const RESERVED_NAMES: ReadonlySet<string> = new Set(['node', 'params', 'item']);

/** Limits on a path: as long as a filter key may be, and no deeper than the facts index goes. */
export const PATH_LIMITS = { maxLength: 255, maxSegments: 16 } as const;

/** The registry's view of a node, under `node.*`. */
export interface NodeView {
  id: string;
  hostname: string;
  /** The node's policy server (relay) id. */
  relay: string;
  /** Its effective properties (global < groups < node), without the secret ones on the agent. */
  properties: Record<string, unknown>;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * The inventory as node data: every field but the excluded ones, and each custom fact at the
 * top level too where no inventory field or reserved name has it. Custom facts come first in key
 * order, so that a bounded walk (the filter index) keeps them before the inventory's long lists.
 */
export function factTree(inventory: unknown): Record<string, unknown> {
  const doc = isObject(inventory) ? inventory : {};
  const out: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
  const custom = isObject(doc.facts) ? doc.facts : {};
  for (const [k, v] of Object.entries(custom)) {
    if (!Object.hasOwn(doc, k) && !RESERVED_NAMES.has(k) && !EXCLUDED_FIELDS.has(k)) out[k] = v;
  }
  for (const [k, v] of Object.entries(doc)) {
    if (!EXCLUDED_FIELDS.has(k) && !RESERVED_NAMES.has(k)) out[k] = v;
  }
  return out;
}

/** What conditions and templates read: the fact tree plus `node.*`. */
export function nodeData(inventory: unknown, node: NodeView): Record<string, unknown> {
  const tree = factTree(inventory);
  tree.node = { id: node.id, hostname: node.hostname, relay: node.relay, properties: node.properties };
  return tree;
}

/**
 * A path's segments. Path syntax: names separated by dots (`os.name`), a list's items by their
 * 0-based index (`disks.0.size`); a name holding a dot cannot be reached. Null for a path that is
 * empty, has an empty segment, holds NUL, or is beyond PATH_LIMITS: it names nothing.
 */
export function parsePath(path: string): string[] | null {
  if (typeof path !== 'string' || path.length === 0 || path.length > PATH_LIMITS.maxLength || path.includes('\u0000')) return null;
  const segs = path.split('.');
  if (segs.length > PATH_LIMITS.maxSegments || segs.some((s) => s.length === 0)) return null;
  return segs;
}

/**
 * The value at `path`, or undefined. Only own properties are read, and a list only by an index
 * in range, so no path reaches a prototype (`constructor`, `__proto__`, `length`).
 */
export function lookupPath(tree: unknown, path: string | readonly string[]): unknown {
  const segs = typeof path === 'string' ? parsePath(path) : path;
  if (segs === null) return undefined;
  let cur: unknown = tree;
  for (const s of segs) cur = child(cur, s);
  return cur;
}

/** One step down: an own key of an object, or an index of a list. */
export function child(v: unknown, key: string): unknown {
  if (Array.isArray(v)) return /^(0|[1-9]\d{0,8})$/.test(key) && Number(key) < v.length ? v[Number(key)] : undefined;
  if (v !== null && typeof v === 'object' && Object.hasOwn(v, key)) return (v as Record<string, unknown>)[key];
  return undefined;
}

/**
 * What the filter language indexes of an inventory (`fact:<path>`): the fact tree flattened to
 * dotted paths, within FACT_LIMITS (filter/evaluate.ts). The server's index and the in-memory
 * evaluation both take it from here.
 */
export function indexedFacts(inventory: unknown): Array<[string, string]> {
  return flattenFacts(factTree(inventory));
}
