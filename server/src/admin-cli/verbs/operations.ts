/**
 * `capstan jobs …` (with `watch`: a live bar on a terminal, a line per change otherwise),
 * `managers …` and `keys …`.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import type { ApiClient } from '../client.js';
import { EXIT, progressBar, renderList, renderObject, type Column, type Format } from '../output.js';
import { bodyFromFile, collect, enc, filterParams, int, type Verbs } from '../kit.js';

const JOB_COLUMNS: Column[] = [
  ['id', (j) => j.id], ['name', (j) => j.name], ['type', (j) => j.type], ['state', (j) => j.state],
  ['progress', (j) => `${(j.progress.done ?? 0) + (j.progress.failed ?? 0) + (j.progress.aborted ?? 0)}/${j.progress.total}`],
  ['failed', (j) => j.progress.failed], ['created_at', (j) => j.created_at],
];
const TASK_COLUMNS: Column[] = [
  ['node_id', (t) => t.node_id], ['state', (t) => t.state], ['reason', (t) => t.reason], ['exit_code', (t) => t.exit_code], ['message', (t) => t.message],
];

export function operationVerbs(program: Command, { act, list, show, io }: Verbs): void {
  const jobs = program.command('jobs').description('runs on many nodes: start, list, show, watch, output, cancel');
  const watchJob = async (api: ApiClient, id: string, fmt: Format, intervalMs: number): Promise<number> => {
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

  // ---- managers
  const managers = program.command('managers').description('cloud discovery: list, show, create, update, delete, test, poll');
  const MANAGER_COLUMNS: Column[] = [['id', (m) => m.id], ['name', (m) => m.name], ['type', (m) => m.type], ['provider', (m) => m.provider], ['last_poll_at', (m) => m.last_poll_at], ['last_poll_error', (m) => m.last_poll_error]];
  managers.command('list').action(act(async (api, fmt) => list(fmt, MANAGER_COLUMNS, (await api.get('/api/1/managers')).body)));
  managers.command('show <id>').action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.get(`/api/1/managers/${enc(id)}`)).body)));
  managers.command('create <file>').description('from a TOML or JSON file').action(act(async (api, fmt, _c, file: string) => show(fmt, (await api.call('POST', '/api/1/managers', { body: await bodyFromFile(file) })).body)));
  managers.command('update <id> <file>').action(act(async (api, fmt, _c, id: string, file: string) => show(fmt, (await api.call('PUT', `/api/1/managers/${enc(id)}`, { body: await bodyFromFile(file) })).body)));
  managers.command('delete <id>').option('--nodes <choice>', 'keep, delete or state:<state>: what becomes of the nodes it alone holds')
    .action(act(async (api, fmt, cmd, id: string) => show(fmt, (await api.call('DELETE', `/api/1/managers/${enc(id)}`, { query: { nodes: (cmd.opts() as { nodes?: string }).nodes } })).body)));
  managers.command('test <id>').action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.call('POST', `/api/1/managers/${enc(id)}/test`)).body)));
  managers.command('poll <id>').action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.call('POST', `/api/1/managers/${enc(id)}/poll`)).body)));

  // ---- keys
  const keys = program.command('keys').description('identity keys: list, rotate, delete, renew; the policy key');
  keys.command('list').action(act(async (api, fmt) => list(fmt,
    [['kid', (k) => k.kid], ['alg', (k) => k.alg], ['active', (k) => k.active], ['created_at', (k) => k.created_at], ['retired_at', (k) => k.retired_at], ['nodes', (k) => k.nodes]],
    (await api.get('/api/1/keys')).body)));
  keys.command('rotate').description('a new active identity key').action(act(async (api, fmt) => show(fmt, (await api.call('POST', '/api/1/keys/rotate')).body)));
  keys.command('delete <kid>').option('--force', 'even while it signs unexpired tokens (those nodes renew)')
    .action(act(async (api, fmt, cmd, kid: string) => show(fmt, (await api.call('DELETE', `/api/1/keys/${enc(kid)}`, { query: { force: (cmd.opts() as { force?: boolean }).force ? 'true' : undefined } })).body)));
  keys.command('renew [node]').description('force a node, or every node of a registry group, to renew its identity token')
    .option('--group <group>', 'every node of this registry group')
    .action(act(async (api, fmt, cmd, node?: string) => {
      const group = (cmd.opts() as { group?: string }).group;
      if (!node === !group) throw new InvalidArgumentError('name one node, or --group <group>');
      show(fmt, (await api.call('POST', group ? `/api/1/groups/${enc(group)}/identity/renew` : `/api/1/nodes/${enc(node!)}/identity/renew`)).body);
    }));
  keys.command('policy').description('the policy signing key agents pin').action(act(async (api, fmt) => show(fmt, (await api.get('/api/1/keys/policy')).body)));
  keys.command('policy-rotate').description('a new policy key, endorsed by the previous one').action(act(async (api, fmt) => show(fmt, (await api.call('POST', '/api/1/keys/policy/rotate')).body)));
}
