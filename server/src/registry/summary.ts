/**
 * A run's parsed summary: counts by event type and one outcome per (rule, directive, component).
 * Compliance is computed from these summaries, not from report rows (DESIGN.md Storage).
 */
import type { Report } from '@capstan/shared';
import type { RunSummaryOutcome } from '../store/store.js';
import { isInformational } from './compliance.js';

/**
 * Severity of an event type when several reports share one component: the worst one is the
 * component's outcome. Log and control lines never decide an outcome; they only count. A type
 * RUDDER does not define ranks just below an error: compliance shows it as unexpected.
 */
const SEVERITY: Record<string, number> = {
  result_error: 100, audit_error: 100,
  audit_noncompliant: 90,
  result_repaired: 50,
  result_success: 20, audit_compliant: 20,
  result_na: 10, audit_na: 10, audit_notapplicable: 10,
};
const UNKNOWN_TYPE = 95;
const severity = (type: string) => (Object.hasOwn(SEVERITY, type) ? SEVERITY[type]! : UNKNOWN_TYPE);

export function summarize(reports: Report[]): { counts: Record<string, number>; outcomes: RunSummaryOutcome[] } {
  // No prototype: a report type named "__proto__" must count like any other.
  const counts: Record<string, number> = Object.create(null) as Record<string, number>;
  const outcomes = new Map<string, RunSummaryOutcome>();
  for (const r of reports) {
    counts[r.event_type] = (counts[r.event_type] ?? 0) + 1;
    if (isInformational(r.event_type)) continue;
    const sev = severity(r.event_type);
    const key = `${r.rule_id}\0${r.directive_id}\0${r.component}`;
    const cur = outcomes.get(key);
    if (!cur) {
      outcomes.set(key, { rule_id: r.rule_id, directive_id: r.directive_id, component: r.component, outcome: r.event_type, count: 1 });
    } else {
      cur.count++;
      if (sev > severity(cur.outcome)) cur.outcome = r.event_type;
    }
  }
  return { counts, outcomes: [...outcomes.values()] };
}
