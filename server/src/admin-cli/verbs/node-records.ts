/**
 * `capstan nodes …`, what the registry holds of one node: history, runs, inventory and its
 * history, properties, compliance, the policy that reaches it and why, the pinned SSH host key,
 * the identity token.
 */
import { InvalidArgumentError, type Command } from 'commander';
import type { Column } from '../output.js';
import type { ApiTransport } from '../transport.js';
import { collect, enc, int, keyValue, nodeFilters, type Verbs } from '../kit.js';
import { fleetCompliance, nodeCompliance, timeArg } from './reports.js';

/** An inventory for a table: objects one level flattened (`os.name`), lists counted. */
/** `--set k=v` (JSON with `--json-value`, a secret with `--secret`) and `--unset k` of a node's own properties. */
export interface NodePropertyEdits { set?: string[]; unset?: string[]; jsonValue?: boolean; secret?: boolean }

/** A node's own properties as `GET /api/1/nodes/<id>/properties` answers: plain values, and the secrets' names. */
export interface NodeProperties { data: Record<string, unknown>; secrets: string[] }

/**
 * A node's own properties, after the edits asked for: read in the level form (a secret as
 * `{"secret": true}`, which the server keeps when it is sent back so), changed, written back
 * whole (what another admin set meanwhile is overwritten). No edit: read only.
 */
export async function editNodeProperties(api: ApiTransport, id: string, o: NodePropertyEdits): Promise<NodeProperties> {
  if (!o.set && !o.unset) return (await api.get(`/api/1/nodes/${enc(id)}/properties`)).body as NodeProperties;
  const path = `/api/1/nodes/${enc(id)}/properties/own`;
  const own = ((await api.get(path)).body as { data: { properties: Record<string, { value?: unknown; secret?: boolean }> } }).data.properties;
  const value = (k: string, v: string): unknown => {
    if (!o.jsonValue) return v;
    try {
      return JSON.parse(v) as unknown;
    } catch (err) {
      throw new InvalidArgumentError(`--set ${k}: --json-value: ${(err as Error).message}`);
    }
  };
  const next = { ...own };
  for (const [k, v] of (o.set ?? []).map(keyValue)) {
    const x = value(k, v);
    if (o.secret && typeof x !== 'string') throw new InvalidArgumentError(`--set ${k}: a secret's value is text`);
    next[k] = { value: x, ...(o.secret && { secret: true }) };
  }
  for (const k of o.unset ?? []) delete next[k];
  const saved = ((await api.call('PUT', path, { body: { properties: next } })).body as { data: { properties: typeof own } }).data.properties;
  const names = Object.keys(saved);
  return { data: Object.fromEntries(names.filter((k) => saved[k]!.secret !== true).map((k) => [k, saved[k]!.value])), secrets: names.filter((k) => saved[k]!.secret === true) };
}

/** Stands for a secret's value in a table: never the value. */
const SECRET_SHOWN = Symbol('secret');

export function inventoryFields(inv: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const put = (key: string, v: unknown) => {
    out[key] = Array.isArray(v) ? `${v.length} entries` : v;
  };
  for (const [k, v] of Object.entries(inv)) {
    if (k === 'certificate') continue;
    if (v !== null && typeof v === 'object' && !Array.isArray(v)) for (const [k2, v2] of Object.entries(v)) put(`${k}.${k2}`, v2);
    else put(k, v);
  }
  return out;
}

export function nodeRecordVerbs(nodes: Command, verbs: Verbs): void {
  const { act, list, show, io } = verbs;
  nodes.command('history <id>').description('transitions of acceptance, state and status, newest first')
    .option('--limit <n>', 'at most', int('--limit'), 1000)
    .action(act(async (api, fmt, cmd, id: string) => list(fmt, [['at', (h) => h.at], ['field', (h) => h.field], ['from', (h) => h.from], ['to', (h) => h.to], ['cause', (h) => h.cause]],
      await api.all(`/api/1/nodes/${enc(id)}/history`, {}, (cmd.opts() as { limit: number }).limit))));
  nodes.command('runs <id>').description('a node\'s runs, newest first')
    .option('--from <when>', 'runs started since a duration ago (1d) or an RFC 3339 time').option('--to <when>', 'runs started before')
    .option('--limit <n>', 'at most', int('--limit'), 20)
    .action(act(async (api, fmt, cmd, id: string) => {
      const o = cmd.opts() as { from?: string; to?: string; limit: number };
      list(fmt, [['started_at', (r) => r.started_at], ['config_id', (r) => r.config_id], ['complete', (r) => r.complete], ['reports', (r) => r.report_count], ['counts', (r) => r.counts]],
        await api.all(`/api/1/nodes/${enc(id)}/runs`, { from: o.from && timeArg(o.from), to: o.to && timeArg(o.to) }, o.limit));
    }));

  nodes.command('inventory <id>').description('the node\'s last inventory (lists counted; --json for all of it)')
    .option('--packages', 'its packages instead: name, version')
    .action(act(async (api, fmt, cmd, id: string) => {
      const ans = (await api.get(`/api/1/nodes/${enc(id)}/inventory`)).body as { data: { received_at: string; inventory: Record<string, unknown> } };
      const doc = ans.data.inventory;
      if ((cmd.opts() as { packages?: boolean }).packages) {
        const packages = Array.isArray(doc.packages) ? doc.packages : [];
        return void list(fmt, [['name', (p) => p.name], ['version', (p) => p.version]], { data: packages });
      }
      if (fmt === 'json') return void show(fmt, ans);
      show(fmt, { data: { received_at: ans.data.received_at, ...inventoryFields(doc) } });
    }));
  nodes.command('inventory-history <id>').description('what changed between its inventories: packages, addresses, kernel (newest first)')
    .option('--limit <n>', 'at most', int('--limit'), 100)
    .action(act(async (api, fmt, cmd, id: string) => list(fmt, [['at', (c) => c.at], ['kind', (c) => c.kind], ['name', (c) => c.name], ['from', (c) => c.from], ['to', (c) => c.to]],
      await api.all(`/api/1/nodes/${enc(id)}/inventory/history`, {}, (cmd.opts() as { limit: number }).limit))));

  nodes.command('properties <id>').description('a node\'s admin-set properties (JSON values); --set and --unset change them (the others are kept)')
    .option('-s, --set <key=value>', 'set a property (repeatable): text, or JSON with --json-value', collect)
    .option('-u, --unset <key>', 'remove a property (repeatable)', collect)
    .option('--json-value', 'the values of --set are JSON (an object, a list, a number, true/false, a quoted string)')
    .option('--secret', 'the values of --set are secrets: sealed to this node, never shown again')
    .action(act(async (api, fmt, cmd, id: string) => {
      const ans = await editNodeProperties(api, id, cmd.opts() as NodePropertyEdits);
      if (fmt === 'json') return void show(fmt, ans as unknown as { data: Record<string, unknown> });
      const rows: Array<[string, unknown]> = [...Object.entries(ans.data), ...ans.secrets.map((k): [string, unknown] => [k, SECRET_SHOWN])].sort(([a], [b]) => (a < b ? -1 : 1));
      list(fmt, [['property', (r) => r[0]], ['value', (r) => (r[1] === SECRET_SHOWN ? '(secret)' : typeof r[1] === 'string' ? r[1] : JSON.stringify(r[1]))]], { data: rows });
    }));

  nodeFilters(nodes.command('compliance [id]').description('one node\'s compliance per rule and directive; without an id, every node\'s (as compliance nodes)'))
    .action(act(async (api, fmt, cmd, id?: string) => (id === undefined
      ? fleetCompliance(api, fmt, 'nodes', cmd.opts(), verbs)
      : nodeCompliance(api, fmt, id, verbs))));

  nodes.command('policy <id>').description('what applies to the node and why: its groups, each rule through which of them, the directives')
    .action(act(async (api, fmt, _c, id: string) => {
      const ans = (await api.get(`/api/1/nodes/${enc(id)}/policy`)).body;
      if (fmt === 'json') return void show(fmt, ans);
      const d = ans.data as { node_id: string; accepted: string; config_id: string | null; groups: string[]; rules: Array<{ id: string; via: string[]; directives: Array<Record<string, string>> }> };
      const rows = d.rules.flatMap((r) => r.directives.map((x) => ({ rule_id: r.id, via: r.via.join(','), directive_id: x.id, method: x.method, mode: x.mode })));
      if (fmt === 'table') io.out(`node ${d.node_id} (${d.accepted}), config ${d.config_id ?? 'none'}, groups: ${d.groups.join(', ') || '(none)'}\n\n`);
      const columns: Column[] = [['rule_id', (r) => r.rule_id], ['via', (r) => r.via], ['directive_id', (r) => r.directive_id], ['method', (r) => r.method], ['mode', (r) => r.mode]];
      list(fmt, columns, { data: rows });
    }));

  nodes.command('host-key <id>').description('the SSH host key a bootstrap pinned for the node')
    .action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.get(`/api/1/nodes/${enc(id)}/host-key`)).body)));
  nodes.command('clear-host-key <id>').description('forget the pinned SSH host key after a legitimate change: the next bootstrap pins the key it meets')
    .action(act(async (api, _f, _c, id: string) => {
      await api.call('DELETE', `/api/1/nodes/${enc(id)}/host-key`);
      io.out(`cleared the host key of node ${id}\n`);
    }));
  nodes.command('identity <id>').description('the node\'s identity token as the server last issued it (force a renewal: keys renew <id>)')
    .action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.get(`/api/1/nodes/${enc(id)}/identity`)).body)));
}
