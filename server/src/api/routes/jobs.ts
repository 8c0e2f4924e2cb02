/**
 * Admin API: jobs under /api/1/jobs (see docs/jobs.md).
 *   POST /api/1/jobs                        create (targets resolved at once) → 201 {data: job}
 *   GET  /api/1/jobs[?state=&page=&per_page=] newest first, with progress counts
 *   GET  /api/1/jobs/<id>                   the job, its progress and every task (state, reason, output)
 *   GET  /api/1/jobs/<id>/tasks/<node>      one task and its transitions
 *   POST /api/1/jobs/<id>/cancel            abort the tasks not final yet
 */
import type { FastifyInstance } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import { readJson } from '@capstan/toolkit/http/app';
import { parseJobRequest } from '../../jobs/create.js';
import type { JobService } from '../../jobs/service.js';
import type { JobState, Reads } from '../../reads.js';
import { actorOf } from '../actor.js';
import { paging, single, type Query } from '../params.js';

export interface JobRouteDeps {
  store: Reads;
  /** The door for jobs (jobs/service.ts): creating and cancelling them. */
  service: JobService;
  /** The output of tasks running in this process, as it arrives (jobs/runner.ts liveOutput). */
  liveOutput?: (jobId: string, nodeId: string) => string[] | null;
}

const JOB_STATES: readonly JobState[] = ['running', 'finished', 'cancelled'];

export function jobRoutes(app: FastifyInstance, deps: JobRouteDeps): void {
  const { store } = deps;
  const mustGet = async (id: string) => {
    const job = await store.jobs.getJob(id);
    if (!job) throw capstanError('ERR_JOB_UNKNOWN', `job ${id} is unknown`);
    return job;
  };

  app.post('/api/1/jobs', async (req, reply) => {
    const request = parseJobRequest(await readJson(req), deps.service.limits);
    return reply.code(201).send({ data: await deps.service.create(request, actorOf(req)) });
  });

  app.get<{ Querystring: Query }>('/api/1/jobs', async (req) => {
    const q = req.query;
    for (const k of Object.keys(q)) if (!['state', 'page', 'per_page'].includes(k)) throw capstanError('ERR_BAD_REQUEST', `unknown parameter ${k}`);
    const state = single(q, 'state');
    if (state !== undefined && !JOB_STATES.includes(state as JobState)) throw capstanError('ERR_BAD_REQUEST', `state must be one of ${JOB_STATES.join(', ')}`);
    const { page, per_page } = paging(q, 50);
    const list = await store.jobs.listJobs(page, per_page, state as JobState | undefined);
    return { ...list, page, per_page };
  });

  app.get<{ Params: { id: string } }>('/api/1/jobs/:id', async (req) => {
    const job = await mustGet(req.params.id);
    return { data: { ...job, tasks: await store.jobs.listTasks(job.id) } };
  });

  app.get<{ Params: { id: string; node: string } }>('/api/1/jobs/:id/tasks/:node', async (req) => {
    const job = await mustGet(req.params.id);
    const task = await store.jobs.getTask(job.id, req.params.node);
    if (!task) throw capstanError('ERR_NOT_FOUND', `job ${job.id} has no task for node ${req.params.node}`);
    return { data: { ...task, transitions: await store.jobs.taskHistory(job.id, task.node_id) } };
  });

  // A task's output from line `after` on: while it runs here, the lines arrived so far (the
  // console asks every second: the run's output as it comes); once final, the stored output.
  app.get<{ Params: { id: string; node: string }; Querystring: Query }>('/api/1/jobs/:id/tasks/:node/output', async (req) => {
    const job = await mustGet(req.params.id);
    const task = await store.jobs.getTask(job.id, req.params.node);
    if (!task) throw capstanError('ERR_NOT_FOUND', `job ${job.id} has no task for node ${req.params.node}`);
    const after = single(req.query, 'after') === undefined ? 0 : Number(single(req.query, 'after'));
    if (!Number.isSafeInteger(after) || after < 0) throw capstanError('ERR_BAD_REQUEST', 'after must be a line number from 0');
    const final = ['done', 'failed', 'aborted'].includes(task.state);
    const lines = final ? (task.output === null ? [] : task.output.split('\n')) : (deps.liveOutput?.(job.id, task.node_id) ?? []);
    return { data: { state: task.state, final, lines: lines.slice(after), next: Math.max(after, lines.length) } };
  });

  app.post<{ Params: { id: string } }>('/api/1/jobs/:id/cancel', async (req) => {
    return { data: await deps.service.cancel(req.params.id, actorOf(req)) };
  });
}
