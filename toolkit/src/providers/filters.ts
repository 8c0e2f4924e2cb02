/**
 * Discovery filters: include/exclude by region prefix and by tag with AWS wildcard semantics
 * (`*` any run of characters, `?` exactly one, `\` makes the next character literal), the way
 * EC2's own `tag:<key>` filters read, so an admin's filter means the same here as in the console.
 */
import { capstanError } from '@capstan/shared/errors';
import type { DiscoveredInstance, DiscoveryFilters, TagFilter } from './types.js';

export const MAX_FILTER_ENTRIES = 50;
const MAX_TEXT = 256;
const CONTROL = /[\u0000-\u001f\u007f]/;

function bad(message: string): never {
  throw capstanError('ERR_MANAGER_FILTER', message);
}

/** AWS wildcard pattern → anchored RegExp. A trailing lone `\` is refused by the validator. */
export function wildcard(pattern: string): RegExp {
  let re = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === '\\' && i + 1 < pattern.length) re += escapeRe(pattern[++i]!);
    else if (c === '*') re += '[\\s\\S]*';
    else if (c === '?') re += '[\\s\\S]';
    else re += escapeRe(c);
  }
  return new RegExp(`^${re}$`, 'u');
}

const escapeRe = (c: string) => c.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');

function text(v: unknown, where: string): string {
  if (typeof v !== 'string' || v.length === 0 || v.length > MAX_TEXT || CONTROL.test(v)) {
    bad(`${where} must be a string of 1 to ${MAX_TEXT} characters without control characters`);
  }
  return v;
}

function list<T>(v: unknown, where: string, item: (x: unknown, w: string) => T): T[] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) bad(`${where} must be an array`);
  if (v.length > MAX_FILTER_ENTRIES) bad(`${where} has more than ${MAX_FILTER_ENTRIES} entries`);
  return v.map((x, i) => item(x, `${where}[${i}]`));
}

function tagFilter(v: unknown, where: string): TagFilter {
  if (!v || typeof v !== 'object' || Array.isArray(v)) bad(`${where} must be {"key", "values"}`);
  const { key, values, ...rest } = v as Record<string, unknown>;
  if (Object.keys(rest).length > 0) bad(`${where} has unknown fields: ${Object.keys(rest).join(', ')}`);
  const vs = list(values, `${where}.values`, (x, w) => {
    const s = text(x, w);
    if (/(^|[^\\])(\\\\)*\\$/.test(s)) bad(`${w} ends with a lone "\\" (escape it as "\\\\")`);
    return s;
  });
  if (vs.length === 0) bad(`${where}.values needs at least one value`);
  return { key: text(key, `${where}.key`), values: vs };
}

function object(v: unknown, where: string, allowed: string[]): Record<string, unknown> {
  if (v === undefined) return {};
  if (!v || typeof v !== 'object' || Array.isArray(v)) bad(`${where} must be an object`);
  const extra = Object.keys(v).filter((k) => !allowed.includes(k));
  if (extra.length > 0) bad(`${where} has unknown fields: ${extra.join(', ')}`);
  return v as Record<string, unknown>;
}

/**
 * Check filters as an admin wrote them: `{regions?: {include?, exclude?}, tags?: {include?, exclude?}}`.
 * A region prefix both included and excluded, or a tag key in both lists, cannot be meant.
 */
export function checkDiscoveryFilters(raw: unknown): DiscoveryFilters {
  const f = object(raw, 'filters', ['regions', 'tags']);
  const r = object(f.regions, 'filters.regions', ['include', 'exclude']);
  const t = object(f.tags, 'filters.tags', ['include', 'exclude']);
  const out: DiscoveryFilters = {
    regions: {
      include: list(r.include, 'filters.regions.include', text),
      exclude: list(r.exclude, 'filters.regions.exclude', text),
    },
    tags: {
      include: list(t.include, 'filters.tags.include', tagFilter),
      exclude: list(t.exclude, 'filters.tags.exclude', tagFilter),
    },
  };
  const both = out.regions.include.filter((p) => out.regions.exclude.includes(p));
  if (both.length > 0) throw capstanError('ERR_FILTER_CONFLICT', `region prefix ${both[0]} is both included and excluded`);
  const keys = new Set(out.tags.include.map((x) => x.key));
  const clash = out.tags.exclude.find((x) => keys.has(x.key));
  if (clash) throw capstanError('ERR_FILTER_CONFLICT', `tag ${clash.key} is both included and excluded`);
  return out;
}

const tagMatches = (f: TagFilter, tags: Record<string, string>): boolean => {
  const v = tags[f.key];
  return v !== undefined && f.values.some((p) => wildcard(p).test(v));
};

/** Whether the manager's filters keep a region (used to skip whole regions before listing). */
export function regionKept(f: DiscoveryFilters, region: string): boolean {
  if (f.regions.include.length > 0 && !f.regions.include.some((p) => region.startsWith(p))) return false;
  return !f.regions.exclude.some((p) => region.startsWith(p));
}

/** Every include tag filter must match (values ORed), no exclude tag filter may. */
export function instanceKept(f: DiscoveryFilters, i: DiscoveredInstance): boolean {
  if (!regionKept(f, i.region)) return false;
  if (!f.tags.include.every((x) => tagMatches(x, i.tags))) return false;
  return !f.tags.exclude.some((x) => tagMatches(x, i.tags));
}

export function applyFilters(f: DiscoveryFilters, instances: DiscoveredInstance[]): DiscoveredInstance[] {
  return instances.filter((i) => instanceKept(f, i));
}
