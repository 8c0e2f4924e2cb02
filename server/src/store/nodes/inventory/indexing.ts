/**
 * What the filter language reads of an inventory (migration 15), computed once per inventory
 * in the same way for both stores: OS and hardware, package (name, version) pairs with their
 * version keys, interface addresses as keys, and the node data `fact:<path>` reads, flattened
 * (the whole inventory but its packages, custom facts also at the top level: policy/data.ts).
 */
import { capstanError } from '@capstan/shared/errors';
import { factNumber } from '@capstan/shared/filter/evaluate';
import { addressKey } from '@capstan/shared/filter/parse';
import { propertyLeaves, type JsonValue, type PropertyLeaf } from '@capstan/shared/filter/properties';
import { indexedFacts } from '@capstan/shared/policy/data';
import { compareVersions, versionKey } from '@capstan/shared/filter/version';

export interface InventoryIndex {
  fqdn: string | null;
  os_kernel: string | null;
  arch: string | null;
  os_version_key: string | null;
  cpus: number | null;
  memory: number | null;
  packages: Array<{ name: string; version: string; key: string }>;
  addresses: string[];
  facts: Array<{ path: string; value: string; num: number | null }>;
}

/** Limits on what of one inventory is made queryable (the document itself keeps everything). */
export const INDEX_LIMITS = { maxPackages: 20_000, maxAddresses: 1024, maxText: 1024 } as const;

const text = (v: unknown): string | null =>
  typeof v === 'string' && v.length <= INDEX_LIMITS.maxText && !v.includes('\u0000') ? v : null;
const count = (v: unknown): number | null => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : null);

export function indexInventory(doc: Record<string, unknown>): InventoryIndex {
  const os = (doc.os ?? {}) as Record<string, unknown>;
  const cpus = doc.cpus as unknown;
  const memory = doc.memory as unknown;
  const seen = new Set<string>();
  const packages: InventoryIndex['packages'] = [];
  for (const p of Array.isArray(doc.packages) ? doc.packages : []) {
    if (packages.length >= INDEX_LIMITS.maxPackages) break;
    const name = text((p as Record<string, unknown>)?.name);
    const version = text((p as Record<string, unknown>)?.version);
    if (name === null || version === null || name === '') continue;
    const id = `${name}\u0000${version}`;
    if (seen.has(id)) continue;
    seen.add(id);
    packages.push({ name, version, key: versionKey(version) });
  }
  const addresses = new Set<string>();
  for (const i of Array.isArray(doc.interfaces) ? doc.interfaces : []) {
    for (const a of Array.isArray((i as Record<string, unknown>)?.addresses) ? (i as { addresses: unknown[] }).addresses : []) {
      const raw = typeof a === 'string' ? a : text((a as Record<string, unknown>)?.address);
      const key = raw ? addressKey(raw) : null;
      if (key && addresses.size < INDEX_LIMITS.maxAddresses) addresses.add(key);
    }
  }
  const osVersion = text(os.version);
  return {
    fqdn: text(doc.fqdn),
    os_kernel: text(os.kernel),
    arch: text(os.arch),
    os_version_key: osVersion === null ? null : versionKey(osVersion),
    // `cpus` is {count, model} from Capstan agents; a bare number is accepted too.
    cpus: count(cpus) ?? count((cpus as Record<string, unknown> | null)?.count),
    memory: count(memory) ?? count((memory as Record<string, unknown> | null)?.total),
    packages,
    addresses: [...addresses],
    facts: indexedFacts(doc).map(([path, value]) => ({ path, value, num: factNumber(value) })),
  };
}

/**
 * Limits on an admin's node properties: names, and JSON values (each string in them at most
 * maxValueLength characters; the whole value at most maxValueBytes as JSON, maxDepth deep); all
 * of a node's properties make at most maxLeaves leaves for filters (shared/src/filter/properties.ts).
 */
export const PROPERTY_LIMITS = { maxProperties: 100, maxKeyLength: 255, maxValueLength: 4096, maxValueBytes: 64 * 1024, maxDepth: 16, maxLeaves: 1000 } as const;

/** A JSON value within PROPERTY_LIMITS, or the reason it is not. */
function valueFault(x: unknown, depth: number): string | null {
  if (x === null || typeof x === 'boolean') return null;
  if (typeof x === 'number') return Number.isFinite(x) ? null : 'holds a number JSON cannot carry';
  if (typeof x === 'string') return x.length > PROPERTY_LIMITS.maxValueLength || x.includes('\u0000') ? `holds a string longer than ${PROPERTY_LIMITS.maxValueLength} characters or with NUL` : null;
  if (typeof x !== 'object') return 'is not a JSON value';
  if (depth >= PROPERTY_LIMITS.maxDepth) return `is nested deeper than ${PROPERTY_LIMITS.maxDepth}`;
  for (const [k, v] of Array.isArray(x) ? x.entries() : Object.entries(x)) {
    if (typeof k === 'string' && (k.length > PROPERTY_LIMITS.maxKeyLength || k.includes('\u0000'))) return `holds a key longer than ${PROPERTY_LIMITS.maxKeyLength} characters or with NUL`;
    const fault = valueFault(v, depth + 1);
    if (fault) return fault;
  }
  return null;
}

/**
 * Properties are an object of JSON values by name, within PROPERTY_LIMITS (ERR_BAD_REQUEST
 * naming the property otherwise). A string value is what properties were until schema 24.
 */
export function checkProperties(v: unknown): Record<string, JsonValue> {
  const bad = (m: string, field = 'properties'): never => { throw capstanError('ERR_BAD_REQUEST', m, { details: { field } }); };
  if (!v || typeof v !== 'object' || Array.isArray(v)) bad('properties must be an object of JSON values by name');
  const entries = Object.entries(v as Record<string, unknown>);
  if (entries.length > PROPERTY_LIMITS.maxProperties) bad(`at most ${PROPERTY_LIMITS.maxProperties} properties`);
  for (const [k, x] of entries) {
    if (k.length === 0 || k.length > PROPERTY_LIMITS.maxKeyLength || k.includes('\u0000')) bad(`property names have 1 to ${PROPERTY_LIMITS.maxKeyLength} characters, no NUL`);
    const fault = valueFault(x, 0);
    if (fault) bad(`property ${k} ${fault}`, `properties.${k}`);
    if (Buffer.byteLength(JSON.stringify(x)) > PROPERTY_LIMITS.maxValueBytes) bad(`property ${k} is more than ${PROPERTY_LIMITS.maxValueBytes} bytes of JSON`, `properties.${k}`);
  }
  const out = Object.fromEntries(entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) as Record<string, JsonValue>;
  if (propertyLeaves(out).length > PROPERTY_LIMITS.maxLeaves) bad(`the properties hold more than ${PROPERTY_LIMITS.maxLeaves} leaves (values, empty objects and lists)`);
  return out;
}

/** The leaves of checked properties, one per (path, value) (the rows of node_property_leaves). */
export function propertyRows(props: Record<string, JsonValue>): PropertyLeaf[] {
  const seen = new Set<string>();
  return propertyLeaves(props).filter((l) => {
    const k = `${l.path}\u0000${l.value}`;
    return !seen.has(k) && (seen.add(k), true);
  });
}

/** A manual node's address is some node's already: 409 naming that node. */
export function addressTaken(address: string, nodeId: string): Error {
  return capstanError('ERR_ADDRESS_TAKEN', `node ${nodeId} already has address ${address}`, { details: { node: nodeId, address } });
}

/** A package-name glob (`*`, `?`) as an SQLite GLOB pattern: `[` and `]` are literal. */
export function softwarePattern(glob: string): string {
  if (glob.length === 0 || glob.length > 255 || glob.includes('\u0000')) {
    throw capstanError('ERR_BAD_REQUEST', 'name must be a package-name glob of 1 to 255 characters', { details: { field: 'name' } });
  }
  return glob.replace(/[[\]]/g, (c) => `[${c}]`);
}

/** One change between two inventories of a node. */
export interface InventoryChange {
  kind: 'package_added' | 'package_removed' | 'package_upgraded' | 'package_downgraded' | 'address_added' | 'address_removed' | 'kernel';
  name: string;
  from: string | null;
  to: string | null;
}

/** What the queryable part of an inventory was before, for the diff with the new one. */
export interface IndexedBefore {
  packages: Array<{ name: string; version: string }>;
  addresses: string[];
  kernel: string | null;
}

/** An address key (32 hex digits) back to its text: dotted for IPv4, uncompressed groups for IPv6. */
export function keyToAddress(key: string): string {
  if (key.startsWith('00000000000000000000ffff')) return [0, 2, 4, 6].map((i) => parseInt(key.slice(24 + i, 26 + i), 16)).join('.');
  return key.match(/.{4}/g)!.map((g) => g.replace(/^0{1,3}/, '')).join(':');
}

/**
 * Packages added, removed, upgraded or downgraded (a name with one version on each side; a name
 * with several versions shows as its versions added and removed), addresses and the kernel.
 */
export function diffInventory(before: IndexedBefore, after: InventoryIndex): InventoryChange[] {
  const out: InventoryChange[] = [];
  const group = (list: Array<{ name: string; version: string }>) => {
    const m = new Map<string, string[]>();
    for (const p of list) (m.get(p.name) ?? m.set(p.name, []).get(p.name)!).push(p.version);
    return m;
  };
  const was = group(before.packages);
  const now = group(after.packages);
  for (const name of [...new Set([...was.keys(), ...now.keys()])].sort()) {
    const a = (was.get(name) ?? []).filter((v) => !(now.get(name) ?? []).includes(v));
    const b = (now.get(name) ?? []).filter((v) => !(was.get(name) ?? []).includes(v));
    if (a.length === 1 && b.length === 1) {
      out.push({ kind: compareVersions(b[0]!, a[0]!) > 0 ? 'package_upgraded' : 'package_downgraded', name, from: a[0]!, to: b[0]! });
      continue;
    }
    for (const v of a) out.push({ kind: 'package_removed', name, from: v, to: null });
    for (const v of b) out.push({ kind: 'package_added', name, from: null, to: v });
  }
  const oldA = new Set(before.addresses);
  const newA = new Set(after.addresses);
  for (const k of [...oldA].filter((k) => !newA.has(k)).sort()) out.push({ kind: 'address_removed', name: keyToAddress(k), from: keyToAddress(k), to: null });
  for (const k of [...newA].filter((k) => !oldA.has(k)).sort()) out.push({ kind: 'address_added', name: keyToAddress(k), from: null, to: keyToAddress(k) });
  if (before.kernel !== after.os_kernel) out.push({ kind: 'kernel', name: 'kernel', from: before.kernel, to: after.os_kernel });
  return out;
}

/** Most changes recorded for one inventory (a reinstalled host): the rest are summed up in one row. */
export const MAX_CHANGES_PER_INVENTORY = 5000;
