/**
 * The agent's own checks, reported on every run whatever the policy (agent/src/checks.ts). The
 * server adds them to every node's expectations, so they count as expected, not "unexpected".
 */
export const SYSTEM_RULE = 'capstan-agent';
export const SELF_CHECK_DIRECTIVE = 'agent-self-check';
/** `Policy`: which policy the run applied, or why a fresh one was refused (agent/src/policy/report.ts). */
export const SELF_CHECK_COMPONENTS = ['State directory', 'Node key', 'Policy'] as const;

export function systemExpectations(): Array<{ rule_id: string; directive_id: string; component: string }> {
  return SELF_CHECK_COMPONENTS.map((component) => ({ rule_id: SYSTEM_RULE, directive_id: SELF_CHECK_DIRECTIVE, component }));
}
