/**
 * Pieces of the list queries that both backends must build identically, so that one test suite
 * can hold them to the same answers.
 */
import { capstanError } from '@capstan/shared';
import type { NodeListQuery, NodeRecord } from './store.js';

/** Every column of `nodes`, in one order both backends read and write them in. */
export const NODE_COLUMNS = [
  'id', 'hostname', 'status', 'state', 'accepted', 'certificate', 'certificate_fingerprint',
  'os_name', 'os_version', 'agent_version', 'policy_server', 'created_at', 'updated_at',
  'accepted_at', 'last_inventory_at', 'last_run_at', 'last_config_id',
] as const satisfies readonly (keyof NodeRecord)[];

/** The columns of `runs` a RunRecord is made of (everything but the log itself). */
export const RUN_COLUMNS = [
  'id', 'node_id', 'started_at', 'config_id', 'complete', 'report_count', 'counts', 'outcomes',
  'file_name', 'sha256', 'received_at',
] as const;

/** The escape character used in every LIKE pattern we build (`ESCAPE '\'`). */
export const LIKE_ESCAPE = '\\';

/**
 * Turn a hostname prefix filter into a LIKE pattern. The value is the user's text, not a
 * pattern: `%` and `_` (and the escape character itself) must match literally, or `web_1`
 * would also list `webX1`. A trailing `*` is the documented spelling of "prefix" and is dropped.
 */
export function hostnamePrefixPattern(prefix: string): string {
  const bare = prefix.endsWith('*') ? prefix.slice(0, -1) : prefix;
  return bare.replace(/[\\%_]/g, (c) => LIKE_ESCAPE + c) + '%';
}

/** Paging values come from query strings; reject nonsense instead of computing negative offsets. */
export function checkPaging(page: number, perPage: number): { limit: number; offset: number } {
  if (!Number.isSafeInteger(page) || page < 1) throw capstanError('ERR_BAD_REQUEST', 'page must be an integer ≥ 1');
  if (!Number.isSafeInteger(perPage) || perPage < 1) throw capstanError('ERR_BAD_REQUEST', 'per_page must be an integer ≥ 1');
  return { limit: perPage, offset: (page - 1) * perPage };
}

/**
 * The WHERE clause of `listNodes`, shared by the count and the page query so the total always
 * describes the same set. `param` returns the dialect's placeholder for the next value; `like`
 * is the dialect's case-insensitive LIKE (hostnames are case-insensitive in DNS).
 */
export function nodeFilter(
  q: NodeListQuery,
  param: (value: unknown) => string,
  like: 'LIKE' | 'ILIKE',
): string {
  const where: string[] = [];
  if (q.accepted !== undefined) where.push(`accepted = ${param(q.accepted)}`);
  if (q.status !== undefined) where.push(`status = ${param(q.status)}`);
  if (q.hostname !== undefined && q.hostname !== '' && q.hostname !== '*') {
    if (q.hostname.includes('\u0000')) throw capstanError('ERR_BAD_REQUEST', 'hostname contains a NUL character');
    where.push(`hostname ${like} ${param(hostnamePrefixPattern(q.hostname))} ESCAPE '${LIKE_ESCAPE}'`);
  }
  return where.length ? `WHERE ${where.join(' AND ')}` : '';
}
