/**
 * `capstan-server jobs …`: create a bootstrap job and follow its tasks. The job is written to the
 * store; the running server takes its pending tasks at its next jobs sweep.
 */
import type { Command } from 'commander';
import { capstanError } from '@capstan/shared/errors';
import { createJob, parseJobRequest } from '../jobs/create.js';
import { table } from '../table.js';
import { collect, configFrom, filterArg, out, verb, withStore, type CommonFlags } from './common.js';

export function jobsCommand(program: Command): void {
  const jobs = program.command('jobs').description('jobs and their per-node tasks (the admin API\'s /api/1/jobs)');

  verb(jobs, 'bootstrap', 'install the agent over SSH on nodes with an address and no agent (POST /api/1/jobs {type: "bootstrap"})')
    .option('--name <name>', 'job name', 'bootstrap')
    .option('-n, --node <id>', 'node id, repeatable', collect)
    .option('-f, --filter <key=value>', 'node filter, repeatable (group=web, tag:env=prod, managed_by=aws-prod)', collect)
    .option('--credential <id>', 'use this credential for every node (default: chosen by selectors)')
    .option('--relay-url <url>', 'the URL the agent reports to (default: [bootstrap] relay_url)')
    .option('--timeout <duration>', 'the job\'s timeout (default: [jobs] default_timeout)')
    .action(async (flags: CommonFlags & { name: string; node?: string[]; filter?: string[]; credential?: string; relayUrl?: string; timeout?: string }) => {
      const config = configFrom(flags);
      const limits = {
        defaultTimeoutMs: config.jobs.default_timeout, maxTargets: config.jobs.max_targets,
        bootstrapEnabled: config.bootstrap.enabled, bootstrapRelayUrl: config.bootstrap.relay_url,
      };
      await withStore(flags, async (store) => {
        const req = parseJobRequest({
          name: flags.name, type: 'bootstrap', nodes: flags.node ?? [], filters: (flags.filter ?? []).map((f) => filterArg(f, false)),
          ...(flags.credential !== undefined && { credential: flags.credential }), ...(flags.relayUrl !== undefined && { relay_url: flags.relayUrl }),
          ...(flags.timeout !== undefined && { timeout: flags.timeout }),
        }, limits);
        // The running server takes the pending tasks at its next jobs sweep.
        const job = await createJob(store, req, limits, new Date());
        out(flags, { data: job }, () => `${job.id} created (${job.progress.total} nodes, ${job.progress.failed} failed at once)\n`);
      });
    });

  verb(jobs, 'show <id>', 'a job and the progress of each node (GET /api/1/jobs/<id>)').action(async (id: string, flags: CommonFlags) => {
    await withStore(flags, async (store) => {
      const job = await store.jobs.getJob(id);
      if (!job) throw capstanError('ERR_JOB_UNKNOWN', `job ${id} is unknown`);
      const tasks = await store.jobs.listTasks(id);
      out(flags, { data: { ...job, tasks } }, () =>
        `${job.name} (${job.type}) ${job.state}\n${table([['node', (x) => x.node_id], ['state', (x) => x.state], ['step', (x) => x.step], ['reason', (x) => x.reason], ['message', (x) => x.message]], tasks)}`);
    });
  });
}
