/**
 * Jobs in the store (both backends): a job, its per-node tasks and every transition of every
 * task. Transitions are checked by the domain's state machine (server/src/jobs/states.ts) inside the store's transaction,
 * so a refused one changes nothing and two writers racing on one task cannot both win.
 */
import type { UpgradeRequest } from '@capstan/shared/upgrade';
import { lookup, REFUSE, type NulRules } from '../guard.js';
import type { NodeFilter, Page } from '../store.js';

/** `upgrade`: a patch campaign's wave (server/src/campaigns), a run carrying an upgrade request. */
export type JobType = 'run' | 'inventory' | 'bootstrap' | 'upgrade';
/** Which pending tasks a dispatcher takes: relays run `run`/`inventory`, the bootstrap runner its own. */
export type JobKind = 'remote-run' | 'bootstrap';

/** What a bootstrap job needs beyond its targets (docs/bootstrap.md). */
export interface BootstrapSpec {
  /** A credential named by the admin for every target; null: chosen per node by its selectors. */
  credential: string | null;
  /** The relay (or server) URL written into the agent's configuration. */
  relay_url: string;
}
/** running until every task is final (then finished), or cancelled by an admin. */
export type JobState = 'running' | 'finished' | 'cancelled';

export interface NodeSelector {
  manager_id: string;
  filters: NodeFilter[];
}

export interface JobInsert {
  id: string;
  name: string;
  type: JobType;
  /** What the admin asked for, kept as given (static nodes and selectors). */
  nodes: string[];
  node_selectors: NodeSelector[];
  /** Node filters the admin gave beyond the selectors (empty: none). */
  filters?: NodeFilter[];
  conditions: string[];
  keep_output: boolean;
  timeout_ms: number;
  /** Bootstrap jobs only. */
  bootstrap?: BootstrapSpec;
  /** Upgrade jobs only: what the agent upgrades (shared/upgrade.ts). */
  upgrade?: UpgradeRequest;
  /** Upgrade jobs only: the campaign whose wave this job is. */
  campaign_id?: string;
  created_at: string;
  /** created_at + timeout: non-final tasks are aborted (reason timeout) after it. */
  deadline_at: string;
}

/** A task's states (the domain's state machine, server/src/jobs/states.ts, says how they follow). */
export const TASK_STATES = ['pending', 'scheduled', 'in_progress', 'done', 'failed', 'aborted'] as const;
export type TaskState = (typeof TASK_STATES)[number];

export type JobProgress = Record<TaskState, number> & { total: number };

export interface JobRecord extends JobInsert {
  state: JobState;
  finished_at: string | null;
  progress: JobProgress;
}

export interface TaskRecord {
  job_id: string;
  node_id: string;
  state: TaskState;
  reason: string;
  message: string | null;
  /** The relay(s) the task was handed to; once started, the one that reached the node. */
  relay: string | null;
  exit_code: number | null;
  /** The run's output lines (keep_output only), bounded by jobs.max_output. */
  output: string | null;
  /** Bootstrap tasks: the step reached (connect, verify, copy, install, enrol, done); null otherwise. */
  step: string | null;
  updated_at: string;
}

export interface TaskTransition {
  at: string;
  from: TaskState | null;
  to: TaskState;
  reason: string;
  message: string | null;
}

export interface TransitionInput {
  to: TaskState;
  reason: string;
  at: string;
  message?: string | null;
  relay?: string | null;
  exit_code?: number | null;
  output?: string | null;
  /**
   * Only move a task that is in one of these states; otherwise answer null and change nothing
   * (the dispatcher's claim, events racing a cancel or a timeout). Without it, a transition the
   * table does not have is refused with ERR_JOB_TRANSITION.
   */
  expect?: readonly TaskState[];
}

/** A running job's pending tasks, as the dispatcher claims them. */
export interface PendingWork {
  job: JobRecord;
  nodes: string[];
}

export interface JobStore {
  /**
   * Create a job and one `pending` task (reason created) per node, in one transaction; the nodes
   * in `failed` go on to `failed` with their reason in the same transaction (nodes that cannot
   * run: not accepted, terminated, no agent).
   */
  createJob(job: JobInsert, nodeIds: string[], failed?: ReadonlyMap<string, { reason: string; message: string }>): Promise<JobRecord>;
  getJob(id: string): Promise<JobRecord | null>;
  /** Newest first. */
  listJobs(page: number, perPage: number, state?: JobState): Promise<Page<JobRecord>>;
  /** Every task of a job, by node id. */
  listTasks(jobId: string): Promise<TaskRecord[]>;
  getTask(jobId: string, nodeId: string): Promise<TaskRecord | null>;
  /** One task's transitions, oldest first (its creation included). */
  taskHistory(jobId: string, nodeId: string): Promise<TaskTransition[]>;
  /**
   * Move one task (see TransitionInput.expect); a job whose last task becomes final is finished.
   * Returns the task afterwards, or null when it is unknown or not in an expected state.
   */
  transition(jobId: string, nodeId: string, t: TransitionInput): Promise<TaskRecord | null>;
  /**
   * The dispatcher's claim, in one transaction: those of `nodeIds` still pending go to
   * `scheduled` (reason dispatched) with `relay` and `message`. Returns the node ids claimed.
   */
  claimTasks(jobId: string, nodeIds: string[], c: { at: string; relay: string; message: string }): Promise<string[]>;
  /**
   * Pending tasks of running jobs of one kind (default remote-run), at most `limit` tasks, oldest
   * jobs first. Bootstrap tasks are those `host` runs (default `server`): a node one of whose
   * managers a relay hosts is bootstrapped by that relay (the smallest relay id when several do).
   */
  pendingWork(limit: number, kind?: JobKind, host?: string): Promise<PendingWork[]>;
  /**
   * Record the step an in-progress task reached, with a message; false (nothing changed) when the
   * task is not in progress any more (cancelled, timed out).
   */
  setTaskStep(jobId: string, nodeId: string, step: string, message: string, at: string): Promise<boolean>;
  /** Abort (reason cancelled) every non-final task and mark the job cancelled; null when unknown. */
  cancelJob(id: string, at: string): Promise<JobRecord | null>;
  /** Abort (reason timeout) the non-final tasks of running jobs past their deadline; returns how many. */
  expireTasks(now: string, limit: number): Promise<number>;
  /** Delete finished or cancelled jobs that ended before `before` (tasks and history with them). */
  deleteJobsBefore(before: string, limit: number): Promise<number>;
}

/** How each jobs method treats U+0000 (guard.ts). */
export const JOBS_NUL: NulRules<JobStore> = {
  createJob: REFUSE,
  getJob: lookup([0], () => null),
  listJobs: REFUSE,
  listTasks: lookup([0], () => []),
  getTask: lookup([0, 1], () => null),
  taskHistory: lookup([0, 1], () => []),
  transition: lookup([0, 1], () => null),
  claimTasks: lookup([0, 1], () => []),
  pendingWork: lookup([2], () => []),
  setTaskStep: lookup([0, 1], () => false),
  cancelJob: lookup([0], () => null),
  expireTasks: REFUSE,
  deleteJobsBefore: REFUSE,
};
