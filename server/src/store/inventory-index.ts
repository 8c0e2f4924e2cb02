/**
 * What the filter language reads of an inventory (migration 15), computed once per inventory
 * in the same way for both stores: OS and hardware, package (name, version) pairs with their
 * version keys, interface addresses as keys, and the flattened facts.
 */
import { addressKey, capstanError, factNumber, flattenFacts, versionKey } from '@capstan/shared';

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
    facts: flattenFacts(doc.facts ?? {}).map(([path, value]) => ({ path, value, num: factNumber(value) })),
  };
}

/** Limits on an admin's node properties. */
export const PROPERTY_LIMITS = { maxProperties: 100, maxKeyLength: 255, maxValueLength: 4096 } as const;

/** Properties are a flat object of strings, within PROPERTY_LIMITS (ERR_BAD_REQUEST otherwise). */
export function checkProperties(v: unknown): Record<string, string> {
  const bad = (m: string): never => { throw capstanError('ERR_BAD_REQUEST', m, { details: { field: 'properties' } }); };
  if (!v || typeof v !== 'object' || Array.isArray(v)) bad('properties must be an object of strings');
  const entries = Object.entries(v as Record<string, unknown>);
  if (entries.length > PROPERTY_LIMITS.maxProperties) bad(`at most ${PROPERTY_LIMITS.maxProperties} properties`);
  for (const [k, x] of entries) {
    if (k.length === 0 || k.length > PROPERTY_LIMITS.maxKeyLength || k.includes('\u0000')) bad(`property names have 1 to ${PROPERTY_LIMITS.maxKeyLength} characters, no NUL`);
    if (typeof x !== 'string' || x.length > PROPERTY_LIMITS.maxValueLength || x.includes('\u0000')) bad(`property ${k} must be a string of at most ${PROPERTY_LIMITS.maxValueLength} characters, no NUL`);
  }
  return Object.fromEntries(entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) as Record<string, string>;
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
