/**
 * A node's own properties as filters read them (docs/filters.md, `property:`). A property is a
 * JSON value; `property:<path>` compares against its leaves, named like facts: the property's
 * name, then object keys and list indexes joined by dots (`property:site.room`,
 * `property:dns.0`). A leaf is a string, number, boolean, null, or an empty object or list;
 * it compares as text (a string as it is, anything else as its JSON: `true`, `3`, `{}`), and
 * ordering (`<` `<=` `>` `>=`) takes a number and holds for the leaves that read as one. Object
 * keys that are empty or hold a dot cannot be named by a path and are not filtered on. The SQL
 * of both stores (node_property_leaves) is made from these same leaves.
 */
import { factNumber, factText } from './evaluate.js';

/** A JSON value as a node property holds it. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [k: string]: JsonValue };

/** One leaf: its dotted path, its text, and its number when the text reads as one. */
export interface PropertyLeaf {
  path: string;
  value: string;
  num: number | null;
}

const isContainer = (v: unknown): v is object => v !== null && typeof v === 'object';

/** The leaves of a node's properties, in the order of their names and keys. */
export function propertyLeaves(properties: Record<string, unknown>): PropertyLeaf[] {
  const out: PropertyLeaf[] = [];
  const walk = (v: unknown, path: string) => {
    if (isContainer(v)) {
      const entries = Array.isArray(v) ? v.map((x, i) => [String(i), x] as const) : Object.entries(v);
      if (entries.length > 0) {
        for (const [k, x] of entries) if (k !== '' && !k.includes('.')) walk(x, `${path}.${k}`);
        return;
      }
    }
    if (v === undefined) return;
    const value = factText(v);
    out.push({ path, value, num: factNumber(value) });
  };
  for (const [name, v] of Object.entries(properties)) walk(v, name);
  return out;
}
