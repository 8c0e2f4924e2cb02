/** What both backends share for findings: the WHERE of a finding query, the row decoder, the columns of a new finding. */
import { capstanError } from '@capstan/shared/errors';
import type { Dialect } from '../nodes/filters/query.js';
import { filterConditions } from '../nodes/filters/query.js';
import type { CheckedFilter } from '../nodes/types.js';
import { isoOf, toUtcIso } from '../time.js';
import type { RowCodec } from '../row-codec.js';
import { reportItemFromRow } from '../changes/rows.js';
import { FINDING_KINDS, type CloseReason, type FindingInput, type FindingKind, type FindingQuery, type FindingRecord, type OpenFinding } from './types.js';

/** Most ids one finding query may name per field (node, rule, directive). */
export const MAX_FINDING_IDS = 10_000;

/** The open findings' columns and their node's compliance (last sighting, run count). */
export const FINDING_SELECT = `SELECT f.*, nc.run_started_utc AS nc_seen, nc.run_id AS nc_run, nc.runs_seen AS nc_count
  FROM findings f LEFT JOIN node_compliance nc ON nc.node_id = f.node_id`;

/** A node's open findings, oldest first: what reconcile decides from, in one order whatever the plan (the batches read them so too). */
export const OPEN_FINDINGS_SQL = (p: string) => `SELECT id, rule_id, directive_id, component, key_value, kind, first_seen_at, first_count
  FROM findings WHERE node_id = ${p} AND closed_at IS NULL ORDER BY id`;

export function checkFindingQuery(q: FindingQuery): void {
  if (q.status !== undefined && q.status !== 'open' && q.status !== 'closed') throw capstanError('ERR_BAD_REQUEST', 'status must be open or closed');
  if (q.kind !== undefined && !FINDING_KINDS.includes(q.kind)) throw capstanError('ERR_BAD_REQUEST', `kind must be one of ${FINDING_KINDS.join(', ')}`);
  for (const [name, ids] of [['node', q.node_ids], ['rule', q.rule_ids], ['directive', q.directive_ids]] as const) {
    if (ids !== undefined && ids.length > MAX_FINDING_IDS) throw capstanError('ERR_BAD_REQUEST', `at most ${MAX_FINDING_IDS} ${name} ids in one query`);
  }
}

/** The WHERE of a finding query over `findings f` (no leading WHERE when empty). */
export function findingWhere(q: FindingQuery, checked: CheckedFilter[], d: Dialect, idList: (ids: string[]) => string): string {
  checkFindingQuery(q);
  const parts: string[] = [];
  if (q.status === 'open') parts.push('f.closed_at IS NULL');
  if (q.status === 'closed') parts.push('f.closed_at IS NOT NULL');
  if (q.kind !== undefined) parts.push(`f.kind = ${d.param(q.kind)}`);
  const ids = (column: string, values: string[] | undefined) => {
    if (values !== undefined) parts.push(values.length === 0 ? '1 = 0' : `${column} IN ${idList(values)}`);
  };
  ids('f.node_id', q.node_ids);
  ids('f.rule_id', q.rule_ids);
  ids('f.directive_id', q.directive_ids);
  if (q.first_seen_from !== undefined) parts.push(`f.first_seen_at >= ${d.param(toUtcIso(q.first_seen_from, 'first_seen_from'))}`);
  if (q.first_seen_to !== undefined) parts.push(`f.first_seen_at < ${d.param(toUtcIso(q.first_seen_to, 'first_seen_to'))}`);
  if (checked.length > 0) parts.push(`f.node_id IN (SELECT n.id FROM nodes n WHERE ${filterConditions(checked, d).join(' AND ')})`);
  return parts.length ? `WHERE ${parts.join(' AND ')}` : '';
}

const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));

export function findingFromRow(r: Record<string, unknown>, codec: RowCodec): FindingRecord {
  const open = r.closed_at === null || r.closed_at === undefined;
  return {
    id: Number(r.id),
    node_id: r.node_id as string,
    ...reportItemFromRow(r),
    kind: r.kind as FindingKind,
    diff: (r.diff as string | null) ?? null,
    diff_truncated: codec.bool(r.diff_truncated),
    status: open ? 'open' : 'closed',
    first_seen_at: isoOf(r.first_seen_at),
    first_run_id: num(r.first_run_id),
    last_seen_at: open ? codec.time(r.nc_seen ?? null) : codec.time(r.last_seen_at),
    last_run_id: open ? num(r.nc_run) : num(r.last_run_id),
    runs: open ? Math.max(1, Number(r.nc_count ?? 0) - Number(r.first_count) + 1) : Number(r.runs),
    closed_at: codec.time(r.closed_at ?? null),
    closed_run_id: num(r.closed_run_id),
    close_reason: (r.close_reason as CloseReason | null) ?? null,
  };
}

export function openFromRow(r: Record<string, unknown>): OpenFinding {
  return {
    id: Number(r.id), rule_id: r.rule_id as string, directive_id: r.directive_id as string, component: r.component as string,
    key_value: r.key_value as string, kind: r.kind as FindingKind, first_seen_at: isoOf(r.first_seen_at), first_count: Number(r.first_count),
  };
}

/** What a run log says is what it says: U+0000 (lossy UTF-8) becomes U+FFFD, as in a change. */
const clean = (v: string) => v.replace(/\u0000/g, '\ufffd');

/** A finding's text fields ready to write. */
export function findingText(i: FindingInput): FindingInput {
  return {
    rule_id: clean(i.rule_id), directive_id: clean(i.directive_id), component: clean(i.component), key_value: clean(i.key_value ?? ''),
    event_type: clean(i.event_type ?? ''), message: clean(i.message ?? ''), diff: i.diff === null || i.diff === undefined ? null : clean(i.diff),
    diff_truncated: i.diff_truncated === true,
  };
}
