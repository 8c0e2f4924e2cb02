/**
 * A technique's calls as the agent runs them and the server checks them: which components each
 * call reports (the agent writes them, compliance expects them), what a call's reports add up to
 * (its outcome, which later calls' `if` reads), and the replay that tells whether a run's reports
 * follow the result conditions. One module, so the agent and the server cannot decide apart.
 */
import type { TechniqueCall } from './bundle.js';
import { parseCondition, resultCondition, type CallOutcome, type Outcomes } from './condition.js';
import { expectedComponents, type Component } from './methods.js';

/**
 * A call's components: the method's own, the first filed under the call's component name, any
 * other (a method reporting two) under `<call component> (<method component>)`.
 */
export function callComponentName(call: Pick<TechniqueCall, 'component'>, methodComponent: string, first: boolean): string {
  return first ? call.component : `${call.component} (${methodComponent})`;
}

export function callComponents(call: Pick<TechniqueCall, 'component' | 'method' | 'params'>): Component[] {
  return expectedComponents(call.method, call.params).map((c, i) => ({ component: callComponentName(call, c.component, i === 0), key: c.key }));
}

const RANK: Record<CallOutcome, number> = { skipped: 0, kept: 1, repaired: 2, error: 3 };

/**
 * What a call's reports add up to: an error (in audit mode a non-compliance counts as one) over a
 * repair over success; only not-applicable reports, or none, is `skipped`.
 */
export function callOutcome(eventTypes: Iterable<string>): CallOutcome {
  let out: CallOutcome = 'skipped';
  for (const t of eventTypes) {
    const o: CallOutcome | null = t === 'result_success' || t === 'audit_compliant' ? 'kept'
      : t === 'result_repaired' ? 'repaired'
        : t === 'result_na' || t === 'audit_na' || t === 'audit_notapplicable' ? 'skipped'
          : t === 'control' || t.startsWith('log_') ? null : 'error';
    if (o !== null && RANK[o] > RANK[out]) out = o;
  }
  return out;
}

/** The loop a call id belongs to: `install.2` → `install`; a call outside a loop has none. */
export const loopOf = (callId: string): string | null => (callId.includes('.') ? callId.slice(0, callId.indexOf('.')) : null);

/** Record a call's outcome, and its loop's: the worst of its items so far. */
export function recordOutcome(outcomes: Map<string, CallOutcome>, callId: string, outcome: CallOutcome): void {
  outcomes.set(callId, outcome);
  const loop = loopOf(callId);
  if (loop !== null) {
    const cur = outcomes.get(loop);
    if (cur === undefined || RANK[outcome] > RANK[cur]) outcomes.set(loop, outcome);
  }
}

/** One call of a run as the server replays it. */
export interface CallCheck {
  call: string;
  /** What the `if` says: the call did not run (`na`), ran (`run`), or either is right. */
  expected: 'na' | 'run' | 'either';
  got: CallOutcome;
  consistent: boolean;
}

/**
 * Replay a technique directive's run from what it reported (event type by component, the
 * worst one): each call's `if` is decided from the outcomes before it by resultCondition, as the
 * agent decided it. A call whose `if` is false must report not applicable; one whose `if` is true
 * and has no node condition must have run. Node functions the server cannot ask make it `either`.
 */
export function checkCallReports(calls: readonly TechniqueCall[], reported: ReadonlyMap<string, string>): CallCheck[] {
  const outcomes = new Map<string, CallOutcome>();
  return calls.map((call) => {
    const types = callComponents(call).map((c) => reported.get(c.component)).filter((t): t is string => t !== undefined);
    const got = callOutcome(types);
    let decision: boolean | null = true;
    if (call.if !== undefined) {
      try {
        decision = resultCondition(parseCondition(call.if, { results: true }), outcomes as Outcomes);
      } catch {
        decision = null;
      }
    }
    const expected = decision === false ? 'na' : decision === true && call.condition === undefined ? 'run' : 'either';
    const consistent = expected === 'either' || (expected === 'na') === (got === 'skipped');
    recordOutcome(outcomes, call.id, got);
    return { call: call.id, expected, got, consistent };
  });
}
