/**
 * `capstan software` and `capstan lifecycle`: views over the whole fleet, the installed software
 * and the registry's counts with what the lifecycle sweep did.
 */
import type { Command } from 'commander';
import { int, type Verbs } from '../kit.js';

export function softwareVerbs(program: Command, { act, list }: Verbs): void {
  program.command('software [glob]').description('every installed version of the packages matching a glob (* and ?), with how many nodes have it')
    .option('--limit <n>', 'at most this many versions', int('--limit'), 1000)
    .action(act(async (api, fmt, cmd, glob?: string) => list(fmt, [['name', (s) => s.name], ['version', (s) => s.version], ['nodes', (s) => s.nodes]],
      await api.all('/api/1/software', { name: glob }, (cmd.opts() as { limit: number }).limit))));
}

interface LifecycleView {
  nodes: Record<'by_status' | 'by_state' | 'by_acceptance', Record<string, number>>;
  purged_nodes: number;
  deleted_runs: number;
}

export function lifecycleVerbs(program: Command, { act, list }: Verbs): void {
  program.command('lifecycle').description('nodes by status, state and acceptance; nodes purged and runs deleted so far (GET /api/1/lifecycle)')
    .action(act(async (api, fmt) => {
      const ans = (await api.get('/api/1/lifecycle')).body;
      const d = ans.data as LifecycleView;
      const rows = [
        ...Object.entries(d.nodes.by_status).map(([value, count]) => ({ field: 'status', value, count })),
        ...Object.entries(d.nodes.by_state).map(([value, count]) => ({ field: 'state', value, count })),
        ...Object.entries(d.nodes.by_acceptance).map(([value, count]) => ({ field: 'accepted', value, count })),
        { field: 'purged', value: 'nodes', count: d.purged_nodes },
        { field: 'deleted', value: 'runs', count: d.deleted_runs },
      ];
      list(fmt, [['field', (r) => r.field], ['value', (r) => r.value], ['count', (r) => r.count]], { ...ans, data: fmt === 'json' ? ans.data : rows });
    }));
}
