/**
 * `capstan-server nodes …`: the admin API's node calls, on the store directly, so they work with
 * the server down too. Changes go through the node registry (withNodes), with the effects they
 * have through the API.
 */
import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { capstanError } from '@capstan/shared/errors';
import { listView } from '../api/node-view.js';
import { complianceClock, complianceSettings, complianceView, withPercent } from '../registry/compliance.js';
import type { NodeRecord, SortField } from '../reads.js';
import { table } from '../table.js';
import { CLI_ACTOR, collect, filterArg, int, mustNode, out, tagArgs, verb, withNodes, withStore, type CommonFlags } from './common.js';

/** The API's checks of a node's create and patch bodies, loaded by the verbs that change a node. */
const bodies = () => import('../api/routes/nodes.js');

const NODE_TABLE: Array<[string, (n: NodeRecord) => unknown]> = [
  ['id', (n) => n.id], ['name', (n) => n.name], ['accepted', (n) => n.accepted], ['status', (n) => n.status],
  ['state', (n) => n.state], ['manager', (n) => n.manager], ['region', (n) => n.region], ['last run', (n) => n.last_run_at],
];
/** Pending nodes: the certificate each would pin, and the other one sent for its id if any (choose with accept --fingerprint). */
const PENDING_TABLE: Array<[string, (n: NodeRecord) => unknown]> = [
  ['id', (n) => n.id], ['name', (n) => n.name], ['status', (n) => n.status], ['fingerprint', (n) => n.certificate_fingerprint],
  ['conflict', (n) => n.conflict_fingerprint],
];

export function nodesCommand(program: Command): Command {
  const nodes = program.command('nodes').description('look at and decide on nodes (the admin API\'s node calls)');
  nodeVerbs(nodes);
  recordVerbs(nodes);
  hostKeyVerbs(nodes);
  return nodes;
}

/** What an admin decides about a node: accept, refuse, add, its tags, groups, state, delete. */
function nodeVerbs(nodes: Command): void {
  verb(nodes, 'list', 'list nodes (GET /api/1/nodes)')
    .option('--pending', 'only nodes waiting for acceptance')
    .option('-f, --filter <key=value>', 'include filter, repeatable (name=web*, tag:env=prod, status=reachable, last_run=<from>..<to>)', collect)
    .option('-x, --exclude <key=value>', 'exclude filter, repeatable', collect)
    .option('-q, --query <expression>', 'filter expression (docs/filters.md), e.g. "os.name = debian and package:openssl < 3.0.11"')
    .option('--sort <field>', 'name, hostname, id, status, state, accepted, manager, region, last_run_at, last_contact_at, created_at')
    .option('--order <asc|desc>', 'sort order')
    .option('--page <n>', 'page (from 1)', int('page'), 1)
    .option('--per-page <n>', 'nodes per page', int('per-page'), 100)
    .action(async (flags: CommonFlags & { pending?: boolean; filter?: string[]; exclude?: string[]; query?: string; sort?: string; order?: string; page: number; perPage: number }) => {
      await withStore(flags, async (store) => {
        const filters = [...(flags.filter ?? []).map((f) => filterArg(f, false)), ...(flags.exclude ?? []).map((f) => filterArg(f, true))];
        if (flags.query !== undefined) filters.push({ key: 'q', values: [flags.query] });
        if (flags.pending) filters.push({ key: 'accepted', values: ['pending'] });
        const res = await store.listNodes({
          filters, page: flags.page, per_page: flags.perPage,
          ...(flags.sort !== undefined && { sort: flags.sort as SortField }),
          ...(flags.order !== undefined && { order: flags.order as 'asc' | 'desc' }),
        });
        out(flags, { data: res.data.map(listView), total: res.total, totals: res.totals, page: flags.page, per_page: flags.perPage }, () =>
          `${table(flags.pending ? PENDING_TABLE : NODE_TABLE, res.data)}${res.total} nodes (${res.totals.reachable} reachable, ${res.totals.unreachable} unreachable, ${res.totals.unknown} unknown)\n`);
      });
    });

  verb(nodes, 'properties <id>', "a node's admin-set properties; --set/--unset change them (GET|PUT /api/1/nodes/<id>/properties)")
    .option('-s, --set <key=value>', 'set a property, repeatable', collect)
    .option('-u, --unset <key>', 'remove a property, repeatable', collect)
    .action(async (id: string, flags: CommonFlags & { set?: string[]; unset?: string[] }) => {
      await withNodes(flags, async (registry, store) => {
        let props = await store.getProperties(id);
        if (props === null) throw capstanError('ERR_NODE_UNKNOWN', `node ${id} is unknown`);
        if (flags.set || flags.unset) {
          const next: Record<string, string> = { ...props };
          for (const kv of flags.set ?? []) {
            const i = kv.indexOf('=');
            if (i <= 0) throw capstanError('ERR_BAD_REQUEST', `--set takes <key>=<value>, got "${kv}"`);
            next[kv.slice(0, i)] = kv.slice(i + 1);
          }
          for (const k of flags.unset ?? []) delete next[k];
          props = await registry.setProperties(id, next, CLI_ACTOR);
        }
        out(flags, { data: props }, () => table([['property', (r) => r[0]], ['value', (r) => r[1]]], Object.entries(props!)));
      });
    });

  verb(nodes, 'show <id>', 'one node (GET /api/1/nodes/<id>)').action(async (id: string, flags: CommonFlags) => {
    await withStore(flags, async (store) => {
      const node = await mustNode(store, id);
      if (!node) return;
      const { certificate: _c, ...fields } = node;
      out(flags, { data: node }, () => table([['field', (r) => r[0]], ['value', (r) => r[1]]], Object.entries(fields)));
    });
  });

  for (const [name, acceptance] of [['accept', 'accepted'], ['refuse', 'refused']] as const) {
    const cmd = verb(nodes, `${name} <id>`, `${name} a pending node (POST /api/1/nodes/<id>/${name})`);
    if (acceptance === 'accepted') cmd.option('--fingerprint <sha256>', 'the certificate to pin, required when the node sent two (nodes list --pending shows both)');
    cmd.action(async (id: string, flags: CommonFlags & { fingerprint?: string }) => {
      await withNodes(flags, async (registry) => {
        const updated = acceptance === 'accepted'
          ? await registry.accept(id, CLI_ACTOR, { ...(flags.fingerprint !== undefined && { fingerprint: flags.fingerprint }) })
          : await registry.refuse(id, CLI_ACTOR);
        out(flags, { data: listView(updated) }, () => `${id} ${acceptance}\n`);
      });
    });
  }

  verb(nodes, 'add', 'add a node by address, or register a relay (POST /api/1/nodes)')
    .requiredOption('--host <address>', 'DNS name or IP address')
    .option('--name <name>', 'display name (default: the address)')
    .option('--id <id>', 'node id (default: a new UUID)')
    .option('-t, --tag <key=value>', 'tag, repeatable', collect)
    .option('-g, --group <id>', 'group, repeatable', collect)
    .option('--certificate <file>', 'the node\'s PEM certificate (UID=<id>), pinned at once')
    .option('--relay', 'a relay: its tokens open the relay-only endpoints (needs --id and --certificate: capstan-relayd --identity prints both)')
    .option('--policy-server <id>', 'the node id of the relay this node is under (a sub-relay: its upstream relay; default: this server)')
    .action(async (flags: CommonFlags & { host: string; name?: string; id?: string; tag?: string[]; group?: string[]; certificate?: string; relay?: boolean; policyServer?: string }) => {
      await withNodes(flags, async (registry) => {
        const certificate = flags.certificate !== undefined ? await readFile(flags.certificate, 'utf8').catch((err: Error) => {
          throw capstanError('ERR_BAD_REQUEST', `cannot read --certificate ${flags.certificate}: ${err.message}`);
        }) : undefined;
        const tags = tagArgs(flags.tag ?? []);
        const { createBody } = await bodies();
        const node = await registry.create(createBody({
          host: flags.host, ...(flags.name && { name: flags.name }), ...(flags.id && { id: flags.id }),
          ...(flags.tag && { tags }), ...(flags.group && { groups: flags.group }),
          ...(certificate !== undefined && { certificate }), ...(flags.relay && { relay: true }),
          ...(flags.policyServer !== undefined && { policy_server: flags.policyServer }),
        }), CLI_ACTOR);
        out(flags, { data: listView(node) }, () => `${node.id} added${node.relay ? ' as a relay' : ''}\n`);
      });
    });

  verb(nodes, 'set-relay <id> <on|off>', 'register an accepted node as a relay, or no longer (PATCH /api/1/nodes/<id> {relay})').action(async (id: string, value: string, flags: CommonFlags) => {
    await withNodes(flags, async (registry) => {
      if (value !== 'on' && value !== 'off') throw capstanError('ERR_BAD_REQUEST', 'set-relay takes on or off');
      const node = await registry.patch(id, (await bodies()).patchBody({ relay: value === 'on' }), CLI_ACTOR);
      out(flags, { data: listView(node) }, () => `${id} ${node.relay ? 'is a relay' : 'is no longer a relay'}\n`);
    });
  });

  verb(nodes, 'set-state <id> <state>', 'set a node\'s state; terminated is final (PATCH /api/1/nodes/<id>)').action(async (id: string, state: string, flags: CommonFlags) => {
    await withNodes(flags, async (registry) => {
      const node = await registry.patch(id, (await bodies()).patchBody({ state }), CLI_ACTOR);
      out(flags, { data: listView(node) }, () => `${id} ${node.state} (${node.status})\n`);
    });
  });

  verb(nodes, 'set-tags <id> [tags...]', 'replace a node\'s tags with these key=value pairs; none clears them (PATCH /api/1/nodes/<id> {tags})').action(async (id: string, tags: string[], flags: CommonFlags) => {
    await withNodes(flags, async (registry) => {
      const node = await registry.patch(id, (await bodies()).patchBody({ tags: tagArgs(tags) }), CLI_ACTOR);
      out(flags, { data: listView(node) }, () => `${id} tags: ${Object.entries(node.tags).map(([k, v]) => `${k}=${v}`).join(' ') || '(none)'}\n`);
    });
  });

  verb(nodes, 'set-groups <id> [groups...]', 'replace a node\'s static groups; none clears them (PATCH /api/1/nodes/<id> {groups})').action(async (id: string, groups: string[], flags: CommonFlags) => {
    await withNodes(flags, async (registry) => {
      const node = await registry.patch(id, (await bodies()).patchBody({ groups }), CLI_ACTOR);
      out(flags, { data: listView(node) }, () => `${id} groups: ${node.groups.join(' ') || '(none)'}\n`);
    });
  });

  verb(nodes, 'delete <id>', 'delete a node, its runs, and revoke its certificate (DELETE /api/1/nodes/<id>)').action(async (id: string, flags: CommonFlags) => {
    await withNodes(flags, async (registry) => {
      await registry.remove(id, CLI_ACTOR);
      out(flags, { data: { id, deleted: true } }, () => `${id} deleted\n`);
    });
  });
}

/** What the registry holds of a node: history, runs, compliance, and the counts over all. */
function recordVerbs(nodes: Command): void {
  verb(nodes, 'history <id>', 'lifecycle transitions, newest first (GET /api/1/nodes/<id>/history)')
    .option('--page <n>', 'page', int('page'), 1)
    .option('--per-page <n>', 'entries per page', int('per-page'), 100)
    .action(async (id: string, flags: CommonFlags & { page: number; perPage: number }) => {
      await withStore(flags, async (store) => {
        if (!(await mustNode(store, id))) return;
        const res = await store.getHistory(id, flags.page, flags.perPage);
        out(flags, { data: res.data, total: res.total, page: flags.page, per_page: flags.perPage }, () =>
          table([['at', (h) => h.at], ['field', (h) => h.field], ['from', (h) => h.from], ['to', (h) => h.to], ['cause', (h) => h.cause]], res.data));
      });
    });

  verb(nodes, 'runs <id>', 'runs, newest first (GET /api/1/nodes/<id>/runs)')
    .option('--from <time>', 'runs started at or after (RFC 3339)')
    .option('--to <time>', 'runs started before (RFC 3339)')
    .option('--page <n>', 'page', int('page'), 1)
    .option('--per-page <n>', 'runs per page', int('per-page'), 20)
    .action(async (id: string, flags: CommonFlags & { from?: string; to?: string; page: number; perPage: number }) => {
      await withStore(flags, async (store) => {
        if (!(await mustNode(store, id))) return;
        const res = await store.listRuns(id, flags.page, flags.perPage, { ...(flags.from && { from: flags.from }), ...(flags.to && { to: flags.to }) });
        out(flags, { data: res.data, total: res.total, page: flags.page, per_page: flags.perPage }, () =>
          `${table([['started', (r) => r.started_at], ['config', (r) => r.config_id], ['complete', (r) => r.complete], ['reports', (r) => r.report_count], ['counts', (r) => r.counts]], res.data)}${res.total} runs\n`);
      });
    });

  verb(nodes, 'compliance [id]', 'one node\'s compliance, or the global one (GET /api/1/nodes/<id>/compliance, GET /api/1/compliance)')
    .option('--by <rule|directive>', 'global compliance per rule or per directive')
    .action(async (id: string | undefined, flags: CommonFlags & { by?: string }) => {
      const pct = (v: number | null) => (v === null ? '-' : `${v}%`);
      await withStore(flags, async (store, config) => {
        const clock = complianceClock(complianceSettings(config));
        if (id !== undefined) {
          if (!(await mustNode(store, id))) return;
          const view = complianceView((await store.getComplianceBase(id))!, clock);
          const state = view.time_state === null ? '' : ` (${view.time_state.replace('_', ' ')})`;
          out(flags, { data: view }, () =>
            `${table([['rule', (c) => c.rule_id], ['directive', (c) => c.directive_id], ['component', (c) => c.component], ['state', (c) => c.state], ['outcome', (c) => c.outcome]], view.components)}compliance ${pct(view.compliance)} of ${view.summary.total} items${state}\n`);
        } else if (flags.by === 'rule' || flags.by === 'directive') {
          const rows = (await store.complianceByRule(flags.by, clock)).map((r) => ({ ...r, ...withPercent(r.counts) }));
          out(flags, { data: rows, total: rows.length }, () =>
            table([['rule', (r) => r.rule_id], ...(flags.by === 'directive' ? [['directive', (r: { directive_id?: string }) => r.directive_id] as [string, (r: any) => unknown]] : []),
              ['nodes', (r) => r.nodes], ['compliance', (r) => pct(r.compliance)], ['error', (r) => r.counts.error], ['missing', (r) => r.counts.missing],
              ['applying', (r) => r.counts.applying], ['no answer', (r) => r.counts.no_answer]], rows));
        } else if (flags.by !== undefined) {
          throw capstanError('ERR_BAD_REQUEST', '--by must be rule or directive');
        } else {
          const agg = await store.complianceSummary([], clock);
          const view = {
            nodes: agg.nodes, nodes_with_data: agg.nodes_with_data, ...withPercent(agg.counts),
            relays: { nodes: agg.relays.nodes, ...withPercent(agg.relays.counts) },
            agentless: { nodes: agg.agentless.nodes, ...withPercent(agg.agentless.counts) },
          };
          out(flags, { data: view }, () =>
            `${table([['state', (r) => r[0]], ['items', (r) => r[1]], ['percent', (r) => `${view.percent[r[0] as keyof typeof view.percent]}%`]], Object.entries(agg.counts))}compliance ${pct(view.compliance)} over ${agg.nodes} managed nodes (${agg.nodes_with_data} with data); apart: ${agg.relays.nodes} relays, ${agg.agentless.nodes} nodes without an agent\n`);
        }
      });
    });

  verb(nodes, 'lifecycle', 'registry counts by status, state and acceptance (GET /api/1/lifecycle)').action(async (flags: CommonFlags) => {
    await withStore(flags, async (store) => {
      const c = await store.counts();
      const rows = [
        ...Object.entries(c.by_status).map(([k, v]) => ['status', k, v]),
        ...Object.entries(c.by_state).map(([k, v]) => ['state', k, v]),
        ...Object.entries(c.by_acceptance).map(([k, v]) => ['accepted', k, v]),
        ['purged', 'nodes', c.purged_nodes], ['deleted', 'runs', c.deleted_runs],
      ];
      out(flags, { data: c }, () => table([['count', (r) => r[0]], ['of', (r) => r[1]], ['n', (r) => r[2]]], rows));
    });
  });
}

/** The SSH host key a bootstrap pinned for a node (docs/bootstrap.md). */
function hostKeyVerbs(nodes: Command): void {
  verb(nodes, 'host-key <id>', 'the SSH host key pinned for a node (GET /api/1/nodes/<id>/host-key)').action(async (id: string, flags: CommonFlags) => {
    await withStore(flags, async (store) => {
      const k = await store.bootstrap.getHostKey(id);
      if (!k) throw capstanError('ERR_NOT_FOUND', `no host key is pinned for node ${id}`);
      out(flags, { data: k }, () => `${k.algorithm} ${k.fingerprint} (pinned ${k.pinned_at}${k.job_id ? ` by job ${k.job_id}` : ''})\n`);
    });
  });

  verb(nodes, 'clear-host-key <id>', 'forget a node\'s pinned SSH host key after a legitimate change (DELETE /api/1/nodes/<id>/host-key)').action(async (id: string, flags: CommonFlags) => {
    await withStore(flags, async (store) => {
      if (!(await store.bootstrap.clearHostKey(id))) throw capstanError('ERR_NOT_FOUND', `no host key is pinned for node ${id}`);
      out(flags, { data: { node_id: id, cleared: true } }, () => `host key of ${id} cleared: the next bootstrap pins the key it meets\n`);
    });
  });
}
