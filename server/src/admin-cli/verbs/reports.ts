/**
 * `capstan compliance …`, `node-compliance` and `changes …`: what the nodes report.
 */
import { Command, Option } from 'commander';
import type { QueryParams } from '../client.js';
import type { Column } from '../output.js';
import { collect, enc, filterParams, int, nodeFilters, type Verbs } from '../kit.js';

const nonZero = (counts: Record<string, number> | undefined) => Object.entries(counts ?? {}).filter(([, n]) => n).map(([k, n]) => `${k} ${n}`).join(' ');
const percentCols: Column[] = [['compliance', (r) => r.compliance], ['items', (r) => r.total], ['counts', (r) => nonZero(r.counts)]];

export function reportVerbs(program: Command, { act, list, io }: Verbs): void {
  const compliance = program.command('compliance').description('compliance: summary, rules, directives, groups, nodes');
  nodeFilters(compliance.command('summary').description('summed over the nodes the filters select'))
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as { filter?: string[]; exclude?: string[]; query?: string };
      const ans = (await api.get('/api/1/compliance', { filter: filterParams(o.filter, o.exclude, o.query) })).body;
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
      const o = cmd.opts() as { filter?: string[]; exclude?: string[]; query?: string };
      const query: QueryParams = by === 'nodes' ? { filter: filterParams(o.filter, o.exclude, o.query) } : {};
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
}
