/**
 * `capstan jobs …`: runs, inventories and bootstraps on many nodes; `watch` draws a live bar on a
 * terminal and prints a line per change otherwise.
 */
import { Command, Option } from 'commander';
import type { ApiTransport } from '../transport.js';
import { EXIT, progressBar, renderList, renderObject, type Column, type Format } from '../output.js';
import { collect, enc, filterParams, int, type Verbs } from '../kit.js';

const JOB_COLUMNS: Column[] = [
  ['id', (j) => j.id], ['name', (j) => j.name], ['type', (j) => j.type], ['state', (j) => j.state],
  ['progress', (j) => `${(j.progress.done ?? 0) + (j.progress.failed ?? 0) + (j.progress.aborted ?? 0)}/${j.progress.total}`],
  ['failed', (j) => j.progress.failed], ['created_at', (j) => j.created_at],
];
const TASK_COLUMNS: Column[] = [
  ['node_id', (t) => t.node_id], ['state', (t) => t.state], ['step', (t) => t.step], ['reason', (t) => t.reason], ['exit_code', (t) => t.exit_code], ['message', (t) => t.message],
];

export function jobVerbs(program: Command, { act, list, show, io }: Verbs): void {
  const jobs = program.command('jobs').description('runs on many nodes: start, list, show, watch, output, cancel');
  const watchJob = async (api: ApiTransport, id: string, fmt: Format, intervalMs: number): Promise<number> => {
    let last = '';
    for (;;) {
      const job = (await api.get(`/api/1/jobs/${enc(id)}`)).body.data;
      const bar = `${job.id} ${job.state} ${progressBar(job.progress)}`;
      if (fmt === 'json') {
        if (bar !== last) io.out(`${JSON.stringify({ id: job.id, state: job.state, progress: job.progress })}\n`);
      } else if (io.isTTY) io.out(`\r\u001b[2K${bar}`);
      else if (bar !== last) io.out(`${bar}\n`);
      last = bar;
      if (job.state !== 'running') {
        if (io.isTTY && fmt !== 'json') io.out('\n');
        return job.progress.failed || job.progress.aborted ? EXIT.CHANGES : EXIT.OK;
      }
      await io.sleep(intervalMs);
    }
  };
  jobs.command('start').description('start a job (POST /api/1/jobs)')
    .requiredOption('--name <name>').addOption(new Option('--type <type>').choices(['run', 'inventory', 'bootstrap']).default('run'))
    .option('--node <id>', 'a target node (repeatable)', collect)
    .option('-q, --query <expression>', 'target the nodes a filter expression selects (docs/filters.md)')
    .option('--filter <key=value>', 'target nodes matching (repeatable)', collect).option('--exclude <key=value>', 'repeatable', collect)
    .option('--keep-output', 'keep each node\'s output').option('--job-timeout <duration>', 'e.g. 30m')
    .option('--relay-url <url>', 'bootstrap: the relay the agents will use').option('--credential <id>', 'bootstrap: the SSH credential')
    .option('--watch', 'then watch it until it ends')
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as Record<string, any>;
      const filters = filterParams(o.filter, o.exclude, o.query).map((f) => JSON.parse(f));
      const body = {
        name: o.name, type: o.type, ...(o.node && { nodes: o.node }), ...(filters.length && { filters }), ...(o.keepOutput && { keep_output: true }),
        ...(o.jobTimeout && { timeout: o.jobTimeout }), ...(o.relayUrl && { relay_url: o.relayUrl }), ...(o.credential && { credential: o.credential }),
      };
      const ans = (await api.call('POST', '/api/1/jobs', { body })).body;
      if (!o.watch) return void show(fmt, ans);
      if (fmt !== 'json') io.out(`job ${ans.data.id} started\n`);
      return watchJob(api, ans.data.id, fmt, 1000);
    }));
  jobs.command('list').addOption(new Option('--state <state>').choices(['running', 'finished', 'cancelled']))
    .option('--limit <n>', 'at most', int('--limit'), 50)
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as { state?: string; limit: number };
      list(fmt, JOB_COLUMNS, await api.all('/api/1/jobs', { state: o.state }, o.limit));
    }));
  jobs.command('show <id>').description('a job and its tasks').action(act(async (api, fmt, _c, id: string) => {
    const ans = (await api.get(`/api/1/jobs/${enc(id)}`)).body;
    if (fmt === 'json') return void show(fmt, ans);
    const { tasks, ...job } = ans.data;
    if (fmt === 'table') io.out(`${renderObject(fmt, { ...job, progress: progressBar(job.progress) })}\n`);
    io.out(renderList(fmt, TASK_COLUMNS, tasks));
  }));
  jobs.command('watch <id>').description('follow a job until it ends: a live bar on a terminal, a line per change otherwise')
    .option('--interval <seconds>', 'between polls', int('--interval'), 1)
    .action(act(async (api, fmt, cmd, id: string) => watchJob(api, id, fmt, (cmd.opts() as { interval: number }).interval * 1000)));
  jobs.command('output <id> [node]').description('the output of a job\'s tasks (kept with --keep-output)')
    .action(act(async (api, fmt, _c, id: string, node?: string) => {
      const tasks = node ? [(await api.get(`/api/1/jobs/${enc(id)}/tasks/${enc(node)}`)).body.data] : (await api.get(`/api/1/jobs/${enc(id)}`)).body.data.tasks;
      if (fmt !== 'table') return void io.out(renderList(fmt, [['node_id', (t) => t.node_id], ['state', (t) => t.state], ['exit_code', (t) => t.exit_code], ['output', (t) => t.output]], tasks));
      for (const t of tasks) io.out(`== ${t.node_id} (${t.state}${t.exit_code === null ? '' : `, exit ${t.exit_code}`})\n${t.output ?? '(no output kept)'}${String(t.output ?? '').endsWith('\n') ? '' : '\n'}`);
    }));
  jobs.command('cancel <id>').action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.call('POST', `/api/1/jobs/${enc(id)}/cancel`)).body)));
}
