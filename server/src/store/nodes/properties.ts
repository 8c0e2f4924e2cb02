/**
 * A node's own properties as `node_properties` rows, for both backends. A plain property's value
 * is its JSON text (schema 24). A secret one (docs/policy.md, Secrets) is the JSON text of
 * `{"\u0000secret": <its text>}`: no plain value can be that, since no key of a property's value
 * may hold U+0000 (checkProperties), so the mark needs no column of its own. A secret is never
 * among `node_property_leaves`: filters do not see it, so no filter can be used to guess it.
 */
import { capstanError } from '@capstan/shared/errors';
import type { JsonValue } from '@capstan/shared/filter/properties';
import { checkProperties, PROPERTY_LIMITS } from './inventory/indexing.js';

const SECRET_KEY = '\u0000secret';

/** A node's own properties: plain JSON values, and secrets (their text) by name. */
export interface NodePropertyLevel {
  properties: Record<string, JsonValue>;
  secrets: Record<string, string>;
}

/** Limits on a node's secrets: each value at most this many UTF-8 bytes (what a bundle seals). */
export const NODE_SECRET_MAX_BYTES = 64 * 1024;

/** The stored text of a secret. */
export const secretCell = (text: string): string => JSON.stringify({ [SECRET_KEY]: text });

/** A stored value: a plain JSON value, or a secret's text. */
export function readCell(text: string): { value: JsonValue } | { secret: string } {
  const v = JSON.parse(text) as JsonValue;
  if (v !== null && typeof v === 'object' && !Array.isArray(v) && Object.hasOwn(v, SECRET_KEY) && typeof v[SECRET_KEY] === 'string') return { secret: v[SECRET_KEY] };
  return { value: v };
}

/** Rows `(key, value)` of one node as its level. */
export function levelOf(rows: Iterable<{ key: string; value: string }>): NodePropertyLevel {
  const out: NodePropertyLevel = { properties: {}, secrets: {} };
  for (const r of rows) {
    const c = readCell(r.value);
    if ('secret' in c) out.secrets[r.key] = c.secret;
    else out.properties[r.key] = c.value;
  }
  return out;
}

/**
 * What a write stores: the plain properties checked (checkProperties), the secrets as text of at
 * most NODE_SECRET_MAX_BYTES, no name in both, at most PROPERTY_LIMITS.maxProperties in all.
 */
export function checkLevel(properties: unknown, secrets: unknown): NodePropertyLevel {
  const plain = checkProperties(properties);
  const bad = (m: string, field = 'properties'): never => { throw capstanError('ERR_BAD_REQUEST', m, { details: { field } }); };
  if (!secrets || typeof secrets !== 'object' || Array.isArray(secrets)) bad('secrets must be an object of text by name');
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(secrets as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    if (k.length === 0 || k.length > PROPERTY_LIMITS.maxKeyLength) bad(`property names have 1 to ${PROPERTY_LIMITS.maxKeyLength} characters`);
    if (Object.hasOwn(plain, k)) bad(`property ${k} is given both plain and secret`, `properties.${k}`);
    if (typeof v !== 'string' || Buffer.byteLength(v) > NODE_SECRET_MAX_BYTES) bad(`secret ${k} must be text of at most ${NODE_SECRET_MAX_BYTES} bytes`, `properties.${k}.value`);
    out[k] = v as string;
  }
  if (Object.keys(plain).length + Object.keys(out).length > PROPERTY_LIMITS.maxProperties) bad(`at most ${PROPERTY_LIMITS.maxProperties} properties`);
  return { properties: plain, secrets: out };
}

/**
 * The level a write leaves: `secrets` given, exactly those; absent, the stored secrets whose
 * names `properties` does not give are kept (a plain write leaves the secrets alone).
 */
export function nextLevel(stored: Record<string, string>, properties: Record<string, JsonValue>, secrets: Record<string, string> | undefined): NodePropertyLevel {
  const kept = secrets ?? Object.fromEntries(Object.entries(stored).filter(([k]) => !Object.hasOwn(properties as object, k)));
  return checkLevel(properties, kept);
}

/** One node with own properties, as an export lists it: secrets by name only. */
export interface NodePropertiesRow {
  node_id: string;
  properties: Record<string, JsonValue>;
  secrets: string[];
}

/** Rows `(node_id, key, value)` in node order as one NodePropertiesRow per node. */
export function propertiesRows(rows: Iterable<{ node_id: string; key: string; value: string }>): NodePropertiesRow[] {
  const out: NodePropertiesRow[] = [];
  for (const r of rows) {
    let last = out[out.length - 1];
    if (last?.node_id !== r.node_id) out.push((last = { node_id: r.node_id, properties: {}, secrets: [] }));
    const c = readCell(r.value);
    if ('secret' in c) last.secrets.push(r.key);
    else last.properties[r.key] = c.value;
  }
  return out;
}

/** One stored row into a node's policy input: a plain value among its properties, a secret among its secrets. */
export function putCell(input: { properties: Record<string, JsonValue>; secrets?: Record<string, string> }, key: string, text: string): void {
  const c = readCell(text);
  if ('secret' in c) (input.secrets ??= {})[key] = c.secret;
  else input.properties[key] = c.value;
}
