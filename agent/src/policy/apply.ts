/**
 * Apply (or audit) every directive of a bundle: evaluate its condition on the node, validate its
 * parameters, run its method, and write one report per outcome carrying the rule and directive
 * ids, so the server can compare expected with received. A bad condition or bad parameters are a
 * reported error for that directive, never a crash of the run.
 */
import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import os from 'node:os';
import { type BundleDirective } from '@capstan/shared/policy/bundle';
import { evaluateCondition, parseCondition, type ConditionEnv } from '@capstan/shared/policy/condition';
import { CHANGE_EVENT_TYPES, DIFF_EVENT_TYPE, diffMessage } from '@capstan/shared/runlog/diff';
import { METHODS, type MethodContext, type Outcome, type Status } from '../methods/index.js';
import type { RunLogWriter } from '../runlog/write.js';

const ENFORCE_TYPE: Record<Status, string> = {
  success: 'result_success', repaired: 'result_repaired', error: 'result_error',
  compliant: 'result_success', noncompliant: 'result_error', na: 'result_na',
};
const AUDIT_TYPE: Record<Status, string> = {
  success: 'audit_compliant', repaired: 'audit_noncompliant', error: 'audit_error',
  compliant: 'audit_compliant', noncompliant: 'audit_noncompliant', na: 'audit_na',
};

/**
 * The report type of an outcome. In a dry run an enforce directive's would-be repair is
 * `audit_noncompliant`, as in audit: a drift found and left alone, not an error.
 */
export function reportType(status: Status, audit: boolean, dryRun = false): string {
  if (dryRun && status === 'noncompliant') return 'audit_noncompliant';
  return (audit ? AUDIT_TYPE : ENFORCE_TYPE)[status];
}

export function nodeConditionEnv(ids: string[], facts: Record<string, unknown>, env: NodeJS.ProcessEnv): ConditionEnv {
  const isKind = (p: string, dir: boolean) => {
    try {
      return dir ? statSync(p).isDirectory() : statSync(p).isFile();
    } catch {
      return false;
    }
  };
  return {
    identities: ids,
    hasFile: (p) => isKind(p, false),
    hasDirectory: (p) => isKind(p, true),
    hasCommand: (c) =>
      (env.PATH ?? '').split(delimiter).some((d) => {
        try {
          accessSync(join(d, c), constants.X_OK);
          return true;
        } catch {
          return false;
        }
      }),
    fact: (path) => path.split('.').reduce<unknown>((o, k) => (o && typeof o === 'object' ? (o as Record<string, unknown>)[k] : undefined), facts),
  };
}

export interface ApplyOptions {
  writer: RunLogWriter;
  ctx: Omit<MethodContext, 'mode'>;
  /** `capstan-agent run --audit`: every directive audits, whatever its mode. */
  forceAudit: boolean;
  conditionEnv: ConditionEnv;
  /** Each outcome as it happens (dry runs print them). */
  onOutcome?: (d: BundleDirective, o: Outcome, type: string) => void;
}

export async function applyDirectives(directives: BundleDirective[], o: ApplyOptions): Promise<void> {
  for (const d of directives) {
    const method = METHODS.get(d.method);
    const audit = o.forceAudit || d.mode === 'audit' || method?.auditOnly === true;
    const emit = (out: Outcome) => {
      const type = reportType(out.status, audit, o.ctx.dryRun);
      o.writer.add({ policy: d.method, event_type: type, rule_id: d.rule_id, directive_id: d.id, component: out.component, key_value: out.key, msg: out.message });
      o.onOutcome?.(d, out, type);
      // What the change changed, right after its report (shared/src/runlog/diff.ts).
      if (out.diff && out.diff.diff !== '' && CHANGE_EVENT_TYPES.has(type)) {
        const msg = diffMessage(out.diff);
        try {
          o.writer.add({ policy: d.method, event_type: DIFF_EVENT_TYPE, rule_id: d.rule_id, directive_id: d.id, component: out.component, key_value: out.key, msg });
        } catch (err) {
          // A diff is information: one the run log cannot carry is left out, the run goes on.
          o.ctx.log.warn({ err, directive: d.id }, 'diff report not written');
          return;
        }
        o.onOutcome?.(d, { ...out, message: msg }, DIFF_EVENT_TYPE);
      }
    };
    // Same component and key as shared expectedComponents() gives the server for these cases.
    if (!method) {
      emit({ component: d.method, key: 'unknown method', status: 'error', message: `unknown method ${d.method}` });
      continue;
    }
    let params;
    try {
      params = method.validate(d.params);
    } catch (err) {
      emit({ component: d.method, key: 'invalid parameters', status: 'error', message: (err as Error).message });
      continue;
    }
    if (d.condition !== undefined && d.condition.trim() !== '') {
      let applies: boolean;
      try {
        applies = evaluateCondition(parseCondition(d.condition), o.conditionEnv);
      } catch (err) {
        for (const c of method.components(params)) emit({ ...c, status: 'error', message: (err as Error).message });
        continue;
      }
      if (!applies) {
        for (const c of method.components(params)) emit({ ...c, status: 'na', message: `condition is false: ${d.condition}` });
        continue;
      }
    }
    const outcomes = await method.apply(params, { siblings: directives, ...o.ctx, mode: audit ? 'audit' : 'enforce' });
    outcomes.forEach(emit);
  }
}

export function defaultIdentities(nodeId: string, fqdn?: string): string[] {
  return [nodeId, os.hostname(), ...(fqdn ? [fqdn] : [])];
}
