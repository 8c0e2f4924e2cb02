/**
 * Jobs on SQLite (see types.ts). Times are stored as ISO 8601 UTC with milliseconds, so
 * text order is time order. Every write is one IMMEDIATE transaction: the read of a task's state
 * and its update cannot be split by another writer.
 */
import type { TaskRules } from '../rules.js';
import type {
  JobInsert, JobKind, JobRecord, JobState, JobStore, PendingWork, TaskRecord, TaskState, TaskTransition, TransitionInput,
} from './types.js';
import {
  JOB_COLUMNS, jobFromRow, bootstrapHostCondition, kindCondition, progressFrom, specJson, TASK_COLUMNS, taskFromRow, transitionFromRow, utc,
  type Row,
} from './rows.js';
import type { Page } from '../store.js';
import type { SqliteDb } from '../sqlite/db.js';

export class SqliteJobStore implements JobStore {
  /** The states a task is still moving in, as an SQL list (the rules say which). */
  private readonly nonFinalSql: string;

  constructor(private readonly db: SqliteDb, private readonly rules: TaskRules, private readonly finished?: (job: JobRecord, at: string) => void) {
    this.nonFinalSql = rules.nonFinal.map((s) => `'${s}'`).join(', ');
  }

  private job(id: string): JobRecord | null {
    const row = this.db.prepare(`SELECT ${JOB_COLUMNS} FROM jobs WHERE id = ?`).get(id) as Row | undefined;
    if (!row) return null;
    const counts = this.db.prepare('SELECT state, count(*) AS n FROM job_tasks WHERE job_id = ? GROUP BY state').all(id) as Array<{ state: string; n: number }>;
    return jobFromRow(row, progressFrom(counts));
  }

  private record(jobId: string, nodeId: string, at: string, from: TaskState | null, to: TaskState, reason: string, message: string | null): void {
    this.db.prepare('INSERT INTO job_task_transitions (job_id, node_id, at, from_state, to_state, reason, message) VALUES (?, ?, ?, ?, ?, ?, ?)')
      .run(jobId, nodeId, at, from, to, reason, message);
  }

  /** A running job whose tasks are all final is finished. */
  private maybeFinish(jobId: string, at: string): void {
    const left = this.db.prepare(`SELECT count(*) AS n FROM job_tasks WHERE job_id = ? AND state IN (${this.nonFinalSql})`).get(jobId) as { n: number };
    if (left.n === 0 && this.db.prepare("UPDATE jobs SET state = 'finished', finished_at = ? WHERE id = ? AND state = 'running'").run(at, jobId).changes > 0) {
      const job = this.finished && this.job(jobId);
      if (job) this.finished!(job, at);
    }
  }

  async createJob(job: JobInsert, nodeIds: string[], failed?: ReadonlyMap<string, { reason: string; message: string }>): Promise<JobRecord> {
    return this.db.write('create job', () => {
      const at = utc(job.created_at);
      this.db.prepare(`INSERT INTO jobs (${JOB_COLUMNS}) VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, NULL)`).run(
        job.id, job.name, job.type, specJson(job), JSON.stringify(job.conditions), job.keep_output ? 1 : 0, job.timeout_ms, at, utc(job.deadline_at),
      );
      const ins = this.db.prepare("INSERT INTO job_tasks (job_id, node_id, state, reason, updated_at) VALUES (?, ?, 'pending', 'created', ?)");
      const fail = this.db.prepare("UPDATE job_tasks SET state = 'failed', reason = ?, message = ? WHERE job_id = ? AND node_id = ?");
      for (const n of new Set(nodeIds)) {
        ins.run(job.id, n, at);
        this.record(job.id, n, at, null, 'pending', 'created', null);
        const why = failed?.get(n);
        if (!why) continue;
        this.rules.checkTransition('pending', 'failed', why.reason);
        fail.run(why.reason, why.message, job.id, n);
        this.record(job.id, n, at, 'pending', 'failed', why.reason, why.message);
      }
      this.maybeFinish(job.id, at);
      return this.job(job.id)!;
    });
  }

  async getJob(id: string): Promise<JobRecord | null> {
    return this.db.read('get job', () => this.job(id));
  }

  async listJobs(page: number, perPage: number, state?: JobState): Promise<Page<JobRecord>> {
    return this.db.read('list jobs', () => {
      const where = state ? 'WHERE state = ?' : '';
      const args = state ? [state] : [];
      const total = (this.db.prepare(`SELECT count(*) AS n FROM jobs ${where}`).get(...args) as { n: number }).n;
      const rows = this.db.prepare(`SELECT id FROM jobs ${where} ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?`)
        .all(...args, perPage, (page - 1) * perPage) as Array<{ id: string }>;
      return { total, data: rows.map((r) => this.job(r.id)!) };
    });
  }

  async listTasks(jobId: string): Promise<TaskRecord[]> {
    return this.db.read('list tasks', () =>
      (this.db.prepare(`SELECT ${TASK_COLUMNS} FROM job_tasks WHERE job_id = ? ORDER BY node_id`).all(jobId) as Row[]).map(taskFromRow));
  }

  async getTask(jobId: string, nodeId: string): Promise<TaskRecord | null> {
    return this.db.read('get task', () => {
      const r = this.db.prepare(`SELECT ${TASK_COLUMNS} FROM job_tasks WHERE job_id = ? AND node_id = ?`).get(jobId, nodeId) as Row | undefined;
      return r ? taskFromRow(r) : null;
    });
  }

  async taskHistory(jobId: string, nodeId: string): Promise<TaskTransition[]> {
    return this.db.read('task history', () =>
      (this.db.prepare('SELECT at, from_state, to_state, reason, message FROM job_task_transitions WHERE job_id = ? AND node_id = ? ORDER BY id')
        .all(jobId, nodeId) as Row[]).map(transitionFromRow));
  }

  async transition(jobId: string, nodeId: string, t: TransitionInput): Promise<TaskRecord | null> {
    return this.db.write('task transition', () => {
      const r = this.db.prepare(`SELECT ${TASK_COLUMNS} FROM job_tasks WHERE job_id = ? AND node_id = ?`).get(jobId, nodeId) as Row | undefined;
      if (!r) return null;
      const cur = taskFromRow(r);
      if (t.expect && !t.expect.includes(cur.state)) return null;
      this.rules.checkTransition(cur.state, t.to, t.reason);
      const at = utc(t.at);
      this.db.prepare(`UPDATE job_tasks SET state = ?, reason = ?, message = ?, relay = coalesce(?, relay), exit_code = coalesce(?, exit_code),
        output = coalesce(?, output), updated_at = ? WHERE job_id = ? AND node_id = ?`).run(
        t.to, t.reason, t.message ?? null, t.relay ?? null, t.exit_code ?? null, t.output ?? null, at, jobId, nodeId,
      );
      this.record(jobId, nodeId, at, cur.state, t.to, t.reason, t.message ?? null);
      if (this.rules.isFinal(t.to)) this.maybeFinish(jobId, at);
      return taskFromRow(this.db.prepare(`SELECT ${TASK_COLUMNS} FROM job_tasks WHERE job_id = ? AND node_id = ?`).get(jobId, nodeId) as Row);
    });
  }

  async claimTasks(jobId: string, nodeIds: string[], c: { at: string; relay: string; message: string }): Promise<string[]> {
    return this.db.write('claim tasks', () => {
      const at = utc(c.at);
      this.rules.checkTransition('pending', 'scheduled', 'dispatched');
      const upd = this.db.prepare(`UPDATE job_tasks SET state = 'scheduled', reason = 'dispatched', message = ?, relay = ?, updated_at = ?
        WHERE job_id = ? AND node_id = ? AND state = 'pending'`);
      const claimed: string[] = [];
      for (const n of nodeIds) {
        if (upd.run(c.message, c.relay, at, jobId, n).changes === 0) continue;
        this.record(jobId, n, at, 'pending', 'scheduled', 'dispatched', c.message);
        claimed.push(n);
      }
      return claimed;
    });
  }

  async pendingWork(limit: number, kind: JobKind = 'remote-run', host = 'server'): Promise<PendingWork[]> {
    return this.db.read('pending tasks', () => {
      const byHost = kind === 'bootstrap' ? ` AND ${bootstrapHostCondition('?')}` : '';
      const args = kind === 'bootstrap' ? [host, limit] : [limit];
      const rows = this.db.prepare(`SELECT t.job_id, t.node_id FROM job_tasks t JOIN jobs j ON j.id = t.job_id
        WHERE t.state = 'pending' AND j.state = 'running' AND ${kindCondition(kind)}${byHost} ORDER BY j.created_at, t.job_id, t.node_id LIMIT ?`).all(...args) as Array<{ job_id: string; node_id: string }>;
      const byJob = new Map<string, string[]>();
      for (const r of rows) byJob.set(r.job_id, [...(byJob.get(r.job_id) ?? []), r.node_id]);
      return [...byJob].map(([id, nodes]) => ({ job: this.job(id)!, nodes }));
    });
  }

  async setTaskStep(jobId: string, nodeId: string, step: string, message: string, at: string): Promise<boolean> {
    return this.db.write('task step', () => this.db.prepare(`UPDATE job_tasks SET step = ?, message = ?, updated_at = ?
      WHERE job_id = ? AND node_id = ? AND state = 'in_progress'`).run(step, message, utc(at), jobId, nodeId).changes > 0);
  }

  /** Abort these (non-final) tasks with one reason. */
  private abortTasks(tasks: Array<{ job_id: string; node_id: string; state: TaskState }>, reason: 'cancelled' | 'timeout', at: string, message: string): void {
    const upd = this.db.prepare("UPDATE job_tasks SET state = 'aborted', reason = ?, message = ?, updated_at = ? WHERE job_id = ? AND node_id = ?");
    for (const task of tasks) {
      this.rules.checkTransition(task.state, 'aborted', reason);
      upd.run(reason, message, at, task.job_id, task.node_id);
      this.record(task.job_id, task.node_id, at, task.state, 'aborted', reason, message);
    }
  }

  async cancelJob(id: string, at: string): Promise<JobRecord | null> {
    return this.db.write('cancel job', () => {
      const job = this.job(id);
      if (!job) return null;
      if (job.state !== 'running') return job;
      const when = utc(at);
      const tasks = this.db.prepare(`SELECT job_id, node_id, state FROM job_tasks WHERE job_id = ? AND state IN (${this.nonFinalSql})`).all(id) as Array<{ job_id: string; node_id: string; state: TaskState }>;
      this.abortTasks(tasks, 'cancelled', when, 'the job was cancelled');
      this.db.prepare("UPDATE jobs SET state = 'cancelled', finished_at = ? WHERE id = ?").run(when, id);
      return this.job(id);
    });
  }

  async expireTasks(now: string, limit: number): Promise<number> {
    return this.db.write('expire tasks', () => {
      const when = utc(now);
      const tasks = this.db.prepare(`SELECT t.job_id, t.node_id, t.state FROM job_tasks t JOIN jobs j ON j.id = t.job_id
        WHERE j.state = 'running' AND j.deadline_at <= ? AND t.state IN (${this.nonFinalSql}) LIMIT ?`).all(when, limit) as Array<{ job_id: string; node_id: string; state: TaskState }>;
      this.abortTasks(tasks, 'timeout', when, 'the job timed out before the task ended');
      for (const j of new Set(tasks.map((t) => t.job_id))) this.maybeFinish(j, when);
      return tasks.length;
    });
  }

  async deleteJobsBefore(before: string, limit: number): Promise<number> {
    return this.db.write('delete old jobs', () =>
      this.db.prepare("DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state <> 'running' AND finished_at < ? LIMIT ?)").run(utc(before), limit).changes);
  }
}
