/**
 * What both backends write for one node's compliance: the node row (counts of its last complete
 * run against its expectations, with that run's outcomes kept so the node's detail survives the
 * run's retention) and one row per (rule, directive). Computed by registry/compliance.ts.
 */
import { computeCompliance } from '../registry/compliance.js';
import {
  COMPLIANCE_CATEGORIES, type ComplianceCounts, type ExpectedComponent, type RunSummaryOutcome,
} from './store.js';

export interface ComplianceInput {
  nodeId: string;
  /** The node's last complete run; null when it has none (expected items are then all missing). */
  run: { id: number; started_at: string; started_utc: string; config_id: string | null } | null;
  outcomes: RunSummaryOutcome[];
  /** `outcomes` already packed (store/outcomes.ts; the run insert has it): saves doing it again. */
  outcomesPacked?: Buffer;
  expected: ExpectedComponent[] | null;
}

export interface ComplianceRows {
  counts: ComplianceCounts;
  directives: Array<{ rule_id: string; directive_id: string; counts: ComplianceCounts }>;
}

export function complianceRows(input: ComplianceInput): ComplianceRows {
  const result = computeCompliance(input.expected, input.outcomes);
  return { counts: result.counts, directives: result.directives };
}

/** The count columns, in one order for both backends. */
export const COUNT_COLUMNS = COMPLIANCE_CATEGORIES;

/** Sum columns of an aggregate query back into counts (Postgres sums come back as strings). */
export function countsFromRow(row: Record<string, unknown>): ComplianceCounts {
  return Object.fromEntries(COUNT_COLUMNS.map((c) => [c, Number(row[c] ?? 0)])) as ComplianceCounts;
}

/** `sum(...)` of every count column of the table aliased `x`, for aggregate queries. */
export const SUM_COLUMNS = COUNT_COLUMNS.map((c) => `coalesce(sum(x.${c}), 0) AS ${c}`).join(', ');

export type DirectiveRow = ComplianceRows['directives'][number];

/**
 * What to write to bring a node's stored directive rows to `next`: the rows that are new or whose
 * counts changed, and the (rule, directive) keys that are gone. A run that changes a few
 * components rewrites those directives only, not the node's ~80 rows (they were 14% of the
 * server's CPU under ingest when every row was deleted and inserted again).
 */
export function directiveChanges(
  stored: Array<Record<string, unknown>>,
  next: DirectiveRow[],
): { upsert: DirectiveRow[]; remove: Array<{ rule_id: string; directive_id: string }> } {
  if (stored.length === 0) return { upsert: next, remove: [] };
  const old = new Map<string, Record<string, unknown>>();
  for (const r of stored) old.set(`${r.rule_id as string}\u0000${r.directive_id as string}`, r);
  const upsert: DirectiveRow[] = [];
  for (const d of next) {
    const k = `${d.rule_id}\u0000${d.directive_id}`;
    const o = old.get(k);
    old.delete(k);
    if (!o || COUNT_COLUMNS.some((c) => Number(o[c]) !== d.counts[c])) upsert.push(d);
  }
  const remove = [...old.values()].map((r) => ({ rule_id: r.rule_id as string, directive_id: r.directive_id as string }));
  return { upsert, remove };
}
