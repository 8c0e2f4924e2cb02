/**
 * The verbs of `capstan`, each one or a few admin API calls (docs/cli.md). The program is built
 * around an `io` (output, environment, exit) so that nothing below cli.ts touches the process.
 */
import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { parse as parseToml } from 'smol-toml';
import { CAPSTAN_VERSION, capstanError } from '@capstan/shared';
import { ApiClient, ApiFailure, type QueryParams } from './client.js';
import { bashCompletion, zshCompletion } from './completion.js';
import { errorLine, EXIT, EXIT_CODES_TEXT, exitCodeOf, progressBar, renderList, renderObject, type Column, type Format } from './output.js';
import { applyPlan, exportPolicy, planFor, planText } from './policy.js';
import { writePolicyDir } from './policy-files.js';

export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  env: Record<string, string | undefined>;
  /** Is stdout a terminal (live progress bars) ? */
  isTTY: boolean;
  exit(code: number): never;
  /** Wait between polls (`jobs watch`). */
  sleep(ms: number): Promise<void>;
}

interface Globals {
  url?: string;
  tokenFile?: string;
  caFile?: string;
  json?: boolean;
  csv?: boolean;
  timeout: number;
}

/** The server's default listener (`general.listen` in server.toml). */
export const DEFAULT_URL = 'http://127.0.0.1:3031';
/** Where the first start of a packaged server writes its admin token. */
export const SERVER_TOKEN_FILE = '/var/lib/capstan/server/admin.token';

/** The token: `--token-file`, else CAPSTAN_TOKEN, else ~/.config/capstan/token, else the server's admin.token. */
export async function resolveToken(g: { tokenFile?: string }, env: CliIo['env']): Promise<string | undefined> {
  const read = async (path: string) => (await readFile(path, 'utf8')).trim();
  if (g.tokenFile) {
    try {
      return await read(g.tokenFile);
    } catch (err) {
      throw capstanError('ERR_CLI_FILE', `cannot read the token file ${g.tokenFile}: ${(err as Error).message}`);
    }
  }
  if (env.CAPSTAN_TOKEN) return env.CAPSTAN_TOKEN.trim();
  const home = env.HOME ?? homedir();
  for (const path of [join(env.XDG_CONFIG_HOME ?? join(home, '.config'), 'capstan', 'token'), SERVER_TOKEN_FILE]) {
    try {
      return await read(path);
    } catch {
      // Absent or unreadable (the server's file is 0600): try the next one.
    }
  }
  return undefined;
}

const collect = (v: string, prev: string[] = []) => [...prev, v];
const int = (name: string) => (v: string) => {
  if (!/^\d{1,9}$/.test(v) || Number(v) < 1) throw new InvalidArgumentError(`${name} must be a positive integer`);
  return Number(v);
};
function keyValue(v: string): [string, string] {
  const i = v.indexOf('=');
  if (i <= 0) throw new InvalidArgumentError(`expected key=value, got ${JSON.stringify(v)}`);
  return [v.slice(0, i), v.slice(i + 1)];
}

/** `--filter key=value` (repeatable, values of one key ORed) and `--exclude key=value` → the API's `filter=<JSON>`. */
export function filterParams(include: string[] = [], exclude: string[] = []): string[] {
  const out: string[] = [];
  for (const [list, ex] of [[include, false], [exclude, true]] as const) {
    const byKey = new Map<string, string[]>();
    for (const f of list) {
      const [k, v] = keyValue(f);
      byKey.set(k, [...(byKey.get(k) ?? []), v]);
    }
    for (const [key, values] of byKey) out.push(JSON.stringify({ key, values, ...(ex && { exclude: true }) }));
  }
  return out;
}

/** A policy object or other request body from a TOML or JSON file. */
async function bodyFromFile(path: string): Promise<Record<string, unknown>> {
  let obj: unknown;
  try {
    const text = await readFile(path, 'utf8');
    obj = path.endsWith('.toml') ? parseToml(text) : JSON.parse(text);
  } catch (err) {
    throw capstanError('ERR_CLI_FILE', `${path}: ${(err as Error).message.split('\n')[0]}`);
  }
  if (!obj || typeof obj !== 'object' || Array.isArray(obj)) throw capstanError('ERR_CLI_FILE', `${path} must hold one object`);
  return obj as Record<string, unknown>;
}

const NODE_COLUMNS: Column[] = [
  ['id', (n) => n.id], ['name', (n) => n.name], ['status', (n) => n.status], ['state', (n) => n.state],
  ['accepted', (n) => n.accepted], ['manager', (n) => n.manager], ['last_run_at', (n) => n.last_run_at],
];
const PENDING_COLUMNS: Column[] = [
  ['id', (n) => n.id], ['hostname', (n) => n.hostname], ['fingerprint', (n) => n.certificate_fingerprint], ['conflict', (n) => n.conflict_fingerprint],
];
/** Counts by state, the non-zero ones: `success 3 error 1`. */
const nonZero = (counts: Record<string, number> | undefined) => Object.entries(counts ?? {}).filter(([, n]) => n).map(([k, n]) => `${k} ${n}`).join(' ');
const percentCols: Column[] = [['compliance', (r) => r.compliance], ['items', (r) => r.total], ['counts', (r) => nonZero(r.counts)]];
const POLICY_COLUMNS: Record<string, Column[]> = {
  directives: [['id', (d) => d.id], ['name', (d) => d.name], ['method', (d) => d.method], ['mode', (d) => d.mode], ['condition', (d) => d.condition]],
  groups: [['id', (g) => g.id], ['name', (g) => g.name], ['nodes', (g) => g.nodes?.length], ['filter', (g) => g.filter]],
  rules: [['id', (r) => r.id], ['name', (r) => r.name], ['directives', (r) => r.directives.join(',')], ['groups', (r) => r.groups.join(',')]],
};
const JOB_COLUMNS: Column[] = [
  ['id', (j) => j.id], ['name', (j) => j.name], ['type', (j) => j.type], ['state', (j) => j.state],
  ['progress', (j) => `${(j.progress.done ?? 0) + (j.progress.failed ?? 0) + (j.progress.aborted ?? 0)}/${j.progress.total}`],
  ['failed', (j) => j.progress.failed], ['created_at', (j) => j.created_at],
];
const TASK_COLUMNS: Column[] = [
  ['node_id', (t) => t.node_id], ['state', (t) => t.state], ['reason', (t) => t.reason], ['exit_code', (t) => t.exit_code], ['message', (t) => t.message],
];
const AUDIT_COLUMNS: Column[] = [
  ['at', (a) => a.at], ['admin', (a) => a.admin], ['role', (a) => a.role], ['action', (a) => a.action], ['target', (a) => a.target],
  ['status', (a) => a.status], ['code', (a) => a.code], ['address', (a) => a.address],
];
const ADMIN_COLUMNS: Column[] = [['name', (a) => a.name], ['role', (a) => a.role], ['created_at', (a) => a.created_at], ['expires_at', (a) => a.expires_at]];

export function buildProgram(io: CliIo): Command {
  const program = new Command('capstan')
    .description('Capstan\'s remote admin CLI: the admin API over HTTP(S), from any machine')
    .version(CAPSTAN_VERSION)
    .option('--url <url>', `the server's API (env CAPSTAN_URL, default ${DEFAULT_URL})`)
    .option('--token-file <file>', `the admin token (default: env CAPSTAN_TOKEN, ~/.config/capstan/token, ${SERVER_TOKEN_FILE})`)
    .option('--ca-file <file>', 'PEM of the CA that signed the server\'s certificate (a private CA)')
    .addOption(new Option('--json', 'print the API\'s JSON').conflicts('csv'))
    .option('--csv', 'print CSV (RFC 4180)')
    .option('--timeout <seconds>', 'give up on a call after this long', int('--timeout'), 30)
    .addHelpText('after', `\n${EXIT_CODES_TEXT}.`)
    .showHelpAfterError();
  program.exitOverride((err) => io.exit(err.exitCode === 0 ? EXIT.OK : EXIT.USAGE));
  program.configureOutput({ writeOut: io.out, writeErr: io.err, outputError: (text, write) => write(`capstan: ${text}`) });

  /** The global options wherever they were given (`capstan --json nodes list`, `capstan nodes list --json`). */
  const globals = (cmd: Command): Globals => cmd.optsWithGlobals() as Globals;
  const formatOf = (cmd: Command): Format => (globals(cmd).json ? 'json' : globals(cmd).csv ? 'csv' : 'table');

  /** Run a verb with a client; failures print one coded line and exit with their code. */
  const act = <A extends unknown[]>(fn: (api: ApiClient, fmt: Format, cmd: Command, ...args: A) => Promise<number | void>) =>
    async (...args: unknown[]) => {
      const cmd = args[args.length - 1] as Command;
      const g = globals(cmd);
      let api: ApiClient | undefined;
      let code: number = EXIT.OK;
      try {
        const ca = g.caFile ? await readFile(g.caFile, 'utf8').catch((err: Error) => {
          throw capstanError('ERR_CLI_FILE', `cannot read the CA file ${g.caFile}: ${err.message}`);
        }) : undefined;
        api = new ApiClient({
          url: g.url ?? io.env.CAPSTAN_URL ?? DEFAULT_URL,
          token: await resolveToken(g, io.env),
          ...(ca !== undefined && { ca }),
          timeoutMs: g.timeout * 1000,
        });
        code = (await fn(api, formatOf(cmd), cmd, ...(args.slice(0, -2) as A))) ?? EXIT.OK;
      } catch (err) {
        io.err(errorLine(err));
        // A bad key=value met while building the request is a usage error, as commander's own.
        code = err instanceof InvalidArgumentError ? EXIT.USAGE : exitCodeOf(err);
      } finally {
        await api?.close();
      }
      io.exit(code);
    };
  const list = (fmt: Format, columns: Column[], answer: { data: unknown[] }) => io.out(renderList(fmt, columns, answer.data, answer));
  const show = (fmt: Format, answer: { data: Record<string, unknown> }) => io.out(renderObject(fmt, answer.data, answer));
  const enc = encodeURIComponent;

  // ---- nodes
  const nodes = program.command('nodes').description('nodes: list, show, accept, refuse, state, tags…');
  const listNodes = (pending: boolean) => act(async (api, fmt, cmd) => {
    const o = cmd.opts() as { filter?: string[]; exclude?: string[]; sort?: string; order?: string; limit: number };
    const query: QueryParams = { filter: filterParams(o.filter, o.exclude), sort: o.sort, order: o.order };
    const ans = await api.all(pending ? '/api/1/nodes/pending' : '/api/1/nodes', query, o.limit);
    list(fmt, pending ? PENDING_COLUMNS : NODE_COLUMNS, ans);
  });
  const nodeFilters = (c: Command) => c
    .option('--filter <key=value>', 'include nodes matching (repeatable; name, hostname, region, tag:<k>, state, status, manager, group, …)', collect)
    .option('--exclude <key=value>', 'exclude nodes matching (repeatable)', collect);
  nodeFilters(nodes.command('list').description('list nodes (GET /api/1/nodes)'))
    .option('--sort <field>', 'name, hostname, id, status, state, accepted, manager, region, last_run_at, …')
    .addOption(new Option('--order <order>').choices(['asc', 'desc']))
    .option('--limit <n>', 'at most this many nodes', int('--limit'), 1000)
    .action(listNodes(false));
  nodeFilters(nodes.command('pending').description('nodes waiting for acceptance'))
    .option('--limit <n>', 'at most this many nodes', int('--limit'), 1000)
    .action(listNodes(true));
  nodes.command('show <id>').description('one node').action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.get(`/api/1/nodes/${enc(id)}`)).body)));
  nodes.command('accept <id>').description('accept a pending or refused node')
    .option('--fingerprint <sha256>', 'the certificate to pin, when the node sent two')
    .action(act(async (api, fmt, cmd, id: string) => {
      const fp = (cmd.opts() as { fingerprint?: string }).fingerprint;
      show(fmt, (await api.call('POST', `/api/1/nodes/${enc(id)}/accept`, fp ? { body: { fingerprint: fp } } : {})).body);
    }));
  nodes.command('refuse <id>').description('refuse a node').action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.call('POST', `/api/1/nodes/${enc(id)}/refuse`)).body)));
  nodes.command('set-state <id> <state>').description('running, stopped, terminated (final), missing, unknown, retired, decommissioned')
    .action(act(async (api, fmt, _c, id: string, state: string) => show(fmt, (await api.call('PATCH', `/api/1/nodes/${enc(id)}`, { body: { state } })).body)));
  nodes.command('tags <id> [key=value...]').description('show a node\'s tags, or set some (others kept)')
    .option('--remove <key>', 'remove a tag (repeatable)', collect)
    .action(act(async (api, fmt, cmd, id: string, pairs: string[]) => {
      const remove = (cmd.opts() as { remove?: string[] }).remove ?? [];
      const node = (await api.get(`/api/1/nodes/${enc(id)}`)).body.data;
      let tags: Record<string, string> = { ...(node.tags ?? {}) };
      if (pairs.length || remove.length) {
        for (const p of pairs) {
          const [k, v] = keyValue(p);
          tags[k] = v;
        }
        for (const k of remove) delete tags[k];
        tags = (await api.call('PATCH', `/api/1/nodes/${enc(id)}`, { body: { tags } })).body.data.tags ?? tags;
      }
      const rows = Object.entries(tags).map(([key, value]) => ({ key, value }));
      list(fmt, [['key', (r) => r.key], ['value', (r) => r.value]], { data: rows });
    }));
  nodes.command('groups <id> [group...]').description('show a node\'s registry groups, or replace them')
    .action(act(async (api, fmt, _c, id: string, groups: string[]) => {
      let node = (await api.get(`/api/1/nodes/${enc(id)}`)).body.data;
      if (groups.length) node = (await api.call('PATCH', `/api/1/nodes/${enc(id)}`, { body: { groups } })).body.data;
      list(fmt, [['group', (r) => r]], { data: node.groups ?? [] });
    }));
  nodes.command('add').description('add a node by address (POST /api/1/nodes)')
    .requiredOption('--host <address>', 'its address').option('--name <name>').option('--id <id>')
    .option('--tag <key=value>', 'a tag (repeatable)', collect).option('--group <id>', 'a registry group (repeatable)', collect)
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as { host: string; name?: string; id?: string; tag?: string[]; group?: string[] };
      const body = { host: o.host, name: o.name, id: o.id, ...(o.tag && { tags: Object.fromEntries(o.tag.map(keyValue)) }), ...(o.group && { groups: o.group }) };
      show(fmt, (await api.call('POST', '/api/1/nodes', { body })).body);
    }));
  nodes.command('delete <id>').description('remove a node and revoke its certificate')
    .action(act(async (api, _f, _c, id: string) => {
      await api.call('DELETE', `/api/1/nodes/${enc(id)}`);
      io.out(`deleted node ${id}\n`);
    }));
  nodes.command('history <id>').description('transitions of acceptance, state and status')
    .action(act(async (api, fmt, _c, id: string) => list(fmt, [['at', (h) => h.at], ['field', (h) => h.field], ['from', (h) => h.from], ['to', (h) => h.to], ['cause', (h) => h.cause]],
      (await api.get(`/api/1/nodes/${enc(id)}/history`, { per_page: 1000 })).body)));
  nodes.command('runs <id>').description('a node\'s runs, newest first').option('--limit <n>', 'at most', int('--limit'), 20)
    .action(act(async (api, fmt, cmd, id: string) => list(fmt,
      [['started_at', (r) => r.started_at], ['config_id', (r) => r.config_id], ['complete', (r) => r.complete], ['reports', (r) => r.report_count], ['counts', (r) => r.counts]],
      (await api.get(`/api/1/nodes/${enc(id)}/runs`, { per_page: (cmd.opts() as { limit: number }).limit })).body)));

  // ---- compliance
  const compliance = program.command('compliance').description('compliance: summary, rules, directives, groups, nodes');
  nodeFilters(compliance.command('summary').description('summed over the nodes the filters select'))
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as { filter?: string[]; exclude?: string[] };
      const ans = (await api.get('/api/1/compliance', { filter: filterParams(o.filter, o.exclude) })).body;
      const d = ans.data;
      const rows = [{ class: 'managed', ...d }, { class: 'relays', ...d.relays }, { class: 'agentless', ...d.agentless }];
      list(fmt, [['class', (r) => r.class], ['nodes', (r) => r.nodes], ...percentCols], { ...ans, data: fmt === 'json' ? ans.data : rows });
    }));
  const byColumns: Record<string, Column[]> = {
    rules: [['rule_id', (r) => r.rule_id], ['nodes', (r) => r.nodes], ...percentCols],
    directives: [['rule_id', (r) => r.rule_id], ['directive_id', (r) => r.directive_id], ['nodes', (r) => r.nodes], ...percentCols],
    groups: [['group_id', (r) => r.group_id], ['name', (r) => r.name], ['nodes', (r) => r.nodes], ...percentCols],
    nodes: [['node_id', (r) => r.node_id], ['hostname', (r) => r.hostname], ['class', (r) => r.class], ['status', (r) => r.status], ...percentCols],
  };
  for (const by of ['rules', 'directives', 'groups', 'nodes'] as const) {
    const c = compliance.command(by).description(`compliance per ${by.slice(0, -1)}`);
    if (by === 'nodes') nodeFilters(c);
    c.action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as { filter?: string[]; exclude?: string[] };
      const query: QueryParams = by === 'nodes' ? { filter: filterParams(o.filter, o.exclude) } : {};
      // CSV as the server exports it: every state's column.
      if (fmt === 'csv') return void io.out((await api.call('GET', `/api/1/compliance/${by}`, { query: { ...query, format: 'csv' }, accept: 'text/csv' })).text);
      list(fmt, byColumns[by]!, (await api.get(`/api/1/compliance/${by}`, query)).body);
    }));
  }
  program.command('node-compliance <id>').description('one node\'s compliance per rule and directive')
    .action(act(async (api, fmt, _c, id: string) => {
      const ans = (await api.get(`/api/1/nodes/${enc(id)}/compliance`)).body;
      list(fmt, [['rule_id', (r) => r.rule_id], ['directive_id', (r) => r.directive_id], ...percentCols], { ...ans, data: fmt === 'json' ? ans.data : ans.data.directives });
    }));

  // ---- changes
  const changes = program.command('changes').description('what the agents changed: list, histogram');
  const changeFilters = (c: Command) => c
    .option('--from <time>', 'RFC 3339, inclusive').option('--to <time>', 'RFC 3339, exclusive')
    .option('--node <id>', 'repeatable', collect).option('--rule <id>', 'repeatable', collect)
    .option('--directive <id>', 'repeatable', collect).option('--group <id>', 'repeatable', collect)
    .addOption(new Option('--label <label>').choices(['intentional', 'corrective']));
  const changeQuery = (o: Record<string, any>): QueryParams => ({ from: o.from, to: o.to, node: o.node, rule: o.rule, directive: o.directive, group: o.group, label: o.label });
  changeFilters(changes.command('list').description('changes, newest first'))
    .option('--limit <n>', 'at most', int('--limit'), 100).option('--diff', 'with each change\'s diff')
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as Record<string, any>;
      const ans = await api.all('/api/1/changes', { ...changeQuery(o), diff: o.diff ? 'true' : 'false' }, o.limit);
      list(fmt, [['at', (c) => c.at], ['node_id', (c) => c.node_id], ['rule_id', (c) => c.rule_id], ['directive_id', (c) => c.directive_id],
        ['component', (c) => c.component], ['label', (c) => c.label], ['message', (c) => c.message], ...(o.diff ? [['diff', (c: any) => c.diff] as Column] : [])], ans);
    }));
  changeFilters(changes.command('histogram').description('changes per hour or day'))
    .addOption(new Option('--by <bucket>').choices(['hour', 'day']).default('day'))
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as Record<string, any>;
      list(fmt, [['at', (b) => b.at], ['intentional', (b) => b.intentional], ['corrective', (b) => b.corrective], ['total', (b) => b.total]],
        (await api.get('/api/1/changes/histogram', { ...changeQuery(o), by: o.by })).body);
    }));

  // ---- rules, directives, groups
  for (const kind of ['rules', 'directives', 'groups'] as const) {
    const c = program.command(kind).description(`${kind}: list, show, create, update, delete`);
    c.command('list').action(act(async (api, fmt) => list(fmt, POLICY_COLUMNS[kind]!, (await api.get(`/api/1/${kind}`)).body)));
    c.command('show <id>').action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.get(`/api/1/${kind}/${enc(id)}`)).body)));
    c.command('create <file>').description('create from a TOML or JSON file (the policy-as-code format)')
      .action(act(async (api, fmt, _c, file: string) => show(fmt, (await api.call('POST', `/api/1/${kind}`, { body: await bodyFromFile(file) })).body)));
    c.command('update <id> <file>').description('replace (or create) from a TOML or JSON file')
      .action(act(async (api, fmt, _c, id: string, file: string) => show(fmt, (await api.call('PUT', `/api/1/${kind}/${enc(id)}`, { body: await bodyFromFile(file) })).body)));
    c.command('delete <id>').action(act(async (api, _f, _c, id: string) => {
      await api.call('DELETE', `/api/1/${kind}/${enc(id)}`);
      io.out(`deleted ${kind.slice(0, -1)} ${id}\n`);
    }));
  }

  // ---- jobs
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
    .option('--filter <key=value>', 'target nodes matching (repeatable)', collect).option('--exclude <key=value>', 'repeatable', collect)
    .option('--keep-output', 'keep each node\'s output').option('--job-timeout <duration>', 'e.g. 30m')
    .option('--relay-url <url>', 'bootstrap: the relay the agents will use').option('--credential <id>', 'bootstrap: the SSH credential')
    .option('--watch', 'then watch it until it ends')
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as Record<string, any>;
      const filters = filterParams(o.filter, o.exclude).map((f) => JSON.parse(f));
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

  // ---- admins, audit
  const admins = program.command('admins').description('named admins: list, create, delete, token; whoami');
  admins.command('list').action(act(async (api, fmt) => list(fmt, ADMIN_COLUMNS, (await api.get('/api/1/admins')).body)));
  admins.command('create <name>').description('a new admin; its token is shown once')
    .addOption(new Option('--role <role>').choices(['admin', 'operator', 'viewer']).makeOptionMandatory())
    .option('--expires <when>', 'when its token stops working, as the server takes it (e.g. 90d)')
    .action(act(async (api, fmt, cmd, name: string) => {
      const o = cmd.opts() as { role: string; expires?: string };
      show(fmt, (await api.call('POST', '/api/1/admins', { body: { name, role: o.role, ...(o.expires && { expires: o.expires }) } })).body);
    }));
  admins.command('delete <name>').description('remove an admin; its token stops working').action(act(async (api, _f, _c, name: string) => {
    await api.call('DELETE', `/api/1/admins/${enc(name)}`);
    io.out(`deleted admin ${name}\n`);
  }));
  admins.command('token <name>').description('a new token for an admin (the old one stops working); shown once')
    .action(act(async (api, fmt, _c, name: string) => show(fmt, (await api.call('POST', `/api/1/admins/${enc(name)}/token`)).body)));
  program.command('whoami').description('the admin the token belongs to').action(act(async (api, fmt) => show(fmt, (await api.get('/api/1/whoami')).body)));
  program.command('audit').description('the audit log: every write through the API')
    .option('--from <time>').option('--to <time>').option('--admin <name>').option('--action <action>').option('--target <target>')
    .addOption(new Option('--result <result>').choices(['ok', 'error']))
    .option('--limit <n>', 'at most', int('--limit'), 100)
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as Record<string, any>;
      list(fmt, AUDIT_COLUMNS, await api.all('/api/1/audit', { from: o.from, to: o.to, admin: o.admin, action: o.action, target: o.target, result: o.result }, o.limit));
    }));

  // ---- policy as code
  const policy = program.command('policy').description('policy as code: export, diff, apply a directory of TOML/JSON files');
  policy.command('export').description('write the server\'s directives, groups and rules, one file each')
    .requiredOption('-d, --dir <dir>', 'the directory').addOption(new Option('--format <format>').choices(['toml', 'json']).default('toml'))
    .option('--force', 'replace the policy files already there')
    .action(act(async (api, _f, cmd) => {
      const o = cmd.opts() as { dir: string; format: 'toml' | 'json'; force?: boolean };
      const n = await writePolicyDir(o.dir, await exportPolicy(api), o.format, o.force === true);
      io.out(`wrote ${n} files to ${o.dir}\n`);
    }));
  const planOptions = (c: Command) => c.requiredOption('-f, --dir <dir>', 'the policy directory')
    .option('--prune', 'also delete what the files do not name')
    .option('--max-nodes <n>', 'list at most this many nodes (the server says 1000)', int('--max-nodes'));
  planOptions(policy.command('diff').description('what apply would change, and which nodes would get which new or changed directives'))
    .option('--detailed-exitcode', 'exit 7 when there are changes, 0 when none')
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as { dir: string; prune?: boolean; maxNodes?: number; detailedExitcode?: boolean };
      const plan = await planFor(api, o.dir, o.prune === true, o.maxNodes);
      if (fmt === 'json') io.out(`${JSON.stringify({ data: plan }, null, 2)}\n`);
      else if (fmt === 'csv') {
        io.out(renderList('csv', [['node_id', (r) => r.node_id], ['hostname', (r) => r.hostname], ['change', (r) => r.change], ['rule_id', (r) => r.rule_id], ['directive_id', (r) => r.directive_id]],
          plan.nodes.flatMap((n) => (['added', 'changed', 'removed'] as const).flatMap((change) => n[change].map((r) => ({ ...n, change, ...r }))))));
      } else io.out(planText(plan));
      return o.detailedExitcode && plan.changes.length ? EXIT.CHANGES : EXIT.OK;
    }));
  planOptions(policy.command('apply').description('make the server match the directory (idempotent)'))
    .option('--dry-run', 'print the plan and change nothing')
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as { dir: string; prune?: boolean; maxNodes?: number; dryRun?: boolean };
      const plan = await planFor(api, o.dir, o.prune === true, o.maxNodes);
      if (fmt !== 'json') io.out(planText(plan));
      if (o.dryRun || plan.changes.length === 0) {
        if (fmt === 'json') io.out(`${JSON.stringify({ data: { ...plan, applied: [] } }, null, 2)}\n`);
        return;
      }
      const applied: string[] = [];
      await applyPlan(api, plan, (c) => {
        applied.push(`${c.action} ${c.kind} ${c.id}`);
        if (fmt !== 'json') io.out(`applied: ${c.action} ${c.kind} ${c.id}\n`);
      });
      if (fmt === 'json') io.out(`${JSON.stringify({ data: { ...plan, applied } }, null, 2)}\n`);
      else io.out(`applied ${applied.length} changes; ${plan.nodes_total} nodes get a new policy\n`);
    }));

  // ---- completion
  program.command('completion <shell>').description('print a completion script: bash or zsh')
    .action((shell: string) => {
      if (shell === 'bash') io.out(bashCompletion(program));
      else if (shell === 'zsh') io.out(zshCompletion(program));
      else {
        io.err('capstan: completion: the shell must be bash or zsh\n');
        io.exit(EXIT.USAGE);
      }
      io.exit(EXIT.OK);
    });
  return program;
}

export { ApiFailure };
