/**
 * `capstan admins …`, `whoami` and `audit`: named admins with roles, and who did what.
 */
import { Command, Option } from 'commander';
import type { Column } from '../output.js';
import { enc, int, type Verbs } from '../kit.js';

const AUDIT_COLUMNS: Column[] = [
  ['at', (a) => a.at], ['admin', (a) => a.admin], ['role', (a) => a.role], ['action', (a) => a.action], ['target', (a) => a.target],
  ['status', (a) => a.status], ['error', (a) => a.error], ['address', (a) => a.address],
];
const ADMIN_COLUMNS: Column[] = [['name', (a) => a.name], ['role', (a) => a.role], ['created_at', (a) => a.created_at], ['expires_at', (a) => a.expires_at]];

export function adminVerbs(program: Command, { act, list, show, io }: Verbs): void {
  const admins = program.command('admins').description('named admins: list, create, delete, token; whoami');
  admins.command('list').action(act(async (api, fmt) => list(fmt, ADMIN_COLUMNS, (await api.get('/api/1/admins')).body)));
  admins.command('create <name>').description('a new admin; its token is shown once')
    .addOption(new Option('--role <role>').choices(['admin', 'operator', 'viewer']).makeOptionMandatory())
    .option('--expires <when>', 'when its token stops working, as the server takes it (e.g. 90d)')
    .action(act(async (api, fmt, cmd, name: string) => {
      const o = cmd.opts() as { role: string; expires?: string };
      show(fmt, (await api.call('POST', '/api/1/admins', { body: { name, role: o.role, ...(o.expires && { expires: o.expires }) } })).body);
    }));
  admins.command('delete <name>').description('remove an admin; its token stops working').action(act(async (api, _f, _c, name: string) => {
    await api.call('DELETE', `/api/1/admins/${enc(name)}`);
    io.out(`deleted admin ${name}\n`);
  }));
  admins.command('token <name>').description('a new token for an admin (the old one stops working); shown once')
    .action(act(async (api, fmt, _c, name: string) => show(fmt, (await api.call('POST', `/api/1/admins/${enc(name)}/token`)).body)));
  program.command('whoami').description('the admin the token belongs to').action(act(async (api, fmt) => show(fmt, (await api.get('/api/1/whoami')).body)));
  program.command('audit').description('the audit log: every write through the API')
    .option('--from <time>').option('--to <time>').option('--admin <name>').option('--action <action>').option('--target <target>')
    .addOption(new Option('--result <result>').choices(['ok', 'error']))
    .option('--limit <n>', 'at most', int('--limit'), 100)
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as Record<string, any>;
      list(fmt, AUDIT_COLUMNS, await api.all('/api/1/audit', { from: o.from, to: o.to, admin: o.admin, action: o.action, target: o.target, result: o.result }, o.limit));
    }));
}
