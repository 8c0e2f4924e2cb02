/**
 * Compliance as the server reads it: the shared computation (the agent prints the same figures
 * for the same run), judged against each node's current policy, with the two states that depend
 * on time decided at the moment of reading (shared nodeTimeState):
 * - `applying`: the node's policy changed and no complete run of it has arrived, within one run
 *   interval plus `compliance.applying_grace` of the change;
 * - `no_answer`: no run for `lifecycle.missed_runs` × `run_interval`, plus the keep-last duration
 *   of the node's groups (`compliance_expiration` on a policy group).
 */
import { computeCompliance, groupItems, nodeTimeState, overrideItems, percentages, tally, type ComplianceCounts } from '@capstan/shared/compliance/compute';
import type { ComplianceBase, ComplianceClock } from '../store/store.js';

export interface ComplianceSettings {
  runIntervalMs: number;
  missedRuns: number;
  applyingGraceMs: number;
}

export function complianceSettings(c: { lifecycle: { run_interval: number; missed_runs: number }; compliance: { applying_grace: number } }): ComplianceSettings {
  return { runIntervalMs: c.lifecycle.run_interval, missedRuns: c.lifecycle.missed_runs, applyingGraceMs: c.compliance.applying_grace };
}

/** The clock compliance is read with at `now`. */
export function complianceClock(s: ComplianceSettings, now: Date = new Date()): ComplianceClock {
  return {
    now_s: Math.floor(now.getTime() / 1000),
    applying_s: Math.ceil((s.runIntervalMs + s.applyingGraceMs) / 1000),
    silence_s: Math.ceil((s.runIntervalMs * s.missedRuns) / 1000),
  };
}

export const withPercent = (counts: ComplianceCounts) => ({ counts, ...percentages(counts) });

/** One node's compliance as the API and `capstan-server nodes compliance <id>` show it. */
export function complianceView(base: ComplianceBase, clock: ComplianceClock) {
  const result = computeCompliance(base.expected, base.outcomes);
  const time = nodeTimeState(base.marks, clock, clock.now_s);
  const items = time === null ? result.items : overrideItems(result.items, time);
  const counts = time === null ? result.counts : tally(items).counts;
  const summary = withPercent(counts);
  const iso = (s: number | null) => (s === null ? null : new Date(s * 1000).toISOString());
  return {
    node_id: base.node_id,
    policy_config_id: base.policy_config_id,
    run: base.run,
    /** The node's class: relays and nodes without an agent are summed apart from managed nodes. */
    class: base.relay ? 'relay' : base.has_agent ? 'agent' : 'agentless',
    /** `applying`, `no_answer`, or null when the last complete run decides. */
    time_state: time,
    /** False when the node's policy has no stored expectations: only received outcomes count. */
    expected: base.expected !== null && base.expected.length > 0,
    applying_since: iso(base.marks.applying_since_s),
    last_answer_at: iso(base.marks.answered_s),
    keep_last_s: base.marks.keep_last_s,
    compliance: summary.compliance,
    summary,
    rules: groupItems(items, 'rule').map((g) => ({ rule_id: g.rule_id, ...withPercent(g.counts) })),
    directives: groupItems(items, 'directive').map((g) => ({ rule_id: g.rule_id, directive_id: g.directive_id, ...withPercent(g.counts) })),
    components: items,
  };
}
