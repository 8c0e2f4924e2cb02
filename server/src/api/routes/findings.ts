/**
 * Admin API: findings, the audit non-compliances and errors of nodes' components, open or closed
 * (docs/api.md, docs/events.md). Newest first; nodes chosen with the filter language (`q`), by
 * id, rule, directive, kind, status and age; CSV or JSON (a CSV export streams page by page).
 */
import type { FastifyInstance } from 'fastify';
import { parseDuration } from '@capstan/shared/config';
import { capstanError } from '@capstan/shared/errors';
import { FINDING_KINDS, type FindingKind, type FindingQuery, type FindingRecord, type Reads } from '../../reads.js';
import { exportFormat, sendRows } from '../export.js';
import { idList, paging, single, timeParam, type Query } from '../params.js';

const bad = (message: string): never => {
  throw capstanError('ERR_BAD_REQUEST', message);
};

const KNOWN = ['status', 'kind', 'node', 'rule', 'directive', 'q', 'min_age', 'from', 'to', 'page', 'per_page', 'format', 'diff'];

/** A finding query from the query string (the API's and the command lines'); `now` measures min_age. */
export function findingQuery(q: Query, now: Date = new Date()): FindingQuery {
  const unknown = Object.keys(q).filter((k) => !KNOWN.includes(k));
  if (unknown.length) bad(`unknown parameter ${unknown[0]}`);
  const status = single(q, 'status');
  if (status !== undefined && status !== 'open' && status !== 'closed' && status !== 'all') bad('status must be open, closed or all');
  const kind = single(q, 'kind');
  if (kind !== undefined && !FINDING_KINDS.includes(kind as FindingKind)) bad(`kind must be one of ${FINDING_KINDS.join(', ')}`);
  const expr = single(q, 'q');
  const minAge = single(q, 'min_age');
  let to = timeParam(q, 'to');
  if (minAge !== undefined) {
    const ms = parseDuration(minAge);
    if (ms === null || ms < 0) bad('min_age must be a duration such as 30m, 12h or 7d');
    const before = new Date(now.getTime() - ms!).toISOString();
    to = to === undefined || before < new Date(to).toISOString() ? before : to;
  }
  const from = timeParam(q, 'from');
  const [nodes, rules, directives] = [idList(q, 'node'), idList(q, 'rule'), idList(q, 'directive')];
  return {
    ...(status !== undefined && status !== 'all' && { status: status as 'open' | 'closed' }), ...(kind !== undefined && { kind: kind as FindingKind }),
    ...(nodes && { node_ids: nodes }), ...(rules && { rule_ids: rules }), ...(directives && { directive_ids: directives }),
    ...(expr !== undefined && { filters: [{ key: 'q', values: [expr] }] }),
    ...(from !== undefined && { first_seen_from: from }), ...(to !== undefined && { first_seen_to: to }),
  };
}

const CSV_COLUMNS: ReadonlyArray<readonly [string, (f: FindingRecord) => unknown]> = [
  ['id', (f) => f.id], ['status', (f) => f.status], ['kind', (f) => f.kind], ['node_id', (f) => f.node_id], ['rule_id', (f) => f.rule_id],
  ['directive_id', (f) => f.directive_id], ['component', (f) => f.component], ['key', (f) => f.key_value], ['event_type', (f) => f.event_type],
  ['message', (f) => f.message], ['first_seen_at', (f) => f.first_seen_at], ['first_run_id', (f) => f.first_run_id],
  ['last_seen_at', (f) => f.last_seen_at], ['last_run_id', (f) => f.last_run_id], ['runs', (f) => f.runs],
  ['closed_at', (f) => f.closed_at], ['closed_run_id', (f) => f.closed_run_id], ['close_reason', (f) => f.close_reason],
];

/** Rows a CSV export reads per page. */
const EXPORT_PAGE = 1000;

export function findingRoutes(app: FastifyInstance, store: Reads): void {
  app.get<{ Querystring: Query }>('/api/1/findings', async (req, reply) => {
    const format = exportFormat(req);
    const q = findingQuery(req.query);
    const diff = single(req.query, 'diff');
    if (diff !== undefined && diff !== 'true' && diff !== 'false') bad('diff must be true or false');
    const strip = (f: FindingRecord) => (diff === 'false' ? { ...f, diff: null, has_diff: f.diff !== null } : { ...f, has_diff: f.diff !== null });
    if (format === 'json') {
      const { page, per_page } = paging(req.query, 100);
      const res = await store.listFindings(q, page, per_page);
      return { data: res.data.map(strip), total: res.total };
    }
    // CSV: the whole selection, page by page (paging parameters are the JSON list's).
    if (req.query.page !== undefined || req.query.per_page !== undefined) bad('a CSV export is not paged: it holds every finding selected');
    return sendRows<FindingRecord>(reply, 'csv', 'findings', CSV_COLUMNS, async function* () {
      for (let page = 1; ; page++) {
        const res = await store.listFindings(q, page, EXPORT_PAGE);
        yield res.data;
        if (res.data.length < EXPORT_PAGE) return;
      }
    });
  });
}
