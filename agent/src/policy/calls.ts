/**
 * A technique's directive on the node: its calls run in order, each deciding first, by the
 * shared resultCondition, whether its `if` holds over the outcomes of the calls before it, then
 * its node condition; a call that does not run reports its components not applicable, as a
 * directive whose condition is false does. Reports carry the directive's id and the call's
 * component (shared/src/policy/calls.ts), which is what the server expects of it.
 */
import type { BundleDirective, TechniqueCall } from '@capstan/shared/policy/bundle';
import { callComponentName, callComponents, callOutcome, recordOutcome } from '@capstan/shared/policy/calls';
import { resultCondition, type CallOutcome } from '@capstan/shared/policy/condition';
import type { Redactor } from '@capstan/shared/policy/secrets';
import type { Method, Outcome, Status } from '../methods/index.js';
import { conditionHolds, emitterFor, type ApplyOptions } from './apply.js';
import { fillSecrets, usesSecrets } from './secrets.js';

interface CallOptions extends ApplyOptions {
  methods: ReadonlyMap<string, Method<any>>;
  redactor: Redactor;
  siblings: ReadonlyArray<{ method: string; params: Record<string, unknown> }>;
}

export async function runCalls(d: BundleDirective, o: CallOptions): Promise<void> {
  const calls = d.calls ?? [];
  const outcomes = new Map<string, CallOutcome>();
  // The directive's own condition rules every call: false, they are all not applicable.
  const applies = conditionHolds(d.condition, o.conditionEnv);
  for (const call of calls) {
    const method = o.methods.get(call.method);
    const audit = o.forceAudit || d.mode === 'audit' || call.mode === 'audit' || method?.auditOnly === true;
    const emit = emitterFor(d, call.method, audit, usesSecrets(call.params), o, o.redactor);
    const types: string[] = [];
    let wouldRepair = false;
    /** Every expected component of the call (what the server expects) with one status. */
    const all = (status: Status, message: string) => {
      for (const c of callComponents(call)) types.push(emit({ component: c.component, key: c.key, status, message }));
    };
    const decided = decide(call, d, applies, outcomes, o);
    if (decided !== null) all(decided.status, decided.message);
    else if (!method) all('error', `unknown method ${call.method}`);
    else {
      const ran = await runOne(call, d, method, audit, o);
      if ('error' in ran) all('error', ran.error);
      else {
        const own = method.components(ran.params).map((c) => c.component);
        for (const out of ran.outcomes) {
          const i = own.indexOf(out.component);
          wouldRepair ||= out.status === 'noncompliant';
          types.push(emit(out, callComponentName(call, out.component, i <= 0)));
        }
      }
    }
    // A dry run's would-be repair counts as the repair enforce would make, for the calls after it.
    const outcome = callOutcome(types);
    recordOutcome(outcomes, call.id, o.ctx.dryRun && !audit && wouldRepair && outcome === 'error' ? 'repaired' : outcome);
  }
}

/** Whether the call is kept from running: its directive's condition, its `if`, its condition. */
function decide(call: TechniqueCall, d: BundleDirective, applies: boolean | Error, outcomes: Map<string, CallOutcome>, o: CallOptions): { status: Status; message: string } | null {
  if (applies instanceof Error) return { status: 'error', message: applies.message };
  if (!applies) return { status: 'na', message: `condition is false: ${d.condition}` };
  if (call.if !== undefined) {
    let holds: boolean | null;
    try {
      holds = resultCondition(call.if, outcomes, o.conditionEnv);
    } catch (err) {
      return { status: 'error', message: (err as Error).message };
    }
    if (holds !== true) return { status: 'na', message: `if is false: ${call.if}` };
  }
  const cond = conditionHolds(call.condition, o.conditionEnv);
  if (cond instanceof Error) return { status: 'error', message: cond.message };
  if (!cond) return { status: 'na', message: `condition is false: ${call.condition}` };
  return null;
}

/** Validate, fill in secrets, validate again and apply: the method's outcomes, or why not. */
async function runOne(call: TechniqueCall, d: BundleDirective, method: Method<any>, audit: boolean, o: CallOptions): Promise<{ params: unknown; outcomes: Outcome[] } | { error: string }> {
  let params;
  try {
    method.validate(call.params);
    params = method.validate(fillSecrets(call.params, d, o, o.redactor));
  } catch (err) {
    return { error: (err as Error).message };
  }
  const outcomes = await method.apply(params, { siblings: o.siblings, ...o.ctx, mode: audit ? 'audit' : 'enforce' });
  return { params, outcomes };
}
