/**
 * The policy self-check: every run reports, under the system rule's self-check directive
 * (component `Policy`, which the server expects from every node with a policy), which policy it
 * ran and how it got it. A fresh bundle the agent refused (a signature, key id or node id that
 * does not match: a relay altered it or served another node's) is a `result_error` there, so the
 * server's compliance counts it as an error of that node, not as an unexpected report; the last
 * good policy still runs.
 */
import { SELF_CHECK_DIRECTIVE, SYSTEM_RULE } from '@capstan/shared/policy/system';
import type { RunLogWriter } from '../runlog/write.js';
import type { PolicyState } from './fetch.js';

export const POLICY_COMPONENT = 'Policy';

export function reportPolicy(w: RunLogWriter, policy: PolicyState): void {
  const configId = policy.bundle?.config_id ?? 'none';
  const running = policy.bundle ? `running the last good policy ${configId}` : 'running no policy';
  const report = (event_type: string, msg: string) =>
    w.add({ policy: 'Common', event_type, rule_id: SYSTEM_RULE, directive_id: SELF_CHECK_DIRECTIVE, component: POLICY_COMPONENT, key_value: configId, msg });
  if (policy.problem?.refused) {
    report('result_error', `policy refused (${policy.problem.code}): ${policy.problem.message}; ${running}`);
    return;
  }
  switch (policy.source) {
    case 'fresh':
      return report('result_success', `policy ${configId} received, signature verified`);
    case 'not-modified':
      return report('result_success', `policy ${configId} unchanged`);
    case 'cache':
      // Not refused, only not refreshed (relay unreachable…): what runs was verified when received.
      return report('result_success', `policy ${configId} from the local cache (${policy.problem?.code ?? 'not refreshed'})`);
    case 'none':
      return report('result_success', 'no policy assigned to this node yet');
  }
}
