/**
 * A node's own properties in the form the other levels have (a group's `properties`): by name,
 * `{"value": <JSON>}`, or `{"value": "<text>", "secret": true}` for a secret (docs/policy.md,
 * Properties and Secrets). A secret is write-only: shown as `{"secret": true}`, and given back
 * so, without a value, it keeps the stored one. Checked here (ERR_PROPERTIES_INVALID naming the
 * field); the API's `properties/own`, policy files' `nodes/<id>` and their plans read this form.
 */
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import type { JsonValue } from '@capstan/shared/filter/properties';
import { SECRET_LIMITS } from '@capstan/shared/policy/secrets';
import { deepEqual, isPlainObject, PROPERTY_NAME } from '../policy/properties.js';
import { checkProperties, PROPERTY_LIMITS } from '../store/nodes/inventory/indexing.js';
import { NODE_SECRET_MAX_BYTES, type NodePropertyLevel } from '../store/nodes/properties.js';

/** One property as shown: a secret without its value. */
export interface LevelEntry {
  value?: JsonValue;
  secret?: true;
}

/** A node's own properties as the API shows them, by name in order. */
export type LevelView = Record<string, LevelEntry>;

export const EMPTY_LEVEL: NodePropertyLevel = { properties: {}, secrets: {} };

/** The level as it may be shown, audited or planned: each secret `{"secret": true}`. */
export function levelView(l: NodePropertyLevel): LevelView {
  return shownLevel(l.properties, Object.keys(l.secrets));
}

/** Plain values and the names of the secrets (what a listing reads) as they may be shown. */
export function shownLevel(properties: Record<string, JsonValue>, secrets: readonly string[]): LevelView {
  const secret = new Set(secrets);
  const names = [...Object.keys(properties), ...secret].sort();
  return Object.fromEntries(names.map((n) => [n, secret.has(n) ? { secret: true as const } : { value: properties[n]! }]));
}

const invalid = (field: string, message: string): never => {
  throw capstanError('ERR_PROPERTIES_INVALID', `${field} ${message}`, { details: { field } });
};

/** A placeholder: `{"secret": true}` and nothing else (what levelView shows of a secret). */
export const isKeptSecret = (p: unknown): boolean => isPlainObject(p) && p.secret === true && !Object.hasOwn(p, 'value') && Object.keys(p).length === 1;

/**
 * A node's own properties as sent (`field` names where they are in the body), checked: a
 * placeholder takes the value of `stored`'s secret of that name, and is refused when there is
 * none (`<field>.<name>.value`); a secret's name is a property name (letters, digits, `_`, `-`)
 * of at most SECRET_LIMITS.maxNameLength characters and its value text of at most
 * NODE_SECRET_MAX_BYTES bytes; plain values have the limits of node properties (PROPERTY_LIMITS).
 */
export function parseNodeLevel(v: unknown, stored: NodePropertyLevel | null, field: string, owner: string): NodePropertyLevel {
  if (!isPlainObject(v)) invalid(field, 'must be an object of {value, secret?} by name');
  const entries = Object.entries(v as Record<string, unknown>);
  if (entries.length > PROPERTY_LIMITS.maxProperties) invalid(field, `holds more than ${PROPERTY_LIMITS.maxProperties} properties`);
  const plain: Record<string, unknown> = {};
  const secrets: Record<string, string> = {};
  for (const [name, p] of entries) {
    const f = `${field}.${name}`;
    if (isKeptSecret(p)) {
      const kept = stored && Object.hasOwn(stored.secrets, name) ? stored.secrets[name] : undefined;
      if (kept === undefined) invalid(`${f}.value`, `is required: node ${owner} has no saved secret ${name} to keep`);
      secrets[name] = kept!;
      continue;
    }
    if (!isPlainObject(p) || !Object.hasOwn(p, 'value') || Object.keys(p).some((k) => k !== 'value' && k !== 'secret')) invalid(f, 'must be {value, secret?}');
    const { value, secret } = p as { value: unknown; secret?: unknown };
    if (secret !== undefined && typeof secret !== 'boolean') invalid(`${f}.secret`, 'must be true or false');
    if (secret !== true) {
      plain[name] = value;
      continue;
    }
    if (name.length > SECRET_LIMITS.maxNameLength || !PROPERTY_NAME.test(name)) {
      invalid(f, `is not a secret's name (letters, digits, _ and -, at most ${SECRET_LIMITS.maxNameLength})`);
    }
    if (typeof value !== 'string') invalid(`${f}.value`, 'of a secret must be a string');
    if (Buffer.byteLength(value as string) > NODE_SECRET_MAX_BYTES || (value as string).includes('\u0000')) invalid(`${f}.value`, `must be text of at most ${NODE_SECRET_MAX_BYTES} bytes, without NUL`);
    secrets[name] = value as string;
  }
  try {
    return { properties: checkProperties(plain), secrets };
  } catch (err) {
    // The plain values' checks name `properties.<name>`: here that is `<field>.<name>.value`.
    if (!isCapstanError(err)) throw err;
    const inner = String(err.details?.field ?? '');
    const at = inner.startsWith('properties.') ? `${field}.${inner.slice('properties.'.length)}.value` : field;
    throw capstanError('ERR_PROPERTIES_INVALID', err.message, { details: { field: at } });
  }
}

/** One property a change of level creates, changes or removes; a secret's values are never in it. */
export interface LevelChange {
  name: string;
  action: 'create' | 'update' | 'delete';
  /** The property is (or was) secret: no value of a secret side is shown. */
  secret?: true;
  before?: JsonValue;
  after?: JsonValue;
}

/** What changes from `before` to `after`, by name; empty when they are the same. */
export function levelChanges(before: NodePropertyLevel, after: NodePropertyLevel): LevelChange[] {
  const side = (l: NodePropertyLevel, n: string) => (Object.hasOwn(l.secrets, n) ? { secret: l.secrets[n]! } : Object.hasOwn(l.properties, n) ? { value: l.properties[n]! } : null);
  const names = [...new Set([...Object.keys(before.properties), ...Object.keys(before.secrets), ...Object.keys(after.properties), ...Object.keys(after.secrets)])].sort();
  const out: LevelChange[] = [];
  for (const name of names) {
    const [b, a] = [side(before, name), side(after, name)];
    if (b && a && ('secret' in b ? 'secret' in a && a.secret === b.secret : 'value' in a && deepEqual(a.value as JsonValue, b.value))) continue;
    const c: LevelChange = { name, action: !b ? 'create' : !a ? 'delete' : 'update' };
    if ((b && 'secret' in b) || (a && 'secret' in a)) c.secret = true;
    if (b && 'value' in b) c.before = b.value;
    if (a && 'value' in a) c.after = a.value;
    out.push(c);
  }
  return out;
}
