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
import { capstanError } from '@capstan/shared';
import { isFilterKey } from '../store/query.js';
import { SORT_FIELDS, type NodeFilter, type NodeListQuery, type SortField } from '../store/store.js';

export type Query = Record<string, string | string[] | undefined>;

export const MAX_PER_PAGE = 1000;

function bad(message: string): never {
  throw capstanError('ERR_BAD_REQUEST', message);
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

export function paging(q: Query, dfltPerPage = 100, maxPerPage = MAX_PER_PAGE): { page: number; per_page: number } {
  return { page: intParam(q, 'page', 1, 1_000_000), per_page: intParam(q, 'per_page', dfltPerPage, maxPerPage) };
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
  if (!/^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}/.test(v)) bad(`${name} must be an RFC 3339 time`);
  return v;
}
