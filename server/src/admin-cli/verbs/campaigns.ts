/**
 * `capstan campaigns …`: patch campaigns — upgrades on a selection, in maintenance windows, in
 * waves (docs/campaigns.md).
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { EXIT, renderList, renderObject, type Column } from '../output.js';
import { collect, enc, int, type Verbs } from '../kit.js';

const CAMPAIGN_COLUMNS: Column[] = [
  ['id', (c) => c.id], ['name', (c) => c.name], ['state', (c) => c.state],
  ['done', (c) => c.nodes.filter((n: { state: string }) => n.state === 'done').length],
  ['failed', (c) => c.nodes.filter((n: { state: string }) => n.state === 'failed').length],
  ['nodes', (c) => c.nodes.length], ['next_at', (c) => c.next_at], ['created_at', (c) => c.created_at],
];
const NODE_COLUMNS: Column[] = [
  ['node_id', (n) => n.node_id], ['wave', (n) => n.wave + 1], ['window', (n) => n.window ?? ''], ['state', (n) => n.state], ['attempts', (n) => n.attempts], ['reason', (n) => n.reason],
  ['exit_code', (n) => n.exit_code], ['upgraded', (n) => n.upgraded.map((u: { name: string; from: string | null; to: string }) => `${u.name} ${u.from ?? '-'}→${u.to}`).join(', ')],
  ['reboot', (n) => (n.reboot_required ? 'required' : '')],
];

/** "sat,sun 02:00 3h Europe/Paris" → the API's window object. */
export function windowOption(v: string): Record<string, unknown> {
  const m = /^([a-z,]+)\s+(\d\d:\d\d)\s+(\S+)(?:\s+(\S+))?$/.exec(v.trim());
  if (!m) throw new InvalidArgumentError('--window is "DAYS HH:MM DURATION [TZ]", like "sat,sun 02:00 3h Europe/Paris"');
  return { days: m[1]!.split(','), start: m[2], duration: m[3], ...(m[4] && { tz: m[4] }) };
}

/** "web-eu=sat 02:00 2h Europe/Paris" → one of the API's `windows` (a group's window). */
export function groupWindowOption(v: string, previous: Array<Record<string, unknown>> = []): Array<Record<string, unknown>> {
  const i = v.indexOf('=');
  if (i <= 0) throw new InvalidArgumentError('--group-window is "GROUP=DAYS HH:MM DURATION [TZ]", like "web-eu=sat 02:00 2h Europe/Paris"');
  return [...previous, { group: v.slice(0, i).trim(), ...windowOption(v.slice(i + 1)) }];
}

export function campaignVerbs(program: Command, { act, list, show, io }: Verbs): void {
  const campaigns = program.command('campaigns').description('patch campaigns: upgrades in waves and maintenance windows');
  campaigns.command('create').description('create a campaign (POST /api/1/campaigns)')
    .requiredOption('--name <name>')
    .option('--node <id>', 'a target node (repeatable)', collect)
    .option('-q, --query <expression>', 'target the nodes a filter expression selects (docs/filters.md)')
    .option('--package <name[>=version]>', 'a package to upgrade (repeatable)', collect)
    .addOption(new Option('--upgrade <what>', 'instead of packages').choices(['security', 'all']))
    .option('--vulnerability <id>', 'upgrade what fixes this vulnerability')
    .option('--window <spec>', 'DAYS HH:MM DURATION [TZ], e.g. "sat,sun 02:00 3h Europe/Paris" (with --group-window: for nodes in none of those groups)', windowOption)
    .option('--group-window <group=spec>', 'a group\'s window, e.g. "web-eu=sat 02:00 2h Europe/Paris" (repeatable; a node takes the first one of its groups, in the order given)', groupWindowOption)
    .option('--canary <n|N%>', 'the first wave: a node count or a percentage')
    .option('--failure-threshold <N%>', 'stop when a wave\'s failures pass it (default 0%: any)')
    .option('--max-attempts <n>', 'per node', int('--max-attempts'))
    .option('--pre <command>', 'run before the upgrade (repeatable)', collect).option('--post <command>', 'run after it (repeatable)', collect)
    .addOption(new Option('--reboot <when>').choices(['never', 'if-needed']))
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as Record<string, any>;
      const canary = o.canary === undefined ? undefined : /^\d+$/.test(o.canary) ? Number(o.canary) : o.canary;
      const body = {
        name: o.name, ...(o.node && { nodes: o.node }), ...(o.query && { q: o.query }), ...(o.package && { packages: o.package }),
        ...(o.upgrade && { upgrade: o.upgrade }), ...(o.vulnerability && { vulnerability: o.vulnerability }), ...(o.window && { window: o.window }), ...(o.groupWindow && { windows: o.groupWindow }),
        ...(canary !== undefined && { canary }), ...(o.failureThreshold && { failure_threshold: o.failureThreshold }), ...(o.maxAttempts && { max_attempts: o.maxAttempts }),
        ...(o.pre && { pre: o.pre }), ...(o.post && { post: o.post }), ...(o.reboot && { reboot: o.reboot }),
      };
      show(fmt, (await api.call('POST', '/api/1/campaigns', { body })).body);
    }));
  campaigns.command('list').addOption(new Option('--state <state>').choices(['scheduled', 'running', 'waiting_window', 'stopped', 'cancelled', 'finished']))
    .option('--limit <n>', 'at most', int('--limit'), 50)
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as { state?: string; limit: number };
      list(fmt, CAMPAIGN_COLUMNS, await api.all('/api/1/campaigns', { state: o.state }, o.limit));
    }));
  campaigns.command('show <id>').description('a campaign, then one line per node').action(act(async (api, fmt, _c, id: string) => {
    const ans = (await api.get(`/api/1/campaigns/${enc(id)}`)).body;
    if (fmt === 'json') return void show(fmt, ans);
    const { nodes, waves, spec, ...c } = ans.data;
    const windows = (spec.windows ?? []).map((w: { group: string }) => w.group).join(', ');
    if (fmt === 'table') io.out(`${renderObject(fmt, { ...c, upgrade: spec.upgrade.mode, ...(windows && { group_windows: windows }), waves: waves.map((w: { state: string; nodes: string[] }) => `${w.state}(${w.nodes.length})`).join(' → ') })}\n`);
    io.out(renderList(fmt, NODE_COLUMNS, nodes));
  }));
  campaigns.command('report <id>').description('per node: packages from→to, exit codes, output').action(act(async (api, fmt, _c, id: string) => {
    const ans = (await api.get(`/api/1/campaigns/${enc(id)}/report`)).body;
    if (fmt !== 'table') return void show(fmt, ans);
    const r = ans.data;
    io.out(`${r.name} (${r.id}): ${r.state}${r.message ? ` — ${r.message}` : ''}\n${renderObject(fmt, r.summary)}\n`);
    for (const n of r.nodes) {
      io.out(`== ${n.node_id} (${n.state}${n.exit_code === null ? '' : `, exit ${n.exit_code}`}${n.reboot_required ? ', reboot required' : ''})\n`);
      for (const u of n.upgraded) io.out(`  ${u.name} ${u.from ?? '(new)'} → ${u.to}\n`);
    }
    return r.summary.failed > 0 ? EXIT.CHANGES : EXIT.OK;
  }));
  campaigns.command('cancel <id>').action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.call('POST', `/api/1/campaigns/${enc(id)}/cancel`)).body)));
}
