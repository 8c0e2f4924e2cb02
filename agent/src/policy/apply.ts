/**
 * Apply (or audit) every directive of a bundle: evaluate its condition on the node, open the
 * secrets its params use, validate its parameters, run its method — or, for a technique's
 * directive, each of its calls in order (calls.ts) — and write one report per outcome carrying
 * the rule and directive ids, so the server can compare expected with received. A bad
 * condition, a secret that does not open or bad parameters are a reported error for that
 * directive, never a crash of the run. No secret's value reaches a report, a diff or a log line.
 */
import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import os from 'node:os';
import { type BundleDirective } from '@capstan/shared/policy/bundle';
import { evaluateCondition, parseCondition, type ConditionEnv } from '@capstan/shared/policy/condition';
import { lookupPath } from '@capstan/shared/policy/data';
import { Redactor, type SealedSecret } from '@capstan/shared/policy/secrets';
import { CHANGE_EVENT_TYPES, DIFF_EVENT_TYPE, diffMessage } from '@capstan/shared/runlog/diff';
import { METHODS, type Method, type MethodContext, type Outcome, type Status } from '../methods/index.js';
import type { RunLogWriter } from '../runlog/write.js';
import { runCalls } from './calls.js';
import { fillSecrets, SECRET_DIFF_NOTE, usesSecrets } from './secrets.js';

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

/**
 * The node's side of conditions. `data` is the node data (shared/src/policy/data.ts nodeData):
 * `fact('role')` reads the same name a filter's `fact:role` and a template's `{{role}}` read.
 */
export function nodeConditionEnv(ids: string[], data: Record<string, unknown>, env: NodeJS.ProcessEnv): ConditionEnv {
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
    fact: (path) => lookupPath(data, path),
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
  /** The node's private key (PEM), which opens the secrets sealed for it. */
  nodeKeyPem?: string;
  /** The bundle's own sealed secrets (a directive's are looked up first). */
  bundleSecrets?: Record<string, SealedSecret>;
  /** Holds every secret opened in the run; the run-log writer redacts with it too. */
  redactor?: Redactor;
  /** The method registry (tests give stand-ins). */
  methods?: ReadonlyMap<string, Method<any>>;
}

/** How one directive's (or call's) outcomes become reports. */
export interface Emitter {
  /** Write the outcome's report (and its diff); returns the report type written. */
  (out: Outcome, component?: string): string;
}

export function emitterFor(d: BundleDirective, policy: string, audit: boolean, usedSecret: boolean, o: ApplyOptions, redactor: Redactor): Emitter {
  return (raw, component) => {
    const out: Outcome = { ...raw, component: component ?? raw.component, key: redactor.redact(raw.key), message: redactor.redact(raw.message) };
    const type = reportType(out.status, audit, o.ctx.dryRun);
    o.writer.add({ policy, event_type: type, rule_id: d.rule_id, directive_id: d.id, component: out.component, key_value: out.key, msg: out.message });
    o.onOutcome?.(d, out, type);
    // What the change changed, right after its report (shared/src/runlog/diff.ts). A directive
    // that used a secret shows none of it: the secret could be anywhere in the content.
    if (out.diff && out.diff.diff !== '' && CHANGE_EVENT_TYPES.has(type)) {
      const diff = usedSecret ? { diff: `${SECRET_DIFF_NOTE}\n`, truncated: false } : { ...out.diff, diff: redactor.redact(out.diff.diff) };
      const msg = diffMessage(diff);
      try {
        o.writer.add({ policy, event_type: DIFF_EVENT_TYPE, rule_id: d.rule_id, directive_id: d.id, component: out.component, key_value: out.key, msg });
      } catch (err) {
        // A diff is information: one the run log cannot carry is left out, the run goes on.
        o.ctx.log.warn({ directive: d.id, reason: redactor.redact((err as Error).message) }, 'diff report not written');
        return type;
      }
      o.onOutcome?.(d, { ...out, message: msg }, DIFF_EVENT_TYPE);
    }
    return type;
  };
}

/** A condition's verdict, or the error evaluating it (a message, redacted by the emitter). */
export function conditionHolds(cond: string | undefined, env: ConditionEnv): boolean | Error {
  if (cond === undefined || cond.trim() === '') return true;
  try {
    return evaluateCondition(parseCondition(cond), env);
  } catch (err) {
    return err as Error;
  }
}

export async function applyDirectives(directives: BundleDirective[], o: ApplyOptions): Promise<void> {
  const methods = o.methods ?? METHODS;
  const redactor = o.redactor ?? new Redactor();
  // What else the node is assigned, technique calls included (archive purge keeps their bundles).
  const siblings: ReadonlyArray<{ method: string; params: Record<string, unknown> }> = directives.flatMap((d): Array<{ method: string; params: Record<string, unknown> }> => d.calls ?? [d]);
  for (const d of directives) {
    if (d.calls) {
      await runCalls(d, { ...o, methods, redactor, siblings });
      continue;
    }
    const method = methods.get(d.method);
    const audit = o.forceAudit || d.mode === 'audit' || method?.auditOnly === true;
    const emit = emitterFor(d, d.method, audit, usesSecrets(d.params), o, redactor);
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
    const applies = conditionHolds(d.condition, o.conditionEnv);
    if (applies !== true) {
      const status: Status = applies === false ? 'na' : 'error';
      const message = applies === false ? `condition is false: ${d.condition}` : applies.message;
      for (const c of method.components(params)) emit({ ...c, status, message });
      continue;
    }
    // Secrets are opened only now, right before the method runs, and checked again filled in.
    let filled;
    try {
      filled = method.validate(fillSecrets(d.params, d, o, redactor));
    } catch (err) {
      for (const c of method.components(params)) emit({ ...c, status: 'error', message: (err as Error).message });
      continue;
    }
    const outcomes = await method.apply(filled, { siblings, ...o.ctx, mode: audit ? 'audit' : 'enforce' });
    outcomes.forEach((out) => emit(out));
  }
}

export function defaultIdentities(nodeId: string, fqdn?: string): string[] {
  return [nodeId, os.hostname(), ...(fqdn ? [fqdn] : [])];
}
