/**
 * The agent's own health checks, reported on every run under the system rule `capstan-agent`:
 * they are real enforce-mode checks (the node key's mode is repaired when it drifts), so even a
 * node with no policy yet sends results the server can count.
 */
import { chmod, stat } from 'node:fs/promises';
import { SELF_CHECK_DIRECTIVE, SYSTEM_RULE } from '@capstan/shared/policy/system';
import { capDiff, DIFF_EVENT_TYPE, diffMessage } from '@capstan/shared/runlog/diff';
import { modeLine } from './methods/diff.js';
import type { RunLogWriter } from './runlog/write.js';

const RULE = SYSTEM_RULE;
const DIRECTIVE = SELF_CHECK_DIRECTIVE;
const POLICY = 'Common';

export async function selfChecks(w: RunLogWriter, p: { stateDir: string; keyPath: string }): Promise<void> {
  const dir = await stat(p.stateDir).catch(() => null);
  if (dir?.isDirectory() && (dir.mode & 0o002) === 0) {
    w.add({ policy: POLICY, event_type: 'result_success', rule_id: RULE, directive_id: DIRECTIVE, component: 'State directory', key_value: p.stateDir, msg: 'State directory exists and is not world-writable' });
  } else {
    w.add({ policy: POLICY, event_type: 'result_error', rule_id: RULE, directive_id: DIRECTIVE, component: 'State directory', key_value: p.stateDir, msg: dir ? 'State directory is world-writable' : 'State directory is missing' });
  }

  const key = await stat(p.keyPath).catch(() => null);
  if (!key) {
    w.add({ policy: POLICY, event_type: 'result_error', rule_id: RULE, directive_id: DIRECTIVE, component: 'Node key', key_value: p.keyPath, msg: 'Node key is missing' });
  } else if ((key.mode & 0o077) === 0) {
    w.add({ policy: POLICY, event_type: 'result_success', rule_id: RULE, directive_id: DIRECTIVE, component: 'Node key', key_value: p.keyPath, msg: 'Node key is readable by its owner only' });
  } else {
    try {
      await chmod(p.keyPath, 0o600);
      w.add({ policy: POLICY, event_type: 'result_repaired', rule_id: RULE, directive_id: DIRECTIVE, component: 'Node key', key_value: p.keyPath, msg: `Node key mode was ${(key.mode & 0o777).toString(8)}, set to 600` });
      // What the repair changed, as every file change says it (a mode, never the key).
      w.add({ policy: POLICY, event_type: DIFF_EVENT_TYPE, rule_id: RULE, directive_id: DIRECTIVE, component: 'Node key', key_value: p.keyPath, msg: diffMessage(capDiff(modeLine(key.mode, 0o600))) });
    } catch (err) {
      w.add({ policy: POLICY, event_type: 'result_error', rule_id: RULE, directive_id: DIRECTIVE, component: 'Node key', key_value: p.keyPath, msg: `Cannot restrict the node key: ${(err as Error).message}` });
    }
  }
}
