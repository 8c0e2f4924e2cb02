/**
 * The checks of node filters, wherever nodes are chosen (node list, compliance, groups, jobs):
 * which keys exist, the limits on what one request may ask for, and how filters on one key
 * merge. The store compiles what these let through (store/nodes/filters/query.ts); it applies
 * them through StoreRules, so a filter is refused the same way whoever asks.
 */
import { capstanError } from '@capstan/shared/errors';
import { FILTER_LIMITS, parseFilter } from '@capstan/shared/filter/parse';
import type { CheckedFilter, FilterKey, NodeFilter, NodeListQuery } from '../store/store.js';
import type { FilterRules } from '../store/rules.js';
import { parseRange } from '../store/nodes/filters/query.js';

// Limits on what one list request may ask for: every value becomes a bound parameter.
export const MAX_FILTERS = 32;
export const MAX_FILTER_VALUES = 100;
export const MAX_FILTER_VALUE_LENGTH = 512;

// `id` (exact node ids) lets the policy generator test one node against a group's filter.
// `managed_by` (manager ids, via node_managers) and `has_agent` (true/false) come from the managers.
// `relay` (true/false): the nodes registered as relays.
// `q`: an expression of the filter language (docs/filters.md); several are ORed.
const PLAIN_KEYS = new Set(['q', 'id', 'name', 'hostname', 'region', 'state', 'status', 'manager', 'group', 'accepted', 'last_run', 'managed_by', 'has_agent', 'relay']);
const ENUMS: Record<string, Set<string>> = {
  status: new Set(['unknown', 'reachable', 'unreachable']),
  accepted: new Set(['pending', 'accepted', 'refused']),
  has_agent: new Set(['true', 'false']),
  relay: new Set(['true', 'false']),
};

function bad(message: string): never {
  throw capstanError('ERR_BAD_REQUEST', message);
}

export function isFilterKey(key: string): key is FilterKey {
  return PLAIN_KEYS.has(key) || (key.startsWith('tag:') && key.length > 4 && key.length <= 132);
}

/**
 * Check the filters of a list query and merge them per key. Values of one key are ORed, so two
 * include filters on a key become one; an include and an exclude filter on the same key cannot be
 * meant (which would win?) and answer ERR_FILTER_CONFLICT. The legacy shorthands are filters too.
 */
export function checkFilters(q: Pick<NodeListQuery, 'filters' | 'accepted' | 'status' | 'hostname'>): CheckedFilter[] {
  const all: NodeFilter[] = [...(q.filters ?? [])];
  if (q.accepted !== undefined) all.push({ key: 'accepted', values: [q.accepted] });
  if (q.status !== undefined) all.push({ key: 'status', values: [q.status] });
  if (q.hostname !== undefined && q.hostname !== '' && q.hostname !== '*') {
    all.push({ key: 'hostname', values: [q.hostname.endsWith('*') ? q.hostname : `${q.hostname}*`] });
  }
  if (all.length > MAX_FILTERS) bad(`at most ${MAX_FILTERS} filters`);
  const byKey = new Map<string, CheckedFilter>();
  for (const f of all) {
    if (!f || typeof f !== 'object' || typeof f.key !== 'string' || !isFilterKey(f.key)) {
      bad(`unknown filter key ${JSON.stringify((f as { key?: unknown })?.key)}`);
    }
    if (!Array.isArray(f.values) || f.values.length === 0) bad(`filter ${f.key} needs at least one value`);
    if (f.values.length > MAX_FILTER_VALUES) bad(`filter ${f.key} has more than ${MAX_FILTER_VALUES} values`);
    if (f.exclude !== undefined && typeof f.exclude !== 'boolean') bad(`filter ${f.key}: exclude must be true or false`);
    for (const v of f.values) {
      if (typeof v !== 'string') bad(`filter ${f.key}: values must be strings`);
      const max = f.key === 'q' ? FILTER_LIMITS.maxLength : MAX_FILTER_VALUE_LENGTH;
      if (v.length > max) bad(`filter ${f.key}: a value is longer than ${max}`);
      if (v.includes('\u0000') || f.key.includes('\u0000')) bad(`filter ${f.key} contains a NUL character`);
      const allowed = ENUMS[f.key];
      if (allowed && !allowed.has(v)) bad(`${f.key} must be one of ${[...allowed].join(', ')}`);
      if (f.key === 'last_run') parseRange(v);
      if (f.key === 'q') parseFilter(v);
    }
    const exclude = f.exclude ?? false;
    const seen = byKey.get(f.key);
    if (!seen) {
      byKey.set(f.key, { key: f.key, values: [...new Set(f.values)], exclude });
    } else if (seen.exclude !== exclude) {
      throw capstanError('ERR_FILTER_CONFLICT', `filter ${f.key} is both included and excluded`);
    } else {
      seen.values = [...new Set([...seen.values, ...f.values])];
    }
  }
  return [...byKey.values()];
}

/** What the store applies to every list query's filters. */
export const FILTER_RULES: FilterRules = { check: checkFilters };
