/**
 * `capstan nodes …`: list (filters, sort, every page up to --limit), pending, show, accept, refuse,
 * set-state, tags, groups, add, delete, history, runs.
 */
import { Command, Option } from 'commander';
import type { QueryParams } from '../client.js';
import type { Column } from '../output.js';
import { collect, enc, filterParams, int, keyValue, nodeFilters, type Verbs } from '../kit.js';

const NODE_COLUMNS: Column[] = [
  ['id', (n) => n.id], ['name', (n) => n.name], ['status', (n) => n.status], ['state', (n) => n.state],
  ['accepted', (n) => n.accepted], ['manager', (n) => n.manager], ['last_run_at', (n) => n.last_run_at],
];
const PENDING_COLUMNS: Column[] = [
  ['id', (n) => n.id], ['hostname', (n) => n.hostname], ['fingerprint', (n) => n.certificate_fingerprint], ['conflict', (n) => n.conflict_fingerprint],
];
/** Counts by state, the non-zero ones: `success 3 error 1`. */
export function nodeVerbs(program: Command, { act, list, show, io }: Verbs): void {
  const nodes = program.command('nodes').description('nodes: list, show, accept, refuse, state, tags…');
  const listNodes = (pending: boolean) => act(async (api, fmt, cmd) => {
    const o = cmd.opts() as { filter?: string[]; exclude?: string[]; query?: string; sort?: string; order?: string; limit: number };
    const query: QueryParams = { filter: filterParams(o.filter, o.exclude, o.query), sort: o.sort, order: o.order };
    const ans = await api.all(pending ? '/api/1/nodes/pending' : '/api/1/nodes', query, o.limit);
    list(fmt, pending ? PENDING_COLUMNS : NODE_COLUMNS, ans);
  });
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
}
