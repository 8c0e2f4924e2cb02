/**
 * The changes histogram from the kept counters (migration 26), shared by both backends. The
 * counters answer per whole UTC hour, by rule and label: a query naming nodes or directives (or
 * a policy group, which becomes its nodes) is counted afresh, as is one within a single hour. A
 * `from` or `to` inside an hour splits the range: the whole hours between them from the
 * counters, the partial hour at each end counted from the changes themselves (an hour of
 * changes at most, on the time index). Days are sums of hours. One statement reads everything:
 * one snapshot, so the counters and the counted edges agree.
 */
import { capstanError } from '@capstan/shared/errors';
import type { Dialect } from '../nodes/filters/query.js';
import { toUtcIso } from '../time.js';
import { changeWhere } from './rows.js';
import { CHANGE_LABELS, type ChangeQuery } from './types.js';

const HOUR_MS = 3_600_000;

/** How a histogram query reads the counters: whole hours in [from, to) (absent: open-ended), and the partial hours counted afresh. */
export interface KeptPlan {
  from?: number;
  to?: number;
  edges: Array<{ from: string; to: string }>;
}

/** The plan for `q`, or null when the counters cannot answer it (or there is too little to count to bother). */
export function keptPlan(q: ChangeQuery): KeptPlan | null {
  if (q.label !== undefined && !CHANGE_LABELS.includes(q.label)) throw capstanError('ERR_BAD_REQUEST', `label must be one of ${CHANGE_LABELS.join(', ')}`);
  if (q.node_ids !== undefined || q.directive_ids !== undefined) return null;
  const iso = (ms: number) => new Date(ms).toISOString();
  const plan: KeptPlan = { edges: [] };
  if (q.from !== undefined) {
    const from = Date.parse(toUtcIso(q.from, 'from'));
    plan.from = Math.ceil(from / HOUR_MS) * HOUR_MS;
    if (plan.from !== from) plan.edges.push({ from: iso(from), to: iso(plan.from) });
  }
  if (q.to !== undefined) {
    const to = Date.parse(toUtcIso(q.to, 'to'));
    plan.to = Math.floor(to / HOUR_MS) * HOUR_MS;
    if (plan.to !== to) plan.edges.push({ from: iso(plan.to), to: iso(to) });
  }
  // Within one hour (or an empty range): no whole hour between the ends.
  if (plan.from !== undefined && plan.to !== undefined && plan.from >= plan.to) return null;
  return plan;
}

/** How each store spells the hour: a change's hour, an hour bound, a bucket. */
export interface HourSql {
  /** The hour of change row `c` (as the counters key it). */
  of: string;
  /** An hour bound from an ISO parameter placeholder. */
  bound: (placeholder: string) => string;
  /** The parameter of an hour bound (epoch ms). */
  param: (ms: number) => string;
  /** The bucket of hour `h`. */
  bucket: (h: string, by: 'hour' | 'day') => string;
}

export const SQLITE_HOURS: HourSql = {
  of: 'substr(c.at, 1, 13)',
  bound: (p) => p,
  param: (ms) => new Date(ms).toISOString().slice(0, 13),
  // As the fresh count buckets (sqlite.ts): ISO text cut to the hour or the day.
  bucket: (h, by) => (by === 'hour' ? `${h} || ':00:00.000Z'` : `substr(${h}, 1, 10) || 'T00:00:00.000Z'`),
};

export const POSTGRES_HOURS: HourSql = {
  of: "date_trunc('hour', c.at AT TIME ZONE 'UTC')",
  bound: (p) => `(${p}::timestamptz AT TIME ZONE 'UTC')`,
  param: (ms) => new Date(ms).toISOString(),
  bucket: (h, by) => `date_trunc('${by}', ${h})`,
};

/**
 * The histogram's statement over the counters (and, on PostgreSQL, their log not folded yet),
 * with parameters pushed through `d` in the order of the text; `idList` spells a list of ids.
 */
export function keptHistogramSql(q: ChangeQuery, plan: KeptPlan, by: 'hour' | 'day', d: Dialect, idList: (ids: string[]) => string, hour: HourSql, log: boolean): string {
  const parts: string[] = [];
  // The counters: per rule when the query names rules, per hour otherwise.
  const rules = q.rule_ids !== undefined;
  const cols = rules ? 'rule_id, hour, label, n' : 'hour, label, n';
  const table = rules ? 'kept_change_rules' : 'kept_changes';
  const from = log ? `(SELECT ${cols} FROM ${table} UNION ALL SELECT ${cols} FROM kept_changes_log)` : table;
  const where: string[] = [];
  if (rules) where.push(q.rule_ids!.length === 0 ? 'false' : `k.rule_id IN ${idList(q.rule_ids!)}`);
  if (plan.from !== undefined) where.push(`k.hour >= ${hour.bound(d.param(hour.param(plan.from)))}`);
  if (plan.to !== undefined) where.push(`k.hour < ${hour.bound(d.param(hour.param(plan.to)))}`);
  if (q.label !== undefined) where.push(`k.label = ${d.param(q.label)}`);
  parts.push(`SELECT k.hour AS h, k.label, k.n FROM ${from} k${where.length ? ` WHERE ${where.join(' AND ')}` : ''}`);
  // The partial hours at the ends, counted from the changes.
  for (const e of plan.edges) {
    const edge: ChangeQuery = { from: e.from, to: e.to, ...(q.rule_ids !== undefined && { rule_ids: q.rule_ids }), ...(q.label !== undefined && { label: q.label }) };
    parts.push(`SELECT ${hour.of} AS h, c.label, count(*) AS n FROM changes c ${changeWhere(edge, d, idList)} GROUP BY 1, 2`);
  }
  return `SELECT ${hour.bucket('u.h', by)} AS at, sum(CASE WHEN u.label = 'intentional' THEN u.n ELSE 0 END) AS intentional,
      sum(CASE WHEN u.label = 'corrective' THEN u.n ELSE 0 END) AS corrective
    FROM (${parts.join(' UNION ALL ')}) u GROUP BY 1 HAVING sum(u.n) > 0 ORDER BY 1`;
}

/**
 * PostgreSQL: the triggers' log rows summed into the counters by the compliance sweep (rows
 * appended meanwhile stay for the next fold), then the counters folded to zero dropped (retention
 * takes whole hours away). Each statement answers how many rows it moved.
 */
export const CHANGES_FOLD_SQL = [
  `WITH moved AS (DELETE FROM kept_changes_log RETURNING *),
    hours AS (INSERT INTO kept_changes AS x (hour, label, n) SELECT hour, label, sum(n) FROM moved GROUP BY 1, 2
      ON CONFLICT (hour, label) DO UPDATE SET n = x.n + excluded.n),
    rules AS (INSERT INTO kept_change_rules AS x (rule_id, hour, label, n) SELECT rule_id, hour, label, sum(n) FROM moved GROUP BY 1, 2, 3
      ON CONFLICT (rule_id, hour, label) DO UPDATE SET n = x.n + excluded.n)
    SELECT count(*) AS n FROM moved`,
  `WITH hours AS (DELETE FROM kept_changes WHERE n = 0 RETURNING 1), rules AS (DELETE FROM kept_change_rules WHERE n = 0 RETURNING 1)
    SELECT (SELECT count(*) FROM hours) + (SELECT count(*) FROM rules) AS n`,
];
