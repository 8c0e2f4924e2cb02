/**
 * `capstan compliance …`, `node-compliance` and `changes …`: what the nodes report. The per-node
 * views are shared with `nodes compliance [<id>]` (node-records.ts).
 */
import { Command, Option } from 'commander';
import { parseDuration } from '@capstan/shared/config';
import type { ApiTransport, QueryParams } from '../transport.js';
import type { Column, Format } from '../output.js';
import { collect, enc, filterParams, int, nodeFilters, type Verbs } from '../kit.js';

const nonZero = (counts: Record<string, number> | undefined) => Object.entries(counts ?? {}).filter(([, n]) => n).map(([k, n]) => `${k} ${n}`).join(' ');
const percentCols: Column[] = [['compliance', (r) => r.compliance], ['items', (r) => r.total], ['counts', (r) => nonZero(r.counts)]];

type FleetView = 'rules' | 'directives' | 'groups' | 'nodes';
const BY_COLUMNS: Record<FleetView, Column[]> = {
  rules: [['rule_id', (r) => r.rule_id], ['nodes', (r) => r.nodes], ...percentCols],
  directives: [['rule_id', (r) => r.rule_id], ['directive_id', (r) => r.directive_id], ['nodes', (r) => r.nodes], ...percentCols],
  groups: [['group_id', (r) => r.group_id], ['name', (r) => r.name], ['nodes', (r) => r.nodes], ...percentCols],
  nodes: [['node_id', (r) => r.node_id], ['hostname', (r) => r.hostname], ['class', (r) => r.class], ['status', (r) => r.status], ...percentCols],
};

type FilterOptions = { filter?: string[]; exclude?: string[]; query?: string };

/** Compliance per rule, directive, group or node; CSV as the server exports it (every state's column). */
export async function fleetCompliance(api: ApiTransport, fmt: Format, by: FleetView, o: FilterOptions, { io, list }: Verbs): Promise<void> {
  const query: QueryParams = by === 'nodes' ? { filter: filterParams(o.filter, o.exclude, o.query) } : {};
  if (fmt === 'csv') return void io.out((await api.call('GET', `/api/1/compliance/${by}`, { query: { ...query, format: 'csv' }, accept: 'text/csv' })).text);
  list(fmt, BY_COLUMNS[by], (await api.get(`/api/1/compliance/${by}`, query)).body);
}

/** One node's compliance per rule and directive. */
export async function nodeCompliance(api: ApiTransport, fmt: Format, id: string, { list }: Verbs): Promise<void> {
  const ans = (await api.get(`/api/1/nodes/${enc(id)}/compliance`)).body;
  list(fmt, [['rule_id', (r) => r.rule_id], ['directive_id', (r) => r.directive_id], ...percentCols], { ...ans, data: fmt === 'json' ? ans.data : ans.data.directives });
}

export function complianceVerbs(program: Command, verbs: Verbs): void {
  const { act, list } = verbs;
  const compliance = program.command('compliance').description('compliance: summary, rules, directives, groups, nodes');
  nodeFilters(compliance.command('summary').description('summed over the nodes the filters select'))
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as FilterOptions;
      const ans = (await api.get('/api/1/compliance', { filter: filterParams(o.filter, o.exclude, o.query) })).body;
      const d = ans.data;
      const rows = [{ class: 'managed', ...d }, { class: 'relays', ...d.relays }, { class: 'agentless', ...d.agentless }];
      list(fmt, [['class', (r) => r.class], ['nodes', (r) => r.nodes], ...percentCols], { ...ans, data: fmt === 'json' ? ans.data : rows });
    }));
  for (const by of ['rules', 'directives', 'groups', 'nodes'] as const) {
    const c = compliance.command(by).description(`compliance per ${by.slice(0, -1)}`);
    if (by === 'nodes') nodeFilters(c);
    c.action(act(async (api, fmt, cmd) => fleetCompliance(api, fmt, by, cmd.opts() as FilterOptions, verbs)));
  }
  program.command('node-compliance <id>').description('one node\'s compliance per rule and directive (as nodes compliance <id>)')
    .action(act(async (api, fmt, _c, id: string) => nodeCompliance(api, fmt, id, verbs)));
}

/** "1d", "12h", "30m" before now, or a time as given (the server checks it). */
export function timeArg(v: string): string {
  const ms = parseDuration(v);
  return ms === null ? v : new Date(Date.now() - ms).toISOString();
}

/** A change with its diff, as a block of text. */
const changeBlock = (c: Record<string, any>) => `${c.at} ${c.node_id} ${c.label} ${c.event_type}\n`
  + `  rule ${c.rule_id} directive ${c.directive_id} component ${c.component} key ${c.key_value}\n  ${c.message}\n`
  + (c.diff === null || c.diff === undefined ? '' : `${String(c.diff).replace(/^/gm, '    ')}${String(c.diff).endsWith('\n') ? '' : '\n'}`);

export function changeVerbs(program: Command, { act, list, io }: Verbs): void {
  const changes = program.command('changes').description('what the agents changed: list, histogram');
  const changeFilters = (c: Command) => c
    .option('--from <when>', 'since a duration ago (1d, 2h) or an RFC 3339 time, inclusive')
    .option('--to <when>', 'before a duration ago or an RFC 3339 time, exclusive')
    .option('--node <id>', 'repeatable', collect).option('--rule <id>', 'repeatable', collect)
    .option('--directive <id>', 'repeatable', collect).option('--group <id>', 'repeatable', collect)
    .addOption(new Option('--label <label>').choices(['intentional', 'corrective']));
  const changeQuery = (o: Record<string, any>): QueryParams => ({
    from: o.from && timeArg(o.from), to: o.to && timeArg(o.to), node: o.node, rule: o.rule, directive: o.directive, group: o.group, label: o.label,
  });
  changeFilters(changes.command('list').description('changes, newest first'))
    .option('--limit <n>', 'at most', int('--limit'), 100).option('--diff', 'with each change\'s diff')
    .option('--show', 'each change as a block of text with its diff, instead of a table')
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as Record<string, any>;
      const withDiff = o.diff || o.show;
      const ans = await api.all('/api/1/changes', { ...changeQuery(o), diff: withDiff ? 'true' : 'false' }, o.limit);
      if (o.show && fmt === 'table') return void io.out(`${ans.data.map(changeBlock).join('\n')}${ans.total} changes\n`);
      list(fmt, [['at', (c) => c.at], ['node_id', (c) => c.node_id], ['rule_id', (c) => c.rule_id], ['directive_id', (c) => c.directive_id],
        ['component', (c) => c.component], ['label', (c) => c.label], ['message', (c) => c.message], ...(withDiff ? [['diff', (c: any) => c.diff] as Column] : [])], ans);
    }));
  changeFilters(changes.command('histogram').description('changes per hour or day'))
    .addOption(new Option('--by <bucket>').choices(['hour', 'day']).default('day'))
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as Record<string, any>;
      list(fmt, [['at', (b) => b.at], ['intentional', (b) => b.intentional], ['corrective', (b) => b.corrective], ['total', (b) => b.total]],
        (await api.get('/api/1/changes/histogram', { ...changeQuery(o), by: o.by })).body);
    }));
}
