/** What both backends share for changes: the change label, the filter SQL of a change query, the row decoder. */
import { capstanError } from '@capstan/shared/errors';
import type { Dialect } from '../nodes/filters/query.js';
import { isoOf, toUtcIso } from '../time.js';
import { CHANGE_LABELS, type ChangeLabel, type ChangeQuery, type ChangeRecord, type ReportItem } from './types.js';

/** The report's item as a row holds it (changes and findings alike). */
export function reportItemFromRow(r: Record<string, unknown>): ReportItem {
  return {
    rule_id: r.rule_id as string,
    directive_id: r.directive_id as string,
    component: r.component as string,
    key_value: r.key_value as string,
    event_type: r.event_type as string,
    message: r.message as string,
  };
}

/** See ChangeRecord.label: `previous` is the config id of the node's run before this one (undefined: none). */
export function labelFor(previous: string | null | undefined, current: string | null): ChangeLabel {
  return previous === undefined || previous !== current ? 'intentional' : 'corrective';
}

/** Most ids a query string may name in one change filter (node, rule, directive, group). */
export const MAX_FILTER_IDS = 10_000;

export const HISTOGRAM_BUCKETS = ['hour', 'day'] as const;

/** The WHERE of a change query over `changes c` (no leading WHERE when empty). */
export function changeWhere(q: ChangeQuery, d: Dialect, idList: (ids: string[]) => string): string {
  const parts: string[] = [];
  if (q.from !== undefined) parts.push(`c.at >= ${d.param(toUtcIso(q.from, 'from'))}`);
  if (q.to !== undefined) parts.push(`c.at < ${d.param(toUtcIso(q.to, 'to'))}`);
  // Any number of ids: they travel as one array parameter (a policy group's members may be many).
  const ids = (_name: string, column: string, values: string[] | undefined) => {
    if (values === undefined) return;
    parts.push(values.length === 0 ? 'false' : `${column} IN ${idList(values)}`);
  };
  ids('node', 'c.node_id', q.node_ids);
  ids('rule', 'c.rule_id', q.rule_ids);
  ids('directive', 'c.directive_id', q.directive_ids);
  if (q.label !== undefined) {
    if (!CHANGE_LABELS.includes(q.label)) throw capstanError('ERR_BAD_REQUEST', `label must be one of ${CHANGE_LABELS.join(', ')}`);
    parts.push(`c.label = ${d.param(q.label)}`);
  }
  return parts.length ? `WHERE ${parts.join(' AND ')}` : '';
}

export function changeFromRow(r: Record<string, unknown>): ChangeRecord {
  return {
    id: Number(r.id),
    node_id: r.node_id as string,
    run_id: r.run_id === null ? null : Number(r.run_id),
    run_started_at: r.run_started_at as string,
    at: isoOf(r.at),
    ...reportItemFromRow(r),
    label: r.label as ChangeLabel,
    config_id: (r.config_id as string | null) ?? null,
    diff: (r.diff as string | null) ?? null,
    diff_truncated: r.diff_truncated === true || r.diff_truncated === 1,
  };
}
