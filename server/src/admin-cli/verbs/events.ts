/**
 * `capstan findings …`, `events …`, `subscriptions …` and `deliveries …`: the findings of audits
 * and errors, the event stream (read, or followed with long-polls), and who is told of it.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import type { QueryParams } from '../client.js';
import type { Column } from '../output.js';
import { bodyFromFile, collect, enc, int, type Verbs } from '../kit.js';

/** An integer ≥ 0 (an event id, a window in ms). */
const whole = (name: string) => (v: string) => {
  if (!/^\d{1,15}$/.test(v)) throw new InvalidArgumentError(`${name} must be an integer ≥ 0`);
  return Number(v);
};

const FINDING_COLUMNS: Column[] = [
  ['id', (f) => f.id], ['status', (f) => f.status], ['kind', (f) => f.kind], ['node_id', (f) => f.node_id], ['rule_id', (f) => f.rule_id],
  ['directive_id', (f) => f.directive_id], ['component', (f) => f.component], ['first_seen_at', (f) => f.first_seen_at], ['runs', (f) => f.runs],
  ['closed_at', (f) => f.closed_at], ['close_reason', (f) => f.close_reason], ['message', (f) => f.message],
];
const EVENT_COLUMNS: Column[] = [
  ['id', (e) => e.id], ['at', (e) => e.at], ['type', (e) => e.type], ['severity', (e) => e.severity], ['node_id', (e) => e.node_id],
  ['data', (e) => JSON.stringify(e.data)],
];
const SUBSCRIPTION_COLUMNS: Column[] = [
  ['id', (s) => s.id], ['kind', (s) => s.kind], ['target', (s) => s.target], ['types', (s) => (s.types.length ? s.types.join(',') : '*')],
  ['min_severity', (s) => s.min_severity], ['filter', (s) => s.filter], ['enabled', (s) => s.enabled], ['cursor', (s) => s.cursor],
];
const DELIVERY_COLUMNS: Column[] = [
  ['id', (d) => d.id], ['subscription_id', (d) => d.subscription_id], ['state', (d) => d.state], ['events', (d) => d.event_ids.length],
  ['attempts', (d) => d.attempts], ['next_at', (d) => d.next_at], ['last_status', (d) => d.last_status], ['last_error', (d) => d.last_error],
];

export function eventVerbs(program: Command, { act, list, show, io }: Verbs): void {
  program.command('findings').description('audit non-compliances and errors of nodes\' components, newest first')
    .addOption(new Option('--status <status>').choices(['open', 'closed', 'all']).default('open'))
    .addOption(new Option('--kind <kind>').choices(['non_compliant', 'error']))
    .option('--node <id>', 'repeatable', collect).option('--rule <id>', 'repeatable', collect).option('--directive <id>', 'repeatable', collect)
    .option('-q, --query <expression>', 'the nodes a filter expression selects (docs/filters.md)')
    .option('--min-age <duration>', 'first seen at least this long ago (1d, 2h)')
    .option('--limit <n>', 'at most', int('--limit'), 100)
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as Record<string, any>;
      const query: QueryParams = { status: o.status, kind: o.kind, node: o.node, rule: o.rule, directive: o.directive, q: o.query, min_age: o.minAge };
      // CSV as the server exports it: every column, every finding selected.
      if (fmt === 'csv') return void io.out((await api.call('GET', '/api/1/findings', { query: { ...query, format: 'csv' }, accept: 'text/csv' })).text);
      list(fmt, FINDING_COLUMNS, await api.all('/api/1/findings', { ...query, diff: 'false' }, o.limit));
    }));

  const events = program.command('events').description('the event stream: read after an id, or follow it');
  const eventFilters = (c: Command) => c
    .option('--after <id>', 'events after this id', whole('--after'), 0)
    .option('--type <type>', 'an event type or prefix (node.*); repeatable', collect)
    .addOption(new Option('--min-severity <severity>').choices(['info', 'warning', 'error']))
    .option('--node <id>', 'repeatable', collect)
    .option('-q, --query <expression>', 'events about the nodes a filter expression selects');
  eventFilters(events.command('list').description('events after an id, oldest first'))
    .option('--limit <n>', 'at most (1000 per call)', int('--limit'), 100)
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as Record<string, any>;
      const ans = (await api.get('/api/1/events', { after: o.after, type: o.type, min_severity: o.minSeverity, node: o.node, q: o.query, limit: Math.min(1000, o.limit) })).body;
      list(fmt, EVENT_COLUMNS, ans);
    }));
  eventFilters(events.command('follow').description('print events as they come (long-polls), one line each, until interrupted'))
    .option('--wait <seconds>', 'each long-poll waits this long for the next event', int('--wait'), 20)
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as Record<string, any>;
      let after = o.after as number;
      for (;;) {
        const ans = (await api.get('/api/1/events', { after, type: o.type, min_severity: o.minSeverity, node: o.node, q: o.query, wait: o.wait, limit: 1000 })).body;
        for (const e of ans.data) io.out(fmt === 'json' ? `${JSON.stringify(e)}\n` : `${e.id} ${e.at} ${e.severity} ${e.type} ${e.node_id ?? '-'} ${JSON.stringify(e.data)}\n`);
        after = ans.next_after;
      }
    }));

  const subs = program.command('subscriptions').description('who is told of events: webhooks and e-mail');
  subs.command('list').action(act(async (api, fmt) => list(fmt, SUBSCRIPTION_COLUMNS, (await api.get('/api/1/subscriptions')).body)));
  subs.command('show <id>').action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.get(`/api/1/subscriptions/${enc(id)}`)).body)));
  subs.command('add <id>').description('a webhook (--webhook; its signing secret is printed once) or e-mail (--to)')
    .option('--webhook <url>', 'the webhook\'s URL').option('--to <address>', 'an e-mail address (repeatable)', collect)
    .option('--secret <secret>', 'the webhook\'s signing secret (default: made by the server)')
    .option('--type <type>', 'an event type or prefix (node.*); repeatable; none: every type', collect)
    .addOption(new Option('--min-severity <severity>').choices(['info', 'warning', 'error']))
    .option('-q, --query <expression>', 'only events about the nodes a filter expression selects')
    .option('--group-window <ms>', 'how long a message waits for more events (ms)', whole('--group-window'))
    .option('--name <name>').option('-f, --file <file>', 'the whole subscription from a TOML or JSON file')
    .action(act(async (api, fmt, cmd, id: string) => {
      const o = cmd.opts() as Record<string, any>;
      const body = o.file ? { id, ...(await bodyFromFile(o.file)) } : {
        id, kind: o.to ? 'email' : 'webhook', ...(o.webhook && { url: o.webhook }), ...(o.to && { to: o.to }), ...(o.secret && { secret: o.secret }),
        ...(o.type && { types: o.type }), ...(o.minSeverity && { min_severity: o.minSeverity }), ...(o.query && { filter: o.query }),
        ...(o.groupWindow !== undefined && { group_window_ms: o.groupWindow }), ...(o.name && { name: o.name }),
      };
      show(fmt, (await api.call('POST', '/api/1/subscriptions', { body })).body);
    }));
  for (const [verb, enabled] of [['enable', true], ['disable', false]] as const) {
    subs.command(`${verb} <id>`).action(act(async (api, fmt, _c, id: string) =>
      show(fmt, (await api.call('PATCH', `/api/1/subscriptions/${enc(id)}`, { body: { enabled } })).body)));
  }
  subs.command('delete <id>').action(act(async (api, _fmt, _c, id: string) => {
    await api.call('DELETE', `/api/1/subscriptions/${enc(id)}`);
  }));

  const deliveries = program.command('deliveries').description('the messages sent to subscriptions: list, show, retry a dead one');
  deliveries.command('list').option('--subscription <id>')
    .addOption(new Option('--state <state>').choices(['pending', 'delivered', 'dead']))
    .option('--limit <n>', 'at most', int('--limit'), 100)
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as Record<string, any>;
      list(fmt, DELIVERY_COLUMNS, await api.all('/api/1/deliveries', { subscription: o.subscription, state: o.state }, o.limit));
    }));
  deliveries.command('show <id>').action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.get(`/api/1/deliveries/${enc(id)}`)).body)));
  deliveries.command('retry <id>').description('send a dead message again')
    .action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.call('POST', `/api/1/deliveries/${enc(id)}/retry`)).body)));
}
