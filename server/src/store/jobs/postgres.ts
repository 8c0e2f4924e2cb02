/**
 * Jobs on PostgreSQL (see types.ts). A transition locks its task row (`FOR UPDATE`) before
 * checking the state machine, so two server processes (a relay event on one, a cancel or the
 * timeout sweep on another) serialise on the task and the loser sees the winner's state. The
 * timeout sweep takes its batch with `SKIP LOCKED`, like the lifecycle sweep.
 */
import type pg from 'pg';
import type { TaskRules } from '../rules.js';
import type {
  JobInsert, JobKind, JobRecord, JobState, JobStore, PendingWork, TaskRecord, TaskState, TaskTransition, TransitionInput,
} from './types.js';
import {
  JOB_COLUMNS, jobFromRow, bootstrapHostCondition, kindCondition, progressFrom, specJson, TASK_COLUMNS, taskFromRow, transitionFromRow, utc,
  type Row,
} from './rows.js';
import type { Page } from '../store.js';
import type { PostgresDb, Queryable as Q } from '../postgres/db.js';

export class PostgresJobStore implements JobStore {
  /** The states a task is still moving in, as an SQL list (the rules say which). */
  private readonly nonFinalSql: string;

  constructor(private readonly db: PostgresDb, private readonly rules: TaskRules, private readonly finished?: (c: pg.PoolClient, job: JobRecord, at: string) => Promise<void>) {
    this.nonFinalSql = rules.nonFinal.map((s) => `'${s}'`).join(', ');
  }

  /** One statement on `c`; its errors are coded by the read or transaction around it. */
  private async q<R extends pg.QueryResultRow = Row>(c: Q, text: string, values: unknown[] = []): Promise<pg.QueryResult<R>> {
    return c.query<R>(text, values);
  }

  private async job(c: Q, id: string): Promise<JobRecord | null> {
    const r = await this.q(c, `SELECT ${JOB_COLUMNS} FROM jobs WHERE id = $1`, [id]);
    if (r.rowCount === 0) return null;
    const counts = await this.q<{ state: string; n: string }>(c, 'SELECT state, count(*) AS n FROM job_tasks WHERE job_id = $1 GROUP BY state', [id]);
    return jobFromRow(r.rows[0]!, progressFrom(counts.rows));
  }

  private async record(c: Q, jobId: string, nodeId: string, at: string, from: TaskState | null, to: TaskState, reason: string, message: string | null): Promise<void> {
    await this.q(c, 'INSERT INTO job_task_transitions (job_id, node_id, at, from_state, to_state, reason, message) VALUES ($1, $2, $3, $4, $5, $6, $7)',
      [jobId, nodeId, at, from, to, reason, message]);
  }

  private async maybeFinish(c: Q, jobId: string, at: string): Promise<void> {
    const r = await this.q(c, `UPDATE jobs SET state = 'finished', finished_at = $2 WHERE id = $1 AND state = 'running'
      AND NOT EXISTS (SELECT 1 FROM job_tasks WHERE job_id = $1 AND state IN (${this.nonFinalSql}))`, [jobId, at]);
    if ((r.rowCount ?? 0) > 0 && this.finished) {
      const job = await this.job(c, jobId);
      if (job) await this.finished(c as pg.PoolClient, job, at);
    }
  }

  async createJob(job: JobInsert, nodeIds: string[], failed?: ReadonlyMap<string, { reason: string; message: string }>): Promise<JobRecord> {
    const fails = [...new Set(nodeIds)].flatMap((n) => {
      const why = failed?.get(n);
      return why ? [{ n, ...why }] : [];
    });
    for (const f of fails) this.rules.checkTransition('pending', 'failed', f.reason);
    return this.db.tx('create job', async (c) => {
      const at = utc(job.created_at);
      await this.q(c, `INSERT INTO jobs (${JOB_COLUMNS}) VALUES ($1, $2, $3, 'running', $4, $5, $6, $7, $8, $9, NULL)`, [
        job.id, job.name, job.type, specJson(job), JSON.stringify(job.conditions), job.keep_output, job.timeout_ms, at, utc(job.deadline_at),
      ]);
      const nodes = [...new Set(nodeIds)];
      if (nodes.length > 0) {
        await this.q(c, `INSERT INTO job_tasks (job_id, node_id, state, reason, updated_at)
          SELECT $1, n, 'pending', 'created', $3 FROM unnest($2::text[]) AS n`, [job.id, nodes, at]);
        await this.q(c, `INSERT INTO job_task_transitions (job_id, node_id, at, from_state, to_state, reason)
          SELECT $1, n, $3, NULL, 'pending', 'created' FROM unnest($2::text[]) WITH ORDINALITY AS u(n, i) ORDER BY i`, [job.id, nodes, at]);
      }
      if (fails.length > 0) {
        const args = [job.id, fails.map((f) => f.n), fails.map((f) => f.reason), fails.map((f) => f.message), at];
        await this.q(c, `UPDATE job_tasks t SET state = 'failed', reason = u.reason, message = u.message
          FROM unnest($2::text[], $3::text[], $4::text[]) AS u(n, reason, message) WHERE t.job_id = $1 AND t.node_id = u.n`, args.slice(0, 4));
        await this.q(c, `INSERT INTO job_task_transitions (job_id, node_id, at, from_state, to_state, reason, message)
          SELECT $1, n, $5, 'pending', 'failed', reason, message FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS u(n, reason, message, i) ORDER BY i`, args);
      }
      await this.maybeFinish(c, job.id, at);
      return (await this.job(c, job.id))!;
    });
  }

  async getJob(id: string): Promise<JobRecord | null> {
    return this.db.read('get job', (c) => this.job(c, id));
  }

  async listJobs(page: number, perPage: number, state?: JobState): Promise<Page<JobRecord>> {
    return this.db.read('list jobs', async (c) => {
      const where = state ? 'WHERE state = $1' : '';
      const args: unknown[] = state ? [state] : [];
      const total = Number((await this.q<{ n: string }>(c, `SELECT count(*) AS n FROM jobs ${where}`, args)).rows[0]!.n);
      const ids = await this.q<{ id: string }>(c, `SELECT id FROM jobs ${where} ORDER BY created_at DESC, id DESC LIMIT $${args.length + 1} OFFSET $${args.length + 2}`,
        [...args, perPage, (page - 1) * perPage]);
      const data: JobRecord[] = [];
      for (const r of ids.rows) {
        const j = await this.job(c, r.id);
        if (j) data.push(j);
      }
      return { total, data };
    });
  }

  async listTasks(jobId: string): Promise<TaskRecord[]> {
    return this.db.read('list tasks', async (c) =>
      (await this.q(c, `SELECT ${TASK_COLUMNS} FROM job_tasks WHERE job_id = $1 ORDER BY node_id`, [jobId])).rows.map(taskFromRow));
  }

  async getTask(jobId: string, nodeId: string): Promise<TaskRecord | null> {
    return this.db.read('get task', async (c) => {
      const r = await this.q(c, `SELECT ${TASK_COLUMNS} FROM job_tasks WHERE job_id = $1 AND node_id = $2`, [jobId, nodeId]);
      return r.rows[0] ? taskFromRow(r.rows[0]) : null;
    });
  }

  async taskHistory(jobId: string, nodeId: string): Promise<TaskTransition[]> {
    return this.db.read('task history', async (c) =>
      (await this.q(c, 'SELECT at, from_state, to_state, reason, message FROM job_task_transitions WHERE job_id = $1 AND node_id = $2 ORDER BY id', [jobId, nodeId]))
        .rows.map(transitionFromRow));
  }

  async transition(jobId: string, nodeId: string, t: TransitionInput): Promise<TaskRecord | null> {
    return this.db.tx('task transition', async (c) => {
      const r = await this.q(c, `SELECT ${TASK_COLUMNS} FROM job_tasks WHERE job_id = $1 AND node_id = $2 FOR UPDATE`, [jobId, nodeId]);
      if (!r.rows[0]) return null;
      const cur = taskFromRow(r.rows[0]);
      if (t.expect && !t.expect.includes(cur.state)) return null;
      this.rules.checkTransition(cur.state, t.to, t.reason);
      const at = utc(t.at);
      const u = await this.q(c, `UPDATE job_tasks SET state = $3, reason = $4, message = $5, relay = coalesce($6, relay), exit_code = coalesce($7, exit_code),
        output = coalesce($8, output), updated_at = $9 WHERE job_id = $1 AND node_id = $2 RETURNING ${TASK_COLUMNS}`, [
        jobId, nodeId, t.to, t.reason, t.message ?? null, t.relay ?? null, t.exit_code ?? null, t.output ?? null, at,
      ]);
      await this.record(c, jobId, nodeId, at, cur.state, t.to, t.reason, t.message ?? null);
      if (this.rules.isFinal(t.to)) {
        // The job row is locked before counting, so two last tasks ending together finish it once.
        await this.q(c, 'SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE', [jobId]);
        await this.maybeFinish(c, jobId, at);
      }
      return taskFromRow(u.rows[0]!);
    });
  }

  async claimTasks(jobId: string, nodeIds: string[], c: { at: string; relay: string; message: string }): Promise<string[]> {
    if (nodeIds.length === 0) return [];
    this.rules.checkTransition('pending', 'scheduled', 'dispatched');
    return this.db.tx('claim tasks', async (q) => {
      const at = utc(c.at);
      // Only rows still pending are taken; another server claiming the same ones waits on the row
      // locks and then finds them scheduled (the WHERE is re-checked), so no task is sent twice.
      const r = await this.q<{ node_id: string }>(q, `UPDATE job_tasks SET state = 'scheduled', reason = 'dispatched', message = $3, relay = $4, updated_at = $5
        WHERE job_id = $1 AND node_id = ANY($2::text[]) AND state = 'pending' RETURNING node_id`,
        [jobId, nodeIds, c.message, c.relay, at]);
      const claimed = r.rows.map((x) => x.node_id).sort();
      if (claimed.length > 0) {
        await this.q(q, `INSERT INTO job_task_transitions (job_id, node_id, at, from_state, to_state, reason, message)
          SELECT $1, n, $3, 'pending', 'scheduled', 'dispatched', $4 FROM unnest($2::text[]) WITH ORDINALITY AS u(n, i) ORDER BY i`, [jobId, claimed, at, c.message]);
      }
      return claimed;
    });
  }

  async pendingWork(limit: number, kind: JobKind = 'remote-run', host = 'server'): Promise<PendingWork[]> {
    return this.db.read('pending tasks', async (c) => {
      const byHost = kind === 'bootstrap' ? ` AND ${bootstrapHostCondition('$2')}` : '';
      const rows = await this.q<{ job_id: string; node_id: string }>(c, `SELECT t.job_id, t.node_id FROM job_tasks t JOIN jobs j ON j.id = t.job_id
        WHERE t.state = 'pending' AND j.state = 'running' AND ${kindCondition(kind)}${byHost} ORDER BY j.created_at, t.job_id, t.node_id LIMIT $1`, kind === 'bootstrap' ? [limit, host] : [limit]);
      const byJob = new Map<string, string[]>();
      for (const r of rows.rows) byJob.set(r.job_id, [...(byJob.get(r.job_id) ?? []), r.node_id]);
      const out: PendingWork[] = [];
      for (const [id, nodes] of byJob) {
        const job = await this.job(c, id);
        if (job) out.push({ job, nodes });
      }
      return out;
    });
  }

  async setTaskStep(jobId: string, nodeId: string, step: string, message: string, at: string): Promise<boolean> {
    return this.db.read('task step', async (c) => (await this.q(c, `UPDATE job_tasks SET step = $3, message = $4, updated_at = $5
      WHERE job_id = $1 AND node_id = $2 AND state = 'in_progress'`, [jobId, nodeId, step, message, utc(at)])).rowCount! > 0);
  }

  private async abortTasks(c: Q, tasks: Array<{ job_id: string; node_id: string; state: TaskState }>, reason: 'cancelled' | 'timeout', at: string, message: string): Promise<void> {
    for (const task of tasks) {
      this.rules.checkTransition(task.state, 'aborted', reason);
      await this.q(c, "UPDATE job_tasks SET state = 'aborted', reason = $3, message = $4, updated_at = $5 WHERE job_id = $1 AND node_id = $2",
        [task.job_id, task.node_id, reason, message, at]);
      await this.record(c, task.job_id, task.node_id, at, task.state, 'aborted', reason, message);
    }
  }

  async cancelJob(id: string, at: string): Promise<JobRecord | null> {
    return this.db.tx('cancel job', async (c) => {
      // Tasks first, then the job: the order every transition locks in, so the two never deadlock.
      const tasks = await this.q<{ job_id: string; node_id: string; state: TaskState }>(c,
        `SELECT job_id, node_id, state FROM job_tasks WHERE job_id = $1 AND state IN (${this.nonFinalSql}) ORDER BY node_id FOR UPDATE`, [id]);
      const locked = await this.q<{ state: string }>(c, 'SELECT state FROM jobs WHERE id = $1 FOR UPDATE', [id]);
      if (!locked.rows[0]) return null;
      if (locked.rows[0].state !== 'running') return this.job(c, id);
      const when = utc(at);
      await this.abortTasks(c, tasks.rows, 'cancelled', when, 'the job was cancelled');
      await this.q(c, "UPDATE jobs SET state = 'cancelled', finished_at = $2 WHERE id = $1", [id, when]);
      return this.job(c, id);
    });
  }

  async expireTasks(now: string, limit: number): Promise<number> {
    return this.db.tx('expire tasks', async (c) => {
      const when = utc(now);
      const tasks = await this.q<{ job_id: string; node_id: string; state: TaskState }>(c, `SELECT t.job_id, t.node_id, t.state FROM job_tasks t
        WHERE t.state IN (${this.nonFinalSql}) AND t.job_id IN (SELECT id FROM jobs WHERE state = 'running' AND deadline_at <= $1)
        ORDER BY t.job_id, t.node_id LIMIT $2 FOR UPDATE SKIP LOCKED`, [when, limit]);
      await this.abortTasks(c, tasks.rows, 'timeout', when, 'the job timed out before the task ended');
      for (const j of new Set(tasks.rows.map((t) => t.job_id))) {
        await this.q(c, 'SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE', [j]);
        await this.maybeFinish(c, j, when);
      }
      return tasks.rows.length;
    });
  }

  async deleteJobsBefore(before: string, limit: number): Promise<number> {
    return this.db.read('delete old jobs', async (c) =>
      (await this.q(c, "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state <> 'running' AND finished_at < $1 LIMIT $2)", [utc(before), limit])).rowCount ?? 0);
  }
}
