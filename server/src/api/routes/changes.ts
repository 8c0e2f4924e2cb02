/**
 * Admin API: what the agents changed. Every `result_repaired` report is a change, labelled
 * intentional (the node's config changed since its previous run) or corrective (drift repaired),
 * with the diff its agent sent; an audit's non-compliance is a finding (routes/findings.ts).
 * Newest first; histogram for graphs.
 */
import type { FastifyInstance } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import { loadModel } from '../../policy/content.js';
import { CHANGE_LABELS, type ChangeLabel, type ChangeQuery, type Reads } from '../../reads.js';
import { exportFormat, sendRows } from '../export.js';
import { idList, paging, single, timeParam, type Query } from '../params.js';
import type { AggregateCache } from '../../console/cache.js';
import { maybeCached } from './compliance.js';

const bad = (message: string): never => {
  throw capstanError('ERR_BAD_REQUEST', message);
};

const KNOWN = ['from', 'to', 'node', 'rule', 'directive', 'group', 'label', 'page', 'per_page', 'format', 'by', 'diff', 'max_age'];

/** A change query from the query string; `group` (a policy group) becomes its members. */
async function changeQuery(store: Reads, q: Query): Promise<ChangeQuery> {
  const unknown = Object.keys(q).filter((k) => !KNOWN.includes(k));
  if (unknown.length) bad(`unknown parameter ${unknown[0]}`);
  const label = single(q, 'label');
  if (label !== undefined && !CHANGE_LABELS.includes(label as ChangeLabel)) bad(`label must be one of ${CHANGE_LABELS.join(', ')}`);
  const from = timeParam(q, 'from');
  const to = timeParam(q, 'to');
  let nodes = idList(q, 'node');
  const groups = idList(q, 'group');
  if (groups !== undefined) {
    const model = await loadModel(store);
    const members = new Set<string>();
    for (const id of groups) {
      const g = model.groups.get(id);
      if (!g) throw capstanError('ERR_NOT_FOUND', `no group ${id}`);
      g.nodes?.forEach((n) => members.add(n));
      if (g.filter) for (const n of await store.listNodeIds(g.filter)) members.add(n);
    }
    nodes = nodes === undefined ? [...members] : nodes.filter((n) => members.has(n));
  }
  const rules = idList(q, 'rule');
  const directives = idList(q, 'directive');
  return {
    ...(from !== undefined && { from }), ...(to !== undefined && { to }),
    ...(nodes !== undefined && { node_ids: nodes }), ...(rules !== undefined && { rule_ids: rules }),
    ...(directives !== undefined && { directive_ids: directives }), ...(label !== undefined && { label: label as ChangeLabel }),
  };
}

export function changeRoutes(app: FastifyInstance, store: Reads, cache?: AggregateCache): void {
  app.get<{ Querystring: Query }>('/api/1/changes', async (req, reply) => {
    if (req.query.max_age !== undefined) bad('max_age is taken by the histogram, not by the list of changes');
    const format = exportFormat(req);
    const q = await changeQuery(store, req.query);
    const { page, per_page } = paging(req.query, 100);
    const diff = single(req.query, 'diff');
    if (diff !== undefined && diff !== 'true' && diff !== 'false') bad('diff must be true or false');
    const result = await store.listChanges(q, page, per_page);
    // Diffs are the bulk of a page: left out with diff=false (the list still says whether there is one).
    const rows = result.data.map((c) => (diff === 'false' ? { ...c, diff: null, has_diff: c.diff !== null } : { ...c, has_diff: c.diff !== null }));
    if (format === 'json') return { data: rows, total: result.total, total_capped: result.total_capped };
    return sendRows<(typeof rows)[number]>(reply, 'csv', 'changes',
      [['at', (c) => c.at], ['node_id', (c) => c.node_id], ['label', (c) => c.label], ['rule_id', (c) => c.rule_id],
        ['directive_id', (c) => c.directive_id], ['component', (c) => c.component], ['key', (c) => c.key_value],
        ['event_type', (c) => c.event_type], ['message', (c) => c.message], ['run_id', (c) => c.run_id], ['config_id', (c) => c.config_id],
        ['diff', (c) => c.diff]],
      async function* () { yield rows; });
  });

  app.get<{ Querystring: Query }>('/api/1/changes/histogram', async (req, reply) => {
    const by = single(req.query, 'by') ?? 'hour';
    if (by !== 'hour' && by !== 'day') bad('by must be hour or day');
    const { page: _p, per_page: _pp, ...rest } = req.query;
    if (_p !== undefined || _pp !== undefined) bad('the histogram is not paged');
    const q = await changeQuery(store, rest);
    // max_age (the console's dashboard): a copy of the same histogram up to that old will do.
    const buckets = await maybeCached({ ...(cache && { cache }) }, req.query, reply, `histogram:${by}:${JSON.stringify(q)}`, () => store.changesHistogram(q, by as 'hour' | 'day'));
    return { data: buckets.map((b) => ({ ...b, total: b.intentional + b.corrective })), total: buckets.length };
  });
}
