/**
 * The events the store writes inside its own transactions (a run's, a job's last task's), built
 * here so that what an event says is decided in one place: the store calls these through
 * StoreRules.events and writes what they return, with the change they tell of.
 */
import type { EventRules } from '../store/rules.js';
import { reconcile } from './findings.js';
import { event, MAX_NAMED } from './types.js';

export const EVENT_RULES: EventRules = {
  reconcile,

  repaired(nodeId, run, changes, label) {
    // Repairs of a new or edited policy are the policy reaching the node, not drift.
    if (label !== 'corrective' || changes.length === 0) return null;
    return event('drift.repaired', 'warning', nodeId, run.started_utc, {
      run_id: run.id,
      count: changes.length,
      // The components, not the messages and diffs: GET /api/1/changes?node=…&from=… has them.
      changes: changes.slice(0, MAX_NAMED).map((c) => ({ rule_id: c.rule_id, directive_id: c.directive_id, component: c.component, key: c.key_value })),
    });
  },

  answering(before, after, at) {
    if (before.status !== 'unreachable' || after.status !== 'reachable') return null;
    return event('node.answering', 'info', after.id, at, {
      hostname: after.hostname, relay: after.policy_server, silent_since: before.last_contact_at,
    });
  },

  jobFinished(job, progress, at) {
    const failed = progress.failed + progress.aborted;
    const severity = failed === 0 ? 'info' : failed === progress.total ? 'error' : 'warning';
    return event('job.finished', severity, null, at, { job_id: job.id, name: job.name, job_type: job.type, progress });
  },
};
