/**
 * Query-string and body parameters of the admin API, checked at the door: an unknown parameter is
 * a typo the caller wants to hear about (ERR_BAD_REQUEST), not something to ignore silently.
 *
 * Node filters come in two spellings, which may be mixed:
 * - `<key>=<value>` (repeatable): an include filter; several values of one key are ORed;
 * - `filter=<JSON {"key", "values", "exclude"}>` (repeatable): any filter, exclusions included.
 * `tag:<key>=<value>` filters on a tag. The shorthand `hostname=<prefix>` keeps the first API's
 * meaning (always a prefix).
 */
import { capstanError } from '@capstan/shared/errors';
import { isFilterKey } from '../registry/filters.js';
import { parseRfc3339 } from '../reads.js';
import { MAX_FILTER_IDS, SORT_FIELDS, type NodeFilter, type NodeListQuery, type SortField } from '../reads.js';

export type Query = Record<string, string | string[] | undefined>;

/**
 * The largest page of every admin list (nodes, pending nodes, history, runs, jobs). One bound
 * for all: a row of any of them is at most a few kB, so a page is at most a few MB of JSON.
 */
export const MAX_PER_PAGE = 1000;

function bad(message: string): never {
  throw capstanError('ERR_BAD_REQUEST', message);
}

/** Ids of a parameter that may repeat and hold comma-separated values; undefined when absent. */
export function idList(q: Query, name: string): string[] | undefined {
  const v = q[name];
  if (v === undefined) return undefined;
  const values = (Array.isArray(v) ? v : [v]).flatMap((s) => s.split(',')).filter((s) => s.length > 0);
  if (values.length > MAX_FILTER_IDS) bad(`at most ${MAX_FILTER_IDS} ${name} ids in one query`);
  return values;
}

/** One value of a parameter given at most once. */
export function single(q: Query, name: string): string | undefined {
  const v = q[name];
  if (Array.isArray(v)) bad(`${name} may be given once`);
  return v;
}

export function intParam(q: Query, name: string, dflt: number, max: number): number {
  const v = single(q, name);
  if (v === undefined) return dflt;
  if (!/^\d{1,9}$/.test(v) || Number(v) < 1 || Number(v) > max) bad(`${name} must be an integer from 1 to ${max}`);
  return Number(v);
}

export function paging(q: Query, dfltPerPage = 100): { page: number; per_page: number } {
  return { page: intParam(q, 'page', 1, 1_000_000), per_page: intParam(q, 'per_page', dfltPerPage, MAX_PER_PAGE) };
}

/** A boolean parameter: `true`/`1` or `false`/`0`, anything else refused (`reports=maybe`). */
export function boolParam(q: Query, name: string): boolean | undefined {
  const v = single(q, name);
  if (v === undefined) return undefined;
  if (v === 'true' || v === '1') return true;
  if (v === 'false' || v === '0') return false;
  bad(`${name} must be true or false`);
}

const values = (v: string | string[]) => (Array.isArray(v) ? v : [v]);

function parseFilterJson(text: string): NodeFilter {
  let f: unknown;
  try {
    f = JSON.parse(text);
  } catch {
    bad('filter must be a JSON object {"key", "values", "exclude"}');
  }
  if (!f || typeof f !== 'object' || Array.isArray(f)) bad('filter must be a JSON object {"key", "values", "exclude"}');
  const { key, values: vs, exclude, ...rest } = f as Record<string, unknown>;
  if (Object.keys(rest).length) bad(`filter has unknown fields: ${Object.keys(rest).join(', ')}`);
  if (typeof key !== 'string' || !isFilterKey(key)) bad(`unknown filter key ${JSON.stringify(key)}`);
  const list = typeof vs === 'string' ? [vs] : vs;
  if (!Array.isArray(list)) bad('filter values must be a string or an array of strings');
  if (exclude !== undefined && typeof exclude !== 'boolean') bad('filter exclude must be true or false');
  return { key, values: list as string[], exclude: exclude === true };
}

/** Node filters from a query string, leaving out the names in `reserved` (paging, sorting…). */
export function filtersFrom(q: Query, reserved: readonly string[]): NodeFilter[] {
  const filters: NodeFilter[] = [];
  for (const [name, v] of Object.entries(q)) {
    if (v === undefined || reserved.includes(name)) continue;
    if (name === 'filter') {
      for (const text of values(v)) filters.push(parseFilterJson(text));
    } else if (name === 'hostname') {
      // The first API's hostname filter: always a prefix.
      filters.push({ key: 'hostname', values: values(v).map((h) => (h.endsWith('*') ? h : `${h}*`)) });
    } else if (isFilterKey(name)) {
      filters.push({ key: name, values: values(v) });
    } else {
      bad(`unknown parameter ${name}`);
    }
  }
  return filters;
}

/** GET /api/1/nodes: filters, sort, order, paging. */
export function nodeListQuery(q: Query): NodeListQuery {
  const sort = single(q, 'sort');
  if (sort !== undefined && !SORT_FIELDS.includes(sort as SortField)) bad(`sort must be one of ${SORT_FIELDS.join(', ')}`);
  const order = single(q, 'order');
  if (order !== undefined && order !== 'asc' && order !== 'desc') bad('order must be asc or desc');
  return {
    filters: filtersFrom(q, ['page', 'per_page', 'sort', 'order']),
    ...(sort !== undefined && { sort: sort as SortField }),
    ...(order !== undefined && { order }),
    ...paging(q),
  };
}

/** A JSON body that must be an object with only the listed fields. */
export function bodyObject(body: unknown, allowed: readonly string[]): Record<string, unknown> {
  if (!body || typeof body !== 'object' || Array.isArray(body)) bad('body must be a JSON object');
  const unknown = Object.keys(body).filter((k) => !allowed.includes(k));
  if (unknown.length) bad(`unknown fields: ${unknown.join(', ')}`);
  return body as Record<string, unknown>;
}

/** An RFC 3339 time parameter (checked again by the store, which normalises it). */
export function timeParam(q: Query, name: string): string | undefined {
  const v = single(q, name);
  if (v === undefined) return undefined;
  if (parseRfc3339(v) === undefined) bad(`${name} must be an RFC 3339 time such as 2026-11-22T10:00:00Z`);
  return v;
}

/** A parameter's type; a list is an enum of its values. */
type ParamType = 'boolean' | 'integer' | 'time' | 'text' | readonly string[];

/**
 * The query parameters of each admin route and their types, checked before the route runs: a
 * misspelt parameter or a value of the wrong type answers 400, never a silent default. A route
 * not listed takes no query parameter; `own` routes check theirs (filters) themselves.
 */
const PAGING = { page: 'integer', per_page: 'integer' } as const;
const FORMAT = ['csv', 'json'] as const;
const ADMIN_QUERIES: Record<string, Record<string, ParamType> | 'own'> = {
  'GET /api/1/nodes': 'own',
  'GET /api/1/nodes/pending': 'own',
  'GET /api/1/compliance': 'own',
  'GET /api/1/compliance/nodes': 'own',
  // max_age: a copy up to that many seconds old will do (the console's dashboard and lists).
  'GET /api/1/compliance/rules': { format: FORMAT, max_age: 'integer' },
  'GET /api/1/compliance/directives': { format: FORMAT, max_age: 'integer' },
  'GET /api/1/compliance/groups': { format: FORMAT, max_age: 'integer' },
  'GET /api/1/compliance/history': { from: 'time', to: 'time' },
  'GET /api/1/compliance/rules/:id/nodes': { ...PAGING, directive: 'text', state: 'text', order: ['asc', 'desc'] },
  'GET /api/1/lifecycle': { max_age: 'integer' },
  'GET /api/1/compliance/worst-nodes': { limit: 'integer', max_age: 'integer' },
  'GET /api/1/changes': 'own',
  'GET /api/1/changes/histogram': 'own',
  'GET /api/1/findings': 'own',
  // Vulnerabilities: the routes check their own parameters (routes/vulns.ts).
  'GET /api/1/vulnerabilities': 'own',
  'GET /api/1/vulnerabilities/fixes': 'own',
  'GET /api/1/score': 'own',
  'POST /api/1/vulnerabilities/feeds/refresh': { wait: 'boolean' },
  'GET /api/1/events': 'own',
  'GET /api/1/deliveries': { ...PAGING, subscription: 'text', state: ['pending', 'delivered', 'dead'] },
  'GET /api/1/jobs': 'own',
  'GET /api/1/campaigns': 'own',
  'GET /api/1/jobs/:id/tasks/:node/output': { after: 'text' },
  'GET /api/1/nodes/:id/history': PAGING,
  'GET /api/1/nodes/:id/inventory/history': PAGING,
  'GET /api/1/groups/:id/nodes': PAGING,
  'GET /api/1/software': { ...PAGING, name: 'text' },
  'GET /api/1/node-properties': PAGING,
  'GET /api/1/nodes/:id/runs': { ...PAGING, reports: 'boolean', from: 'time', to: 'time' },
  'DELETE /api/1/keys/:kid': { force: 'boolean' },
  'POST /api/1/policy/plan': { max_nodes: 'integer' },
  'GET /api/1/policy/group-preview': 'own',
  'GET /api/1/change-requests': { ...PAGING, status: ['open', 'approved', 'rejected', 'deployed'] },
  // The choice (keep, delete, state:<state>) is parsed by the route.
  'DELETE /api/1/managers/:id': { nodes: 'text' },
  'GET /api/1/admins': PAGING,
  'GET /api/1/audit': { ...PAGING, from: 'time', to: 'time', admin: 'text', actor: 'text', action: 'text', target: 'text', result: ['ok', 'error'] },
};

/** Check an admin request's query parameters against its route's list (see ADMIN_QUERIES). */
export function checkAdminQuery(method: string, route: string | undefined, q: Query): void {
  if (route === undefined) return;
  const spec = ADMIN_QUERIES[`${method} ${route}`] ?? {};
  if (spec === 'own') return;
  for (const name of Object.keys(q)) {
    const type = spec[name];
    if (type === undefined) bad(`unknown parameter ${name}`);
    if (type === 'boolean') boolParam(q, name);
    else if (type === 'integer') intParam(q, name, 1, name === 'per_page' ? MAX_PER_PAGE : 1_000_000);
    else if (type === 'time') timeParam(q, name);
    else if (type === 'text') single(q, name);
    else {
      const v = single(q, name);
      if (v !== undefined && !type.includes(v)) bad(`${name} must be one of ${type.join(', ')}`);
    }
  }
}
