/**
 * Findings and compliance transitions: what one compliance write (a run, or a policy judging the
 * last run again) does to a node's findings, and the events it makes. The store calls this inside
 * the write's transaction (StoreRules.events) and writes what it returns.
 *
 * - A component whose state is `error` or `non_compliant` has one open finding: opened by the run
 *   that first reports it (with that run's message and diff), left alone while it persists, its
 *   kind updated if it turns from one to the other.
 * - An open finding whose component is no longer failing closes: `repaired` (the agent repaired
 *   it), `fixed` (compliant or not applicable without a repair by the agent), `removed` (no longer
 *   in the node's policy), `unreported` (a complete run said nothing of it).
 * - The node's state and each rule's state on the node are the worst of their open findings
 *   (error, then non_compliant, else compliant); when one moves, a `compliance.changed` event says
 *   from what to what, and because of which findings.
 */
import type { ComplianceItem } from '@capstan/shared/compliance/compute';
import type { CloseReason, EventInsert, EventSeverity, FindingKind, FindingInput, OpenFinding } from '../store/store.js';
import type { ReconcileInput, ReconcileResult } from '../store/rules.js';
import { clip, event, MAX_LISTED, MAX_NAMED, worse } from './types.js';

export type ComplianceStateName = 'compliant' | 'non_compliant' | 'error';

const key = (r: { rule_id: string; directive_id: string; component: string }) => `${r.rule_id}\u0000${r.directive_id}\u0000${r.component}`;

const isFailing = (it: ComplianceItem): boolean => it.state === 'error' || it.state === 'non_compliant';

/** The worst of some findings' kinds. */
function stateOf(kinds: Iterable<FindingKind>): ComplianceStateName {
  let s: ComplianceStateName = 'compliant';
  for (const k of kinds) {
    if (k === 'error') return 'error';
    s = 'non_compliant';
  }
  return s;
}

const SEVERITY: Record<ComplianceStateName, EventSeverity> = { compliant: 'info', non_compliant: 'warning', error: 'error' };

function closeReason(it: ComplianceItem | undefined): CloseReason {
  if (!it || it.state === 'unexpected') return 'removed';
  if (it.state === 'missing') return 'unreported';
  return it.state === 'repaired' ? 'repaired' : 'fixed';
}

/** Rule id → the kinds of its failing components. */
function byRule(entries: Iterable<{ rule_id: string; kind: FindingKind }>): Map<string, FindingKind[]> {
  const out = new Map<string, FindingKind[]>();
  for (const e of entries) {
    const list = out.get(e.rule_id) ?? [];
    list.push(e.kind);
    out.set(e.rule_id, list);
  }
  return out;
}

export function reconcile(input: ReconcileInput): ReconcileResult {
  const node = input.node_id;
  const runId = input.run?.id ?? null;
  const failing = new Map<string, ComplianceItem>();
  const items = new Map<string, ComplianceItem>();
  for (const it of input.items) {
    const k = key(it);
    items.set(k, it);
    if (isFailing(it)) failing.set(k, it);
  }
  const open = new Map(input.open.map((f) => [key(f), f]));
  const reports = new Map(input.reports.map((r) => [key(r), r]));
  const out: ReconcileResult = { open: [], close: [], restate: [], events: [] };

  for (const [k, it] of failing) {
    const kind = it.state as FindingKind;
    const f = open.get(k);
    if (f) {
      if (f.kind !== kind) out.restate.push({ id: f.id, kind, event_type: it.outcome ?? '' });
      continue;
    }
    const r = reports.get(k);
    const report: FindingInput = r ?? {
      rule_id: it.rule_id, directive_id: it.directive_id, component: it.component, key_value: '', event_type: it.outcome ?? '', message: '', diff: null, diff_truncated: false,
    };
    out.open.push({
      input: report,
      kind,
      event: event('finding.opened', kind === 'error' ? 'error' : 'warning', node, input.at, {
        finding_id: null, rule_id: it.rule_id, directive_id: it.directive_id, component: it.component, key: report.key_value,
        kind, event_type: report.event_type, message: clip(report.message), run_id: runId,
      }),
    });
  }
  for (const [k, f] of open) {
    if (failing.has(k)) continue;
    const reason = closeReason(items.get(k));
    const runs = Math.max(1, input.last_seen.runs_seen - f.first_count + 1);
    out.close.push({
      id: f.id, reason, runs,
      event: event('finding.closed', 'info', node, input.at, {
        finding_id: f.id, rule_id: f.rule_id, directive_id: f.directive_id, component: f.component, key: f.key_value,
        kind: f.kind, reason, runs, first_seen_at: f.first_seen_at, run_id: runId,
      }),
    });
  }
  const transition = transitions(input, failing, open);
  if (transition) out.events.push(transition);
  return out;
}

/** The node's and its rules' state changes, as one event; null when none moved. */
function transitions(input: ReconcileInput, failing: Map<string, ComplianceItem>, open: Map<string, OpenFinding>): EventInsert | null {
  const after = [...failing.values()].map((it) => ({ rule_id: it.rule_id, kind: it.state as FindingKind }));
  const from = stateOf(input.open.map((f) => f.kind));
  const to = stateOf(after.map((a) => a.kind));
  const rulesBefore = byRule(input.open);
  const rulesAfter = byRule(after);
  const rules: Array<{ rule_id: string; from: ComplianceStateName; to: ComplianceStateName }> = [];
  for (const ruleId of [...new Set([...rulesBefore.keys(), ...rulesAfter.keys()])].sort()) {
    const a = stateOf(rulesBefore.get(ruleId) ?? []);
    const b = stateOf(rulesAfter.get(ruleId) ?? []);
    if (a !== b) rules.push({ rule_id: ruleId, from: a, to: b });
  }
  if (from === to && rules.length === 0) return null;
  let severity: EventSeverity = from === to ? 'info' : SEVERITY[to];
  for (const r of rules) severity = worse(severity, SEVERITY[r.to]);
  // What made it move: the components that started failing, or those that stopped.
  const openedKeys = [...failing.keys()].filter((k) => !open.has(k));
  const because = openedKeys.length > 0
    ? openedKeys.map((k) => failing.get(k)!).map((it) => ({ rule_id: it.rule_id, directive_id: it.directive_id, component: it.component, state: it.state }))
    : input.open.filter((f) => !failing.has(key(f))).map((f) => ({ rule_id: f.rule_id, directive_id: f.directive_id, component: f.component, state: 'closed' }));
  return event('compliance.changed', severity, input.node_id, input.at, {
    cause: input.run ? 'run' : 'policy', run_id: input.run?.id ?? null, from, to,
    rules: rules.slice(0, MAX_LISTED), rules_changed: rules.length,
    because: because.slice(0, MAX_NAMED), because_count: because.length,
  });
}
