/**
 * The changes in a run log: every `result_repaired` report (what the agent changed on the node),
 * with the diff the agent wrote right after it (shared/src/runlog/diff.ts). An audit's
 * `audit_noncompliant` is not a change: nothing changed on the node, and it is reported again by
 * every run until fixed; it is a finding (findings.ts). Runs in the ingest workers with the
 * parse. A run reporting more changes than `maxPerRun` keeps the first ones and one more entry
 * saying how many were left out, so the store stays bounded per run.
 */
import { DIFF_EVENT_TYPE, parseDiffMessage, type ReportDiff } from '@capstan/shared/runlog/diff';
import type { Report } from '@capstan/shared/runlog/report';
import type { ChangeInput } from '../store/store.js';

export interface ChangeLimits {
  /** Most changes kept per run. */
  maxPerRun: number;
  /** Longest message kept (characters), longer ones are cut. */
  maxMessageChars: number;
  /** Largest diff kept (characters); a longer one is cut and marked truncated. */
  maxDiffChars: number;
}

export const DEFAULT_CHANGE_LIMITS: ChangeLimits = { maxPerRun: 1000, maxMessageChars: 4096, maxDiffChars: 64 * 1024 };

export const cut = (s: string, max: number) => (s.length > max ? `${s.slice(0, max)}…` : s);

/** The report type of a change: a repair. */
export const REPAIR_EVENT_TYPE = 'result_repaired';

/** The diff report right after `reports[i]`, for the same component and key, if any. */
export function diffAfter(reports: readonly Report[], i: number, maxChars: number): ReportDiff | null {
  const r = reports[i]!;
  const next = reports[i + 1];
  return next && next.event_type === DIFF_EVENT_TYPE && next.rule_id === r.rule_id && next.directive_id === r.directive_id
    && next.component === r.component && next.key_value === r.key_value
    ? parseDiffMessage(next.msg, maxChars * 4)
    : null;
}

export function extractChanges(reports: readonly Report[], limits: ChangeLimits = DEFAULT_CHANGE_LIMITS): ChangeInput[] {
  const out: ChangeInput[] = [];
  let dropped = 0;
  let last: Report | undefined;
  for (let i = 0; i < reports.length; i++) {
    const r = reports[i]!;
    if (r.event_type !== REPAIR_EVENT_TYPE) continue;
    if (out.length >= limits.maxPerRun) {
      dropped++;
      last = r;
      continue;
    }
    const diff = diffAfter(reports, i, limits.maxDiffChars);
    let text = diff?.diff ?? null;
    let truncated = diff?.truncated ?? false;
    if (text !== null && text.length > limits.maxDiffChars) {
      text = text.slice(0, limits.maxDiffChars);
      truncated = true;
    }
    out.push({
      rule_id: r.rule_id, directive_id: r.directive_id, component: r.component, key_value: r.key_value,
      event_type: r.event_type, message: cut(r.msg, limits.maxMessageChars), at: r.execution_datetime,
      diff: text, diff_truncated: truncated,
    });
  }
  if (dropped > 0 && last) {
    out.push({
      rule_id: last.rule_id, directive_id: last.directive_id, component: last.component, key_value: last.key_value,
      event_type: last.event_type, message: `${dropped} more changes in this run were not recorded (at most ${limits.maxPerRun} per run)`,
      at: last.execution_datetime, diff: null, diff_truncated: false,
    });
  }
  return out;
}
