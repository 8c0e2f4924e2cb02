/** Row ↔ record for jobs, shared by both backends (see types.ts). */
import type { UpgradeRequest } from '@capstan/shared/upgrade';
import { TASK_STATES, type TaskState } from './types.js';
import type { NodeFilter } from '../store.js';
import { isoOf } from '../time.js';
import type {
  BootstrapSpec, JobKind, JobProgress, JobRecord, JobState, JobType, NodeSelector, TaskRecord, TaskTransition,
} from './types.js';

export type Row = Record<string, unknown>;

/** A stored time as RFC 3339 UTC. */
export const utc = (s: string) => new Date(s).toISOString();

const isoOrNull = (v: unknown): string | null => (v === null || v === undefined ? null : isoOf(v));
const json = <T>(v: unknown): T => (typeof v === 'string' ? (JSON.parse(v) as T) : (v as T));

export function emptyProgress(): JobProgress {
  const p = { total: 0 } as JobProgress;
  for (const s of TASK_STATES) p[s] = 0;
  return p;
}

/** Progress from `(state, n)` rows. */
export function progressFrom(rows: Array<{ state: unknown; n: unknown }>): JobProgress {
  const p = emptyProgress();
  for (const r of rows) {
    const n = Number(r.n);
    p[r.state as TaskState] = n;
    p.total += n;
  }
  return p;
}

export function jobFromRow(r: Row, progress: JobProgress): JobRecord {
  const spec = json<{ nodes?: string[]; node_selectors?: NodeSelector[]; filters?: NodeFilter[]; bootstrap?: BootstrapSpec; upgrade?: UpgradeRequest; campaign_id?: string }>(r.spec);
  return {
    id: String(r.id),
    name: String(r.name),
    type: r.type as JobType,
    state: r.state as JobState,
    nodes: spec.nodes ?? [],
    node_selectors: spec.node_selectors ?? [],
    ...(spec.filters && spec.filters.length > 0 && { filters: spec.filters }),
    conditions: json<string[]>(r.conditions),
    keep_output: r.keep_output === true || r.keep_output === 1,
    timeout_ms: Number(r.timeout_ms),
    ...(spec.bootstrap && { bootstrap: spec.bootstrap }),
    ...(spec.upgrade && { upgrade: spec.upgrade }),
    ...(spec.campaign_id && { campaign_id: spec.campaign_id }),
    created_at: isoOf(r.created_at),
    deadline_at: isoOf(r.deadline_at),
    finished_at: isoOrNull(r.finished_at),
    progress,
  };
}

export function taskFromRow(r: Row): TaskRecord {
  return {
    job_id: String(r.job_id),
    node_id: String(r.node_id),
    state: r.state as TaskState,
    reason: String(r.reason),
    message: (r.message as string | null) ?? null,
    relay: (r.relay as string | null) ?? null,
    exit_code: r.exit_code === null || r.exit_code === undefined ? null : Number(r.exit_code),
    output: (r.output as string | null) ?? null,
    step: (r.step as string | null) ?? null,
    updated_at: isoOf(r.updated_at),
  };
}

export function transitionFromRow(r: Row): TaskTransition {
  return {
    at: isoOf(r.at),
    from: (r.from_state as TaskState | null) ?? null,
    to: r.to_state as TaskState,
    reason: String(r.reason),
    message: (r.message as string | null) ?? null,
  };
}

export function specJson(j: { nodes: string[]; node_selectors: NodeSelector[]; filters?: NodeFilter[]; bootstrap?: BootstrapSpec; upgrade?: UpgradeRequest; campaign_id?: string }): string {
  return JSON.stringify({
    nodes: j.nodes, node_selectors: j.node_selectors,
    ...(j.filters && j.filters.length > 0 && { filters: j.filters }),
    ...(j.bootstrap && { bootstrap: j.bootstrap }),
    ...(j.upgrade && { upgrade: j.upgrade }),
    ...(j.campaign_id && { campaign_id: j.campaign_id }),
  });
}

/** The SQL condition (over `jobs j`) of one dispatcher's kind of job. */
export function kindCondition(kind: JobKind): string {
  return kind === 'bootstrap' ? "j.type = 'bootstrap'" : "j.type <> 'bootstrap'";
}

/**
 * Who runs a bootstrap task (compared with one bound parameter, `placeholder`): the relay that
 * hosts the provider of one of the node's managers (the smallest such relay id when several do),
 * else the server.
 */
export function bootstrapHostCondition(placeholder: string): string {
  return `COALESCE((SELECT min(m.provider) FROM node_managers l JOIN managers m ON m.id = l.manager_id
    WHERE l.node_id = t.node_id AND m.provider <> 'server'), 'server') = ${placeholder}`;
}

export const JOB_COLUMNS = 'id, name, type, state, spec, conditions, keep_output, timeout_ms, created_at, deadline_at, finished_at';
export const TASK_COLUMNS = 'job_id, node_id, state, reason, message, relay, exit_code, output, step, updated_at';
