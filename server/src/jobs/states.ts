/**
 * The per-node task state machine of a job, after VMClarity's AssetScan discipline: one table
 * says which transitions exist and which reasons each target state may carry; everything that
 * moves a task (the dispatcher, the events coming back from the relays, the timeout sweep, a
 * cancel) goes through `checkTransition`, in both store backends.
 *
 *   pending ──▶ scheduled ──▶ in_progress ──▶ done
 *      │            │              │       └─▶ failed
 *      │            └──────────────┼─────────▶ failed
 *      └───────────────────────────┴─────────▶ failed (pending: the node cannot be run at all)
 *   aborted from every non-final state (cancel, timeout)
 *
 * done, failed and aborted are final. Unlike VMClarity there is no Aborted → Failed step: an
 * abort here has nothing to clean up on the node (a run already started there simply finishes
 * and its outcome is ignored), so it is final at once and can never be stuck (VMClarity #427).
 */
import { capstanError } from '@capstan/shared/errors';
import { TASK_STATES, type TaskState } from '../store/jobs/types.js';
import type { TaskRules } from '../store/rules.js';

export { TASK_STATES, type TaskState };

export const FINAL_STATES: ReadonlySet<TaskState> = new Set(['done', 'failed', 'aborted']);
export const NON_FINAL_STATES: readonly TaskState[] = TASK_STATES.filter((s) => !FINAL_STATES.has(s));

/** from → the states it may go to. */
export const TRANSITIONS: Readonly<Record<TaskState, readonly TaskState[]>> = {
  pending: ['scheduled', 'failed', 'aborted'],
  scheduled: ['in_progress', 'failed', 'aborted'],
  in_progress: ['done', 'failed', 'aborted'],
  done: [],
  failed: [],
  aborted: [],
};

/**
 * The reasons a task may enter each state with. A reason is a permanent code clients match on;
 * the transition's `message` says the rest in words.
 */
export const REASONS = {
  pending: ['created'],
  /** Handed to the relay(s) that reach the node. */
  scheduled: ['dispatched'],
  /** The agent acknowledged the run and started it. */
  in_progress: ['started'],
  /** The agent's run exited 0. */
  done: ['completed'],
  failed: [
    'exit_code', // the run exited non-zero
    'busy', // a run was already going on the node
    'agent_error', // the agent (or a relay on the way) reported an error
    'offline', // no relay reached a connected agent within its wait
    'no_answer', // the relay never answered the run it was handed
    'relay_lost', // the relay's output stream ended before the node's run did
    'not_accepted', // the node is pending or refused
    'terminated', // the node's state is terminated (final)
    'no_agent', // the node never sent an inventory: nothing there to run
    // bootstrap jobs (docs/bootstrap.md); each names one ERR_BOOTSTRAP_* / ERR_CREDENTIAL_* code
    'has_agent', // the node already has an agent
    'no_address', // the node has no address to connect to
    'not_discovered', // the node has no cloud identity (not from a manager): its agent could not join its row
    'no_credential', // no credential matches the node (or the one named is unknown)
    'ambiguous_credential', // two credentials match it equally specifically
    'credential_sealed', // the credential does not open with this server's identity secret
    'unreachable', // no SSH connection (refused, timed out, lost)
    'auth_refused', // the SSH server refused the credential
    'host_key_changed', // the host key is not the pinned one (an admin clears the pin)
    'unsupported_os', // not Linux with dpkg, or no package for its architecture
    'no_sudo', // sudo did not run a command without a password
    'no_package', // no agent package could be had (package_dir empty, download or sha256 failed)
    'copy_failed', // the package or the configuration could not be copied
    'install_failed', // dpkg, the configuration or the start command failed
    'command_timeout', // a command outlived bootstrap.command_timeout
    'enrol_timeout', // no inventory with the job's secret within bootstrap.enrol_timeout
    'relay_key', // the task could not be sealed to its relay's certificate, or the relay could not open it
    'bootstrap_error', // anything else (the message says what)
  ],
  aborted: ['cancelled', 'timeout'],
} as const satisfies Record<TaskState, readonly string[]>;

export function isFinal(s: TaskState): boolean {
  return FINAL_STATES.has(s);
}

export function isLegal(from: TaskState, to: TaskState): boolean {
  return TRANSITIONS[from].includes(to);
}

/** Refuse (ERR_JOB_TRANSITION) a transition the table does not have, or a reason its target does not allow. */
export function checkTransition(from: TaskState, to: TaskState, reason: string): void {
  if (!isLegal(from, to)) throw capstanError('ERR_JOB_TRANSITION', `a task cannot go from ${from} to ${to}`);
  if (!(REASONS[to] as readonly string[]).includes(reason)) {
    throw capstanError('ERR_JOB_TRANSITION', `${reason} is not a reason for ${to} (allowed: ${REASONS[to].join(', ')})`);
  }
}

/** What the store applies when it moves a task (its transactions call these). */
export const TASK_RULES: TaskRules = { nonFinal: NON_FINAL_STATES, isFinal, checkTransition };
