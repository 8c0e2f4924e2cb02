/**
 * `capstan managers …` (cloud discovery) and `keys …` (identity keys, forced renewals, the policy key).
 */
import { Command, InvalidArgumentError } from 'commander';
import type { Column } from '../output.js';
import { bodyFromFile, enc, type Verbs } from '../kit.js';

export function managerVerbs(program: Command, { act, list, show }: Verbs): void {
  const managers = program.command('managers').description('cloud discovery: list, show, create, update, delete, test, poll');
  const MANAGER_COLUMNS: Column[] = [['id', (m) => m.id], ['name', (m) => m.name], ['type', (m) => m.type], ['provider', (m) => m.provider], ['last_poll_at', (m) => m.last_poll_at], ['last_poll_error', (m) => m.last_poll_error]];
  managers.command('list').action(act(async (api, fmt) => list(fmt, MANAGER_COLUMNS, (await api.get('/api/1/managers')).body)));
  managers.command('show <id>').action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.get(`/api/1/managers/${enc(id)}`)).body)));
  managers.command('create <file>').description('from a TOML or JSON file').action(act(async (api, fmt, _c, file: string) => show(fmt, (await api.call('POST', '/api/1/managers', { body: await bodyFromFile(file) })).body)));
  managers.command('update <id> <file>').action(act(async (api, fmt, _c, id: string, file: string) => show(fmt, (await api.call('PUT', `/api/1/managers/${enc(id)}`, { body: await bodyFromFile(file) })).body)));
  managers.command('delete <id>').option('--nodes <choice>', 'keep, delete or state:<state>: what becomes of the nodes it alone holds')
    .action(act(async (api, fmt, cmd, id: string) => show(fmt, (await api.call('DELETE', `/api/1/managers/${enc(id)}`, { query: { nodes: (cmd.opts() as { nodes?: string }).nodes } })).body)));
  managers.command('test <id>').action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.call('POST', `/api/1/managers/${enc(id)}/test`)).body)));
  managers.command('poll <id>').action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.call('POST', `/api/1/managers/${enc(id)}/poll`)).body)));
}

export function keyVerbs(program: Command, { act, list, show }: Verbs): void {
  const keys = program.command('keys').description('identity keys: list, rotate, delete, renew; the policy key');
  keys.command('list').action(act(async (api, fmt) => list(fmt,
    [['kid', (k) => k.kid], ['alg', (k) => k.alg], ['active', (k) => k.active], ['published', (k) => k.published], ['created_at', (k) => k.created_at], ['retired_at', (k) => k.retired_at], ['nodes', (k) => k.nodes]],
    (await api.get('/api/1/keys')).body)));
  keys.command('rotate').description('a new active identity key').action(act(async (api, fmt) => show(fmt, (await api.call('POST', '/api/1/keys/rotate')).body)));
  keys.command('delete <kid>').option('--force', 'even while it signs unexpired tokens (those nodes renew)')
    .action(act(async (api, fmt, cmd, kid: string) => show(fmt, (await api.call('DELETE', `/api/1/keys/${enc(kid)}`, { query: { force: (cmd.opts() as { force?: boolean }).force ? 'true' : undefined } })).body)));
  keys.command('renew [node]').description('force a node, or every node of a registry group, to renew its identity token')
    .option('--group <group>', 'every node of this registry group')
    .action(act(async (api, fmt, cmd, node?: string) => {
      const group = (cmd.opts() as { group?: string }).group;
      if (!node === !group) throw new InvalidArgumentError('name one node, or --group <group>');
      show(fmt, (await api.call('POST', group ? `/api/1/groups/${enc(group)}/identity/renew` : `/api/1/nodes/${enc(node!)}/identity/renew`)).body);
    }));
  keys.command('policy').description('the policy signing key agents pin').action(act(async (api, fmt) => show(fmt, (await api.get('/api/1/keys/policy')).body)));
  keys.command('policy-rotate').description('a new policy key, endorsed by the previous one').action(act(async (api, fmt) => show(fmt, (await api.call('POST', '/api/1/keys/policy/rotate')).body)));
}
