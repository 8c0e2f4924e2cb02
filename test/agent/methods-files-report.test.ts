/**
 * The file-writing methods through the agent's engine: one bundle with a directive of each, applied
 * as a run applies it, read back from the run log. Each directive reports exactly the components
 * and keys the server expects of it (so compliance has nothing missing or unexpected), its change
 * is followed by its diff report, and a second run reports success with no diff.
 */
import { readFile } from 'node:fs/promises';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { expectedComponents, parseRunLog, silentLogger, type BundleDirective } from '@capstan/shared';
import { applyDirectives, nodeConditionEnv } from '@capstan/agent/policy/apply';
import { RunLogWriter } from '@capstan/agent/runlog/write';
import { testDiffSettings } from '../helpers/diff.js';
import { fakeTools } from '../helpers/methods.js';

async function runOnce(directives: BundleDirective[], env: NodeJS.ProcessEnv, audit = false) {
  const w = new RunLogWriter({ nodeId: 'node1', configId: 'cfg1', startedAt: new Date('2026-01-01T00:00:00Z'), clock: () => new Date('2026-01-01T00:00:01Z') });
  w.start();
  await applyDirectives(directives, {
    writer: w, forceAudit: audit, conditionEnv: nodeConditionEnv(['node1'], {}, env),
    ctx: { dryRun: false, log: silentLogger, env, commandTimeoutMs: 10_000, sysctlRoot: '/proc/sys', diff: testDiffSettings(), fetchShared: async () => Buffer.alloc(0) },
  });
  w.end();
  return parseRunLog(w.text(), { node_id: 'node1', timestamp: '2026-01-01T00:00:00+00:00' }).reports;
}

t.test('each file-writing method reports the components the server expects, with its diff', async (t) => {
  const dir = t.testdir({ etc: { 'sshd_config': 'PermitRootLogin yes\n', 'php.ini': '[PHP]\nmemory_limit = 128M\n', 'login.defs': 'PASS_MAX_DAYS 99999\n' }, zoneinfo: { UTC: 'TZif' } });
  const etc = join(dir, 'etc');
  const fake = await fakeTools(join(dir, 'tools'), { systemctl: 'echo no', 'apt-get': '', rpm: '', visudo: '' });
  const key = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHcVNLFBvL/ljhXuvEz2PodKMZFUDw+Ej2tC10OzNKKJ alice@laptop';
  const pgp = '-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQINBGR\n-----END PGP PUBLIC KEY BLOCK-----\n';
  const root = userInfo().uid === 0;
  const params: Array<[string, Record<string, unknown>]> = [
    ['file_from_template', { path: join(etc, 'app.conf'), template: 'x={{x}}\n', content: 'x=1\n' }],
    ['file_block_present', { path: join(etc, 'hosts'), name: 'cluster', block: '10.0.0.1 db' }],
    ['file_key_value', { path: join(etc, 'sshd_config'), values: { PermitRootLogin: 'no' } }],
    ['ini_value', { path: join(etc, 'php.ini'), section: 'PHP', key: 'memory_limit', value: '256M' }],
    ['file_replace', { path: join(etc, 'login.defs'), pattern: '^PASS_MAX_DAYS\\s+\\d+$', replacement: 'PASS_MAX_DAYS 90' }],
    ['symlink_present', { path: join(etc, 'current'), target: 'app.conf' }],
    ...(root ? [['cron_entry', { name: 'backup', path: join(etc, 'cron.d', 'backup'), schedule: '@daily', user: 'root', command: '/usr/bin/true' }] as [string, Record<string, unknown>]] : []),
    ['ssh_authorized_key', { user: userInfo().username, key, path: join(etc, 'keys', 'authorized_keys') }],
    ['sudoers_file', { name: 'ops', path: join(etc, 'sudoers.d', 'ops'), content: 'ops ALL=(ALL) ALL\n' }],
    ['systemd_unit_file', { unit: 'app.service', path: join(etc, 'app.service'), content: '[Service]\n' }],
    ['timezone', { name: 'UTC', zoneinfo: join(dir, 'zoneinfo'), localtime: join(etc, 'localtime'), timezone_file: join(etc, 'timezone') }],
    ['apt_repository', { name: 'x', path: join(etc, 'x.sources'), signed_by: join(etc, 'x.asc'), key: pgp, uris: 'https://x.example', suites: 'stable', components: 'main' }],
    ['yum_repository', { name: 'y', path: join(etc, 'y.repo'), key_path: join(etc, 'y.key'), gpgkey: pgp, baseurl: 'https://y.example' }],
    ['symlink_absent', { path: join(etc, 'gone') }],
  ];
  const directives: BundleDirective[] = params.map(([method, p], i) => ({ id: `d${i}`, name: method, rule_id: 'files', method, params: p, mode: 'enforce' }));
  const first = await runOnce(directives, fake.env);
  for (const d of directives) {
    const mine = first.filter((r) => r.directive_id === d.id);
    const results = mine.filter((r) => r.event_type.startsWith('result_'));
    t.same(results.map((r) => ({ component: r.component, key: r.key_value })), expectedComponents(d.method, d.params), `${d.method}: the expected components`);
    const want = d.method === 'symlink_absent' ? 'result_success' : 'result_repaired';
    t.same(results.map((r) => r.event_type), [want], `${d.method}: ${want} (${results[0]?.msg})`);
    if (want === 'result_repaired') t.equal(mine[1]?.event_type, 'log_info', `${d.method}: its diff report follows`);
  }
  t.equal(await readFile(join(etc, 'sshd_config'), 'utf8'), 'PermitRootLogin no\n');
  const second = await runOnce(directives, fake.env);
  t.same([...new Set(second.filter((r) => r.directive_id.startsWith('d')).map((r) => r.event_type))], ['result_success'], 'a second run: success everywhere, no diff');
  const audit = await runOnce(directives, fake.env, true);
  t.same([...new Set(audit.filter((r) => r.directive_id.startsWith('d')).map((r) => r.event_type))], ['audit_compliant'], 'an audit agrees');
});

t.test('a refusal is the directive\'s error report, under its expected component', async (t) => {
  const dir = t.testdir({ real: 'x\n' });
  const { symlink } = await import('node:fs/promises');
  await symlink(join(dir, 'real'), join(dir, 'link'));
  const directives: BundleDirective[] = [
    { id: 'tpl', name: 'tpl', rule_id: 'r', method: 'file_from_template', params: { path: join(dir, 'a'), template: '{{x}}' }, mode: 'enforce' },
    { id: 'link', name: 'link', rule_id: 'r', method: 'file_key_value', params: { path: join(dir, 'link'), values: { a: 1 } }, mode: 'audit' },
  ];
  const reports = await runOnce(directives, process.env);
  t.match(reports.filter((r) => r.directive_id === 'tpl'), [{ event_type: 'result_error', component: 'File from template', key_value: join(dir, 'a'), msg: /no rendered content/ }]);
  t.match(reports.filter((r) => r.directive_id === 'link'), [{ event_type: 'audit_error', component: 'File key values', msg: /symbolic link/ }]);
});
