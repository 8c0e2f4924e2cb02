/**
 * Compliance, RUDDER's way, computed once for the agent and the server: the agent's printed
 * summary and the server's figure for the same run come from these functions, on the same
 * expectations (`bundleExpectations`), so they cannot disagree.
 *
 * Each component a node's policy expects it to report on gets one state from its last complete
 * run (`summarize` reduces a run's reports to one outcome per component, its worst):
 * - received with an outcome → the outcome's state (REPORT_TYPE_STATE);
 * - expected, not received → `missing`; received, not expected → `unexpected`;
 * - a node without expectations (no Capstan policy: a RUDDER agent, say) counts what it received.
 * Two more states depend on time, so the server decides them when it reads (see
 * `nodeTimeState`): `applying` (a new policy that no run has answered yet, within a window) and
 * `no_answer` (no run for too long).
 *
 * The compliance percentage is RUDDER's: (success + repaired + audit compliant + not applicable)
 * over every item, applying and no answer included: an item in those states is never compliant.
 */
import type { TechniqueCall } from '../policy/bundle.js';
import { callComponents } from '../policy/calls.js';
import { expectedComponents } from '../policy/methods.js';
import { systemExpectations } from '../policy/system.js';

export const COMPLIANCE_STATES = [
  'success', 'repaired', 'error', 'non_compliant', 'audit_compliant', 'not_applicable', 'unexpected', 'missing',
  'applying', 'no_answer',
] as const;
export type ComplianceState = (typeof COMPLIANCE_STATES)[number];
export type ComplianceCounts = Record<ComplianceState, number>;

/** The states a run's outcomes decide; `applying` and `no_answer` come from time. */
export const RUN_STATES = COMPLIANCE_STATES.slice(0, 8) as ReadonlyArray<Exclude<ComplianceState, 'applying' | 'no_answer'>>;
export type RunState = (typeof RUN_STATES)[number];

/** States that count as compliant in the percentage. */
export const COMPLIANT_STATES: ReadonlySet<ComplianceState> = new Set(['success', 'repaired', 'audit_compliant', 'not_applicable']);

/**
 * Every RUDDER report type with a compliance meaning. `control` (run start/end) and `log_*` are
 * information, not items, in RUDDER too. Any other type is not a RUDDER type: its component
 * counts as unexpected.
 */
export const REPORT_TYPE_STATE: Readonly<Record<string, RunState>> = Object.freeze({
  result_success: 'success',
  audit_compliant: 'audit_compliant',
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

/** The state of a component's outcome (its worst report type), null for information only. */
export function stateOf(eventType: string): RunState | null {
  // Compared, not looked up: a run's outcomes are parsed afresh, and looking a new string up
  // in REPORT_TYPE_STATE hashes it first (a hundred freshly parsed types: ~2.5 µs compared,
  // ~9 µs looked up). test/shared/compliance-judge checks every type of the table here.
  switch (eventType) {
    case 'result_success': return 'success';
    case 'audit_compliant': return 'audit_compliant';
    case 'result_repaired': return 'repaired';
    case 'result_error': case 'audit_error': return 'error';
    case 'audit_noncompliant': return 'non_compliant';
    case 'result_na': case 'audit_na': case 'audit_notapplicable': return 'not_applicable';
    default: return isInformational(eventType) ? null : 'unexpected';
  }
}

export function zeroCounts(): ComplianceCounts {
  // A literal, not built from COMPLIANCE_STATES: every directive of every run written gets one,
  // and Object.fromEntries was a tenth of a steady-state insert (test/shared checks the keys).
  return {
    success: 0, repaired: 0, error: 0, non_compliant: 0, audit_compliant: 0, not_applicable: 0, unexpected: 0, missing: 0,
    applying: 0, no_answer: 0,
  };
}

/** One component a node's policy makes it report on. */
export interface ExpectedComponent {
  rule_id: string;
  directive_id: string;
  component: string;
}

/** One component's outcome in a run: the worst event type reported for it, and how many reports. */
export interface RunOutcome {
  rule_id: string;
  directive_id: string;
  component: string;
  outcome: string;
  count: number;
}

/** A report as far as compliance cares. */
export interface OutcomeReport {
  event_type: string;
  rule_id: string;
  directive_id: string;
  component: string;
}

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

/** A run's reports as counts by event type and one outcome per (rule, directive, component). */
export function summarize(reports: Iterable<OutcomeReport>): { counts: Record<string, number>; outcomes: RunOutcome[] } {
  // No prototype: a report type named "__proto__" must count like any other.
  const counts: Record<string, number> = Object.create(null) as Record<string, number>;
  const outcomes = new Map<string, RunOutcome>();
  for (const r of reports) {
    counts[r.event_type] = (counts[r.event_type] ?? 0) + 1;
    if (isInformational(r.event_type)) continue;
    const key = `${r.rule_id}\0${r.directive_id}\0${r.component}`;
    const cur = outcomes.get(key);
    if (!cur) {
      outcomes.set(key, { rule_id: r.rule_id, directive_id: r.directive_id, component: r.component, outcome: r.event_type, count: 1 });
    } else {
      cur.count++;
      if (severity(r.event_type) > severity(cur.outcome)) cur.outcome = r.event_type;
    }
  }
  return { counts, outcomes: [...outcomes.values()] };
}

/**
 * What a policy bundle's directives make a node report on: the self-check, then each directive's
 * components; a technique's directive, each of its calls' (calls.ts), whether or not its result
 * conditions let the call run (a call that does not run reports not applicable).
 */
export function bundleExpectations(
  directives: ReadonlyArray<{ id: string; rule_id: string; method: string; params: Record<string, unknown>; calls?: readonly TechniqueCall[] }>,
): ExpectedComponent[] {
  return [...systemExpectations(), ...directives.flatMap(directiveExpectations)];
}

/** One directive's part of bundleExpectations: its components, or its technique calls'. */
export function directiveExpectations(
  d: { id: string; rule_id: string; method: string; params: Record<string, unknown>; calls?: readonly TechniqueCall[] },
): ExpectedComponent[] {
  return (d.calls ? d.calls.flatMap(callComponents) : expectedComponents(d.method, d.params))
    .map((c) => ({ rule_id: d.rule_id, directive_id: d.id, component: c.component }));
}

export interface ComplianceItem {
  rule_id: string;
  directive_id: string;
  component: string;
  state: ComplianceState;
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

/**
 * An expectation list's components, each once, in order, with where each one's outcome goes and
 * which (rule, directive) it counts under: made once per list (a fleet's nodes share a handful
 * of lists, kept parsed by the server), so judging a run looks each outcome up by its three ids
 * instead of joining them into a key, and tallies without joining two more.
 */
interface ListIndex {
  unique: readonly ExpectedComponent[];
  /** rule → directive → component → position in `unique`. */
  slots: Map<string, Map<string, Map<string, number>>>;
  /** The (rule, directive) pairs in order of first appearance, and each position's pair. */
  directives: Array<{ rule_id: string; directive_id: string }>;
  directiveOf: number[];
  /** rule → directive → position in `directives`. */
  directiveIndex: Map<string, Map<string, number>>;
}

const LIST_INDEXES = new WeakMap<readonly ExpectedComponent[], ListIndex>();

/** `m.get(a)`, made empty first when absent. */
function inner<K, V>(m: Map<K, V>, a: K, make: () => V): V {
  let v = m.get(a);
  if (v === undefined) m.set(a, (v = make()));
  return v;
}

/** The index of `expected`, kept while the list lives when it is frozen (a list that may change is indexed each time). */
function listIndex(expected: readonly ExpectedComponent[]): ListIndex {
  let ix = LIST_INDEXES.get(expected);
  if (ix !== undefined) return ix;
  const unique: ExpectedComponent[] = [];
  const slots = new Map<string, Map<string, Map<string, number>>>();
  const directives: ListIndex['directives'] = [];
  const directiveOf: number[] = [];
  const directiveIndex = new Map<string, Map<string, number>>();
  for (const e of expected) {
    const components = inner(inner(slots, e.rule_id, () => new Map<string, Map<string, number>>()), e.directive_id, () => new Map<string, number>());
    if (components.has(e.component)) continue;
    components.set(e.component, unique.length);
    unique.push(e);
    const byDirective = inner(directiveIndex, e.rule_id, () => new Map<string, number>());
    let d = byDirective.get(e.directive_id);
    if (d === undefined) {
      byDirective.set(e.directive_id, (d = directives.length));
      directives.push({ rule_id: e.rule_id, directive_id: e.directive_id });
    }
    directiveOf.push(d);
  }
  ix = { unique, slots, directives, directiveOf, directiveIndex };
  if (Object.isFrozen(expected)) LIST_INDEXES.set(expected, ix);
  return ix;
}

/**
 * Compare what was expected with what a run reported (the module comment has the rules).
 * `expected` null or empty: no expectations, the received outcomes count as they are.
 * The items come in the list's order (each component once), then the unexpected ones in the
 * order they were first reported; a component reported twice counts its last outcome.
 */
export function computeCompliance(expected: readonly ExpectedComponent[] | null, outcomes: readonly RunOutcome[]): ComplianceResult {
  if (expected === null || expected.length === 0) {
    const received = new Map<string, RunOutcome>();
    for (const o of outcomes) received.set(key(o.rule_id, o.directive_id, o.component), o);
    const items: ComplianceItem[] = [];
    for (const o of received.values()) {
      const state = stateOf(o.outcome);
      if (state !== null) items.push({ rule_id: o.rule_id, directive_id: o.directive_id, component: o.component, state, outcome: o.outcome, count: o.count });
    }
    return { items, ...tally(items) };
  }
  const ix = listIndex(expected);
  const got: Array<RunOutcome | undefined> = new Array<RunOutcome | undefined>(ix.unique.length);
  let extra: Map<string, RunOutcome> | undefined;
  for (const o of outcomes) {
    const slot = ix.slots.get(o.rule_id)?.get(o.directive_id)?.get(o.component);
    if (slot !== undefined) got[slot] = o;
    else (extra ??= new Map()).set(key(o.rule_id, o.directive_id, o.component), o);
  }
  const counts = zeroCounts();
  const directives: DirectiveCounts[] = ix.directives.map((d) => ({ rule_id: d.rule_id, directive_id: d.directive_id, counts: zeroCounts() }));
  const items: ComplianceItem[] = [];
  for (let s = 0; s < ix.unique.length; s++) {
    const o = got[s];
    const state = o === undefined ? null : stateOf(o.outcome);
    const item: ComplianceItem = o !== undefined && state !== null
      ? { rule_id: o.rule_id, directive_id: o.directive_id, component: o.component, state, outcome: o.outcome, count: o.count }
      : { rule_id: ix.unique[s]!.rule_id, directive_id: ix.unique[s]!.directive_id, component: ix.unique[s]!.component, state: 'missing', outcome: null, count: 0 };
    items.push(item);
    counts[item.state]++;
    directives[ix.directiveOf[s]!]!.counts[item.state]++;
  }
  if (extra !== undefined) {
    let more: Map<string, DirectiveCounts> | undefined;
    for (const o of extra.values()) {
      items.push({ rule_id: o.rule_id, directive_id: o.directive_id, component: o.component, state: 'unexpected', outcome: o.outcome, count: o.count });
      counts.unexpected++;
      const d = ix.directiveIndex.get(o.rule_id)?.get(o.directive_id);
      if (d !== undefined) {
        directives[d]!.counts.unexpected++;
        continue;
      }
      const dk = `${o.rule_id}\u0000${o.directive_id}`;
      let dc = (more ??= new Map()).get(dk);
      if (dc === undefined) {
        more.set(dk, (dc = { rule_id: o.rule_id, directive_id: o.directive_id, counts: zeroCounts() }));
        directives.push(dc);
      }
      dc.counts.unexpected++;
    }
  }
  return { items, counts, directives };
}

/** Counts of items, in total and per (rule, directive). */
export function tally(items: readonly ComplianceItem[]): { counts: ComplianceCounts; directives: DirectiveCounts[] } {
  const counts = zeroCounts();
  const byDirective = new Map<string, DirectiveCounts>();
  for (const it of items) {
    counts[it.state]++;
    const dk = `${it.rule_id}\u0000${it.directive_id}`;
    let d = byDirective.get(dk);
    if (!d) byDirective.set(dk, (d = { rule_id: it.rule_id, directive_id: it.directive_id, counts: zeroCounts() }));
    d.counts[it.state]++;
  }
  return { counts, directives: [...byDirective.values()] };
}

/**
 * The items a node shows while its time state overrides its run: every expected component (every
 * item but the unexpected ones) is `applying` or `no_answer`.
 */
export function overrideItems(items: readonly ComplianceItem[], state: 'applying' | 'no_answer'): ComplianceItem[] {
  return items.filter((it) => it.state !== 'unexpected').map((it) => ({ ...it, state }));
}

export interface CompliancePercentages {
  /** Items counted (components, summed over nodes for aggregates). */
  total: number;
  /** Compliant items / total × 100, two decimals; null without items. */
  compliance: number | null;
  percent: Record<ComplianceState, number>;
}

const round2 = (x: number) => Math.round(x * 100) / 100;

export function percentages(counts: ComplianceCounts): CompliancePercentages {
  const total = COMPLIANCE_STATES.reduce((s, c) => s + counts[c], 0);
  const percent = Object.fromEntries(COMPLIANCE_STATES.map((c) => [c, total === 0 ? 0 : round2((counts[c] / total) * 100)])) as Record<ComplianceState, number>;
  let ok = 0;
  for (const c of COMPLIANT_STATES) ok += counts[c];
  return { total, compliance: total === 0 ? null : round2((ok / total) * 100), percent };
}

/** One line for people: "compliance 85.71% of 7 items (5 success, 1 repaired, 1 error)". */
export function complianceLine(counts: ComplianceCounts): string {
  const p = percentages(counts);
  const parts = COMPLIANCE_STATES.filter((s) => counts[s] > 0).map((s) => `${counts[s]} ${s.replace(/_/g, ' ')}`);
  return `compliance ${p.compliance === null ? 'n/a' : `${p.compliance}%`} of ${p.total} item${p.total === 1 ? '' : 's'}${parts.length > 0 ? ` (${parts.join(', ')})` : ''}`;
}

/** Sum counts per rule or per (rule, directive) from a node's items. */
export function groupItems(items: readonly ComplianceItem[], by: 'rule' | 'directive'): Array<{ rule_id: string; directive_id?: string; counts: ComplianceCounts }> {
  const groups = new Map<string, { rule_id: string; directive_id?: string; counts: ComplianceCounts }>();
  for (const it of items) {
    const k = by === 'rule' ? it.rule_id : `${it.rule_id}\u0000${it.directive_id}`;
    let g = groups.get(k);
    if (!g) groups.set(k, (g = by === 'rule' ? { rule_id: it.rule_id, counts: zeroCounts() } : { rule_id: it.rule_id, directive_id: it.directive_id, counts: zeroCounts() }));
    g.counts[it.state]++;
  }
  return [...groups.values()];
}

/**
 * The time windows of compliance, in seconds. `applying`: how long after a new policy a node that
 * has not run it yet is applying (run interval + grace). `silence`: how long without a run before
 * a node is no answer (missed runs × run interval); a node whose groups keep the last compliance
 * waits `keep_last` more.
 */
export interface ComplianceWindows {
  applying_s: number;
  silence_s: number;
}

/** A node's time marks, as the server stores them (epoch seconds, server clock). */
export interface NodeTimeMarks {
  /** When its current policy was set, while no complete run of that policy has arrived; else null. */
  applying_since_s: number | null;
  /** Its last run received (or, before any, when it was first given a policy); null: nothing to wait for. */
  answered_s: number | null;
  /** Extra seconds its last compliance is kept once silent (0: expire immediately). */
  keep_last_s: number;
}

/** Which time state overrides a node's run at `now_s`, if any (`no_answer` wins over `applying`). */
export function nodeTimeState(m: NodeTimeMarks, w: ComplianceWindows, now_s: number): 'applying' | 'no_answer' | null {
  if (m.answered_s !== null && m.answered_s + w.silence_s + m.keep_last_s <= now_s) return 'no_answer';
  if (m.applying_since_s !== null && m.applying_since_s + w.applying_s > now_s) return 'applying';
  return null;
}
