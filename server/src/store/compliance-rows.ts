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
