/**
 * `capstan nodes …`, what an admin decides about nodes: list (filters, sort, every page up to
 * --limit), pending, show, accept, refuse, set-state, set-relay, tags, groups, add, delete. What
 * the registry holds of each node (history, runs, inventory, properties, compliance, policy, host
 * key, identity) is in node-records.ts.
 */
import { Argument, Command, Option } from 'commander';
import type { QueryParams } from '../transport.js';
import type { Column } from '../output.js';
import { collect, enc, filterParams, int, keyValue, nodeFilters, readCliFile, type Verbs } from '../kit.js';
import { nodeRecordVerbs } from './node-records.js';

export const NODE_COLUMNS: Column[] = [
  ['id', (n) => n.id], ['name', (n) => n.name], ['status', (n) => n.status], ['state', (n) => n.state],
  ['accepted', (n) => n.accepted], ['manager', (n) => n.manager], ['last_run_at', (n) => n.last_run_at],
];
const PENDING_COLUMNS: Column[] = [
  ['id', (n) => n.id], ['hostname', (n) => n.hostname], ['fingerprint', (n) => n.certificate_fingerprint], ['conflict', (n) => n.conflict_fingerprint],
];

export function nodeVerbs(program: Command, verbs: Verbs): void {
  const { act, list, show, io } = verbs;
  const nodes = program.command('nodes').description('nodes: list, show, accept, refuse, state, tags, inventory, properties, compliance, policy…');
  const listNodes = (pendingOnly: boolean) => act(async (api, fmt, cmd) => {
    const o = cmd.opts() as { filter?: string[]; exclude?: string[]; query?: string; sort?: string; order?: string; limit: number; pending?: boolean };
    const pending = pendingOnly || o.pending === true;
    const query: QueryParams = { filter: filterParams(o.filter, o.exclude, o.query), sort: o.sort, order: o.order };
    const ans = await api.all(pending ? '/api/1/nodes/pending' : '/api/1/nodes', query, o.limit);
    list(fmt, pending ? PENDING_COLUMNS : NODE_COLUMNS, ans);
  });
  nodeFilters(nodes.command('list').description('list nodes (GET /api/1/nodes)'))
    .option('--pending', 'only nodes waiting for acceptance, with their certificates (as nodes pending)')
    .option('--sort <field>', 'name, hostname, id, status, state, accepted, manager, region, last_run_at, …')
    .addOption(new Option('--order <order>').choices(['asc', 'desc']))
    .option('--limit <n>', 'at most this many nodes', int('--limit'), 1000)
    .action(listNodes(false));
  nodeFilters(nodes.command('pending').description('nodes waiting for acceptance (GET /api/1/nodes/pending)'))
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
  nodes.command('set-relay').description('register an accepted node (with its certificate) as a relay, or no longer')
    .argument('<id>').addArgument(new Argument('<on|off>').choices(['on', 'off']))
    .action(act(async (api, fmt, _c, id: string, value: string) => show(fmt, (await api.call('PATCH', `/api/1/nodes/${enc(id)}`, { body: { relay: value === 'on' } })).body)));
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
  nodes.command('add').description('add a node by address, or register a relay (POST /api/1/nodes)')
    .requiredOption('--host <address>', 'its address').option('--name <name>').option('--id <id>')
    .option('--tag <key=value>', 'a tag (repeatable)', collect).option('--group <id>', 'a registry group (repeatable)', collect)
    .option('--certificate <file>', 'its PEM certificate (UID=<id>), pinned at once')
    .option('--relay', 'a relay (needs --id and --certificate: capstan-relayd --identity prints both)')
    .option('--policy-server <id>', 'the relay it is under (a sub-relay\'s upstream relay; default: the server)')
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as { host: string; name?: string; id?: string; tag?: string[]; group?: string[]; certificate?: string; relay?: boolean; policyServer?: string };
      const certificate = o.certificate === undefined ? undefined : await readCliFile(o.certificate, '--certificate');
      const body = {
        host: o.host, name: o.name, id: o.id, ...(o.tag && { tags: Object.fromEntries(o.tag.map(keyValue)) }), ...(o.group && { groups: o.group }),
        certificate, ...(o.relay && { relay: true }), policy_server: o.policyServer,
      };
      show(fmt, (await api.call('POST', '/api/1/nodes', { body })).body);
    }));
  nodes.command('delete <id>').description('remove a node and revoke its certificate')
    .action(act(async (api, _f, _c, id: string) => {
      await api.call('DELETE', `/api/1/nodes/${enc(id)}`);
      io.out(`deleted node ${id}\n`);
    }));
  nodeRecordVerbs(nodes, verbs);
}
