/**
 * `capstan properties …`: global properties (policy objects by name: list, get, set, delete) and
 * one node's effective properties with where each leaf comes from (docs/policy.md, Properties).
 * A secret's value is never shown: the server does not return it.
 */
import { InvalidArgumentError, type Command } from 'commander';
import { collect, enc, type Verbs } from '../kit.js';
import { editNodeProperties, type NodePropertyEdits } from './node-records.js';

/** A value as given: text, or JSON with --json-value. */
function valueOf(text: string, json: boolean): unknown {
  if (!json) return text;
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new InvalidArgumentError(`--json-value: ${(err as Error).message}`);
  }
}

const shown = (p: { value?: unknown; secret?: boolean }) => (p.secret ? '(secret)' : typeof p.value === 'string' ? p.value : JSON.stringify(p.value));

const originText = (o: { level: string; id?: string }) => (o.level === 'group' ? `group ${o.id}` : o.level);

export function propertyVerbs(program: Command, { act, list, show, io }: Verbs): void {
  const c = program.command('properties').description('global properties: list, get, set, delete; a node\'s effective properties (node)');
  c.command('list').action(act(async (api, fmt) => list(fmt, [['name', (p) => p.id], ['value', shown], ['secret', (p) => p.secret === true], ['updated_at', (p) => p.updated_at]],
    (await api.get('/api/1/properties')).body)));
  c.command('get <name>').action(act(async (api, fmt, _c, name: string) => show(fmt, (await api.get(`/api/1/properties/${enc(name)}`)).body)));
  c.command('set <name> <value>').description('create or replace a global property (a string unless --json-value)')
    .option('--json-value', 'the value is JSON (an object, a list, a number, true/false)')
    .option('--secret', 'a secret: sealed to each node that uses it, never shown again')
    .action(act(async (api, fmt, cmd, name: string, value: string) => {
      const o = cmd.opts() as { jsonValue?: boolean; secret?: boolean };
      const body = { value: valueOf(value, o.jsonValue === true), ...(o.secret && { secret: true }) };
      show(fmt, (await api.call('PUT', `/api/1/properties/${enc(name)}`, { body })).body);
    }));
  c.command('delete <name>').action(act(async (api, _f, _c, name: string) => {
    await api.call('DELETE', `/api/1/properties/${enc(name)}`);
    io.out(`deleted property ${name}\n`);
  }));
  c.command('node <id>').description('a node\'s effective properties: global < groups (by priority) < node, each leaf with its origin; --set and --unset change its own')
    .option('-s, --set <key=value>', 'set one of the node\'s own properties (repeatable): text, or JSON with --json-value', collect)
    .option('-u, --unset <key>', 'remove one of the node\'s own properties (repeatable)', collect)
    .option('--json-value', 'the values of --set are JSON (an object, a list, a number, true/false, a quoted string)')
    .option('--secret', 'the values of --set are secrets of the node: sealed to it, never shown again')
    .action(act(async (api, fmt, cmd, id: string) => {
      const edits = cmd.opts() as NodePropertyEdits;
      if (edits.set || edits.unset) await editNodeProperties(api, id, edits);
      const answer = (await api.get(`/api/1/nodes/${enc(id)}/properties/effective`)).body as { data: { origins: Array<Record<string, unknown>>; conflicts: unknown[]; problem: { message: string } | null } };
      if (fmt === 'json') {
        io.out(`${JSON.stringify(answer, null, 2)}\n`);
        return;
      }
      const rows = answer.data.origins.map((o) => ({ ...o, overridden: (o.overridden as Array<{ origin: { level: string; id?: string } }> | undefined)?.map((x) => originText(x.origin)).join(', ') }));
      list(fmt, [['path', (o) => (o.path as string[]).join('.')], ['value', shown], ['origin', (o) => originText(o.origin)], ['overrides', (o) => o.overridden]], { data: rows });
      if (fmt === 'table' && answer.data.problem) io.out(`policy not generated: ${answer.data.problem.message}\n`);
    }));
}
