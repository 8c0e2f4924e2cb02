/**
 * Compliance as expected-vs-received, RUDDER's way: each component a node's policy (config id)
 * expects it to report on gets one category from its last complete run.
 *
 * - received with an outcome → the outcome's category (table below);
 * - expected, not received → `missing`; received, not expected → `unexpected`;
 * - a run whose config id has no stored expectations counts its received outcomes only (there is
 *   nothing to be missing from or unexpected in), and a node with a policy but no complete run
 *   yet has every expected component `missing`.
 *
 * The compliance percentage is RUDDER's: (compliant + repaired + not applicable) / all items.
 */
import {
  COMPLIANCE_CATEGORIES, type ComplianceCategory, type ComplianceCounts, type ExpectedComponent, type RunSummaryOutcome,
} from '../store/store.js';

/**
 * Every RUDDER report type with a compliance meaning. `control` (run start/end) and `log_*`
 * (log_info, log_warn, log_debug, log_trace, log_repaired…) are information, not compliance
 * items, in RUDDER too. Any other type is not a RUDDER type: the component counts as unexpected.
 */
export const REPORT_TYPE_CATEGORY: Readonly<Record<string, ComplianceCategory>> = Object.freeze({
  result_success: 'compliant',
  audit_compliant: 'compliant',
  result_repaired: 'repaired',
  result_error: 'error',
  audit_error: 'error',
  audit_noncompliant: 'non_compliant',
  result_na: 'not_applicable',
  audit_na: 'not_applicable',
  audit_notapplicable: 'not_applicable',
});

export function isInformational(eventType: string): boolean {
  return eventType === 'control' || eventType.startsWith('log_');
}

/** The category of a component's outcome (its worst report type), null for information only. */
export function categoryOf(eventType: string): ComplianceCategory | null {
  if (Object.hasOwn(REPORT_TYPE_CATEGORY, eventType)) return REPORT_TYPE_CATEGORY[eventType]!;
  return isInformational(eventType) ? null : 'unexpected';
}

export function zeroCounts(): ComplianceCounts {
  return Object.fromEntries(COMPLIANCE_CATEGORIES.map((c) => [c, 0])) as ComplianceCounts;
}

export interface ComplianceItem {
  rule_id: string;
  directive_id: string;
  component: string;
  category: ComplianceCategory;
  /** The report type that decided it; null when nothing was received. */
  outcome: string | null;
  /** Reports received for the component. */
  count: number;
}

export interface DirectiveCounts {
  rule_id: string;
  directive_id: string;
  counts: ComplianceCounts;
}

export interface ComplianceResult {
  items: ComplianceItem[];
  counts: ComplianceCounts;
  directives: DirectiveCounts[];
}

const key = (r: string, d: string, c: string) => `${r}\u0000${d}\u0000${c}`;

/** Compare what was expected with what the run reported (see the module comment for the rules). */
export function computeCompliance(expected: ExpectedComponent[] | null, outcomes: RunSummaryOutcome[]): ComplianceResult {
  const received = new Map<string, RunSummaryOutcome>();
  for (const o of outcomes) received.set(key(o.rule_id, o.directive_id, o.component), o);
  const items: ComplianceItem[] = [];
  const itemOf = (o: RunSummaryOutcome, unexpected: boolean) => {
    const category = unexpected ? 'unexpected' : categoryOf(o.outcome);
    if (category !== null) items.push({ rule_id: o.rule_id, directive_id: o.directive_id, component: o.component, category, outcome: o.outcome, count: o.count });
  };
  if (expected !== null && expected.length > 0) {
    const wanted = new Set<string>();
    for (const e of expected) {
      const k = key(e.rule_id, e.directive_id, e.component);
      if (wanted.has(k)) continue;
      wanted.add(k);
      const got = received.get(k);
      if (got && categoryOf(got.outcome) !== null) itemOf(got, false);
      else items.push({ rule_id: e.rule_id, directive_id: e.directive_id, component: e.component, category: 'missing', outcome: null, count: 0 });
    }
    for (const [k, o] of received) if (!wanted.has(k)) itemOf(o, true);
  } else {
    for (const o of received.values()) itemOf(o, false);
  }
  const counts = zeroCounts();
  const byDirective = new Map<string, DirectiveCounts>();
  for (const it of items) {
    counts[it.category]++;
    const dk = `${it.rule_id}\u0000${it.directive_id}`;
    let d = byDirective.get(dk);
    if (!d) byDirective.set(dk, (d = { rule_id: it.rule_id, directive_id: it.directive_id, counts: zeroCounts() }));
    d.counts[it.category]++;
  }
  return { items, counts, directives: [...byDirective.values()] };
}

export interface CompliancePercentages {
  /** Items counted (components, summed over nodes for aggregates). */
  total: number;
  /** (compliant + repaired + not_applicable) / total × 100, two decimals; null without items. */
  compliance: number | null;
  percent: Record<ComplianceCategory, number>;
}

const round2 = (x: number) => Math.round(x * 100) / 100;

export function percentages(counts: ComplianceCounts): CompliancePercentages {
  const total = COMPLIANCE_CATEGORIES.reduce((s, c) => s + counts[c], 0);
  const percent = Object.fromEntries(COMPLIANCE_CATEGORIES.map((c) => [c, total === 0 ? 0 : round2((counts[c] / total) * 100)])) as Record<ComplianceCategory, number>;
  const ok = counts.compliant + counts.repaired + counts.not_applicable;
  return { total, compliance: total === 0 ? null : round2((ok / total) * 100), percent };
}

/** Sum counts per rule or per (rule, directive) from a node's items. */
export function groupItems(items: ComplianceItem[], by: 'rule' | 'directive'): Array<{ rule_id: string; directive_id?: string; counts: ComplianceCounts }> {
  const groups = new Map<string, { rule_id: string; directive_id?: string; counts: ComplianceCounts }>();
  for (const it of items) {
    const k = by === 'rule' ? it.rule_id : `${it.rule_id}\u0000${it.directive_id}`;
    let g = groups.get(k);
    if (!g) groups.set(k, (g = by === 'rule' ? { rule_id: it.rule_id, counts: zeroCounts() } : { rule_id: it.rule_id, directive_id: it.directive_id, counts: zeroCounts() }));
    g.counts[it.category]++;
  }
  return [...groups.values()];
}
