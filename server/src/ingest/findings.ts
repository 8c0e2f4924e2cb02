/**
 * The failing reports of a run log, one per component: what a finding opened by this run says
 * (its report type, key, message, and for an audit the diff a repair would make). Runs in the
 * ingest workers with the parse. The store opens a finding only for a component whose compliance
 * state is error or non-compliant (events/findings.ts); this only carries the words.
 */
import type { Report } from '@capstan/shared/runlog/report';
import type { FindingInput } from '../store/store.js';
import { cut, diffAfter, type ChangeLimits } from './changes.js';

/** Report types a finding comes from, the worse first when one component has several. */
const FAILING: Readonly<Record<string, number>> = { result_error: 2, audit_error: 2, audit_noncompliant: 1 };

export function extractFindings(reports: readonly Report[], limits: ChangeLimits): FindingInput[] {
  const byComponent = new Map<string, { rank: number; finding: FindingInput }>();
  for (let i = 0; i < reports.length; i++) {
    const r = reports[i]!;
    const rank = FAILING[r.event_type];
    if (rank === undefined) continue;
    const k = `${r.rule_id}\u0000${r.directive_id}\u0000${r.component}`;
    const had = byComponent.get(k);
    if (had && had.rank >= rank) continue;
    // A run with more failing components than a run may have changes keeps the first ones.
    if (!had && byComponent.size >= limits.maxPerRun) continue;
    const diff = r.event_type === 'audit_noncompliant' ? diffAfter(reports, i, limits.maxDiffChars) : null;
    let text = diff?.diff ?? null;
    let truncated = diff?.truncated ?? false;
    if (text !== null && text.length > limits.maxDiffChars) {
      text = text.slice(0, limits.maxDiffChars);
      truncated = true;
    }
    byComponent.set(k, {
      rank,
      finding: {
        rule_id: r.rule_id, directive_id: r.directive_id, component: r.component, key_value: r.key_value, event_type: r.event_type,
        message: cut(r.msg, limits.maxMessageChars), diff: text, diff_truncated: truncated,
      },
    });
  }
  return [...byComponent.values()].map((v) => v.finding);
}
