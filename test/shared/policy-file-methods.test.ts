/**
 * The file-writing methods' parameter schemas, as the server checks them when a directive is
 * saved: good parameters pass with their defaults resolved, each bad one is ERR_METHOD_PARAMS
 * naming its field (details.field), and components are what the agent reports.
 */
import t from 'tap';
import { expectedComponents, METHOD_SPECS, validateMethodParams } from '@capstan/shared';

const KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHcVNLFBvL/ljhXuvEz2PodKMZFUDw+Ej2tC10OzNKKJ alice@laptop';
const PGP = '-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQINBGR\n-----END PGP PUBLIC KEY BLOCK-----';

/** Good parameters of each method, then changes that must each be refused naming the field. */
const CASES: Record<string, { good: Record<string, unknown>; bad: Array<[Record<string, unknown>, string]> }> = {
  file_from_template: {
    good: { path: '/etc/app.conf', template: 'x={{x}}\n', mode: '0640', owner: 'app', group: 1000, validate: ['/usr/bin/app', '--check', '%s'], show_diff: false },
    bad: [
      [{ template: undefined }, 'template'], [{ source: 'tpl/app.mustache' }, 'source'], [{ path: 'etc/app.conf' }, 'path'],
      [{ owner: 'bad name' }, 'owner'], [{ group: -1 }, 'group'], [{ validate: ['/usr/bin/app', '--check'] }, 'validate'],
      [{ validate: 'app -t %s' }, 'validate'], [{ validate: [] }, 'validate'], [{ mode: '0999' }, 'mode'], [{ content: 5 }, 'content'],
    ],
  },
  file_block_present: {
    good: { path: '/etc/hosts', name: 'cluster', block: '10.0.0.1 db\n', insert_after: '^127\\.' },
    bad: [
      [{ name: '' }, 'name'], [{ name: 'a\nb' }, 'name'], [{ block: 7 }, 'block'], [{ state: 'gone' }, 'state'], [{ insert_before: '^x' }, 'insert_before'],
      [{ insert_after: '(' }, 'insert_after'], [{ marker_begin: 'X', marker_end: 'X' }, 'marker_end'], [{ block: '# END CAPSTAN MANAGED BLOCK cluster' }, 'block'],
    ],
  },
  file_key_value: {
    good: { path: '/etc/ssh/sshd_config', values: { PermitRootLogin: 'no', Port: 22 }, absent: ['X11Forwarding'], case_insensitive: true, validate: ['/usr/sbin/sshd', '-t', '-f', '%s'] },
    bad: [
      [{ values: { 'Permit Root': 'no' } }, 'values.Permit Root'], [{ values: { PermitRootLogin: true } }, 'values.PermitRootLogin'], [{ values: { A: ' x' } }, 'values.A'],
      [{ values: {}, absent: [] }, 'values'], [{ absent: ['PermitRootLogin'] }, 'absent.0'], [{ absent: 'X11Forwarding' }, 'absent'],
      [{ key_fields: 3 }, 'values.PermitRootLogin'], [{ separator: '=', key_fields: 2 }, 'key_fields'], [{ key_fields: 0 }, 'key_fields'],
      [{ comment: '' }, 'comment'], [{ values: { Port: 22, port: 23 } }, 'values'], [{ values: { '#Port': 1 } }, 'values.#Port'],
    ],
  },
  ini_value: {
    good: { path: '/etc/php/8.2/fpm/php.ini', section: 'PHP', key: 'memory_limit', value: '256M' },
    bad: [[{ section: '[PHP]' }, 'section'], [{ key: 'a=b' }, 'key'], [{ value: undefined }, 'value'], [{ state: 'absent' }, 'value'], [{ separator: ' ' }, 'separator']],
  },
  file_replace: {
    good: { path: '/etc/login.defs', pattern: '^PASS_MAX_DAYS\\s+\\d+$', replacement: 'PASS_MAX_DAYS 90', flags: 'mi' },
    bad: [[{ pattern: '(' }, 'pattern'], [{ pattern: 'x*' }, 'pattern'], [{ flags: 'g' }, 'flags'], [{ flags: 'mm' }, 'flags'], [{ replacement: undefined }, 'replacement']],
  },
  symlink_present: { good: { path: '/etc/nginx/sites-enabled/app', target: '../sites-available/app', force: true }, bad: [[{ target: '' }, 'target'], [{ force: 'yes' }, 'force']] },
  symlink_absent: { good: { path: '/etc/nginx/sites-enabled/default' }, bad: [[{ path: 'default' }, 'path']] },
  cron_entry: {
    good: { name: 'logrotate-app', schedule: '*/15 0-6,22,23 1-31/2 jan-jun Mon-Fri', user: 'app', command: '/usr/local/bin/rotate', env: { MAILTO: '' } },
    bad: [
      [{ name: 'app.cron' }, 'name'], [{ schedule: '* * * *' }, 'schedule'], [{ schedule: '60 * * * *' }, 'schedule'], [{ schedule: '5/10 * * * *' }, 'schedule'],
      [{ schedule: '@often' }, 'schedule'], [{ schedule: '* * * * 8' }, 'schedule'], [{ schedule: '* * * * fri-mon' }, 'schedule'],
      [{ user: 'a b' }, 'user'], [{ command: 'a\nb' }, 'command'], [{ env: { 'BAD-NAME': 'x' } }, 'env.BAD-NAME'], [{ path: 'cron.d/x' }, 'path'],
    ],
  },
  ssh_authorized_key: {
    good: { user: 'deploy', key: KEY, options: 'from="10.0.0.0/8",command="/usr/bin/rrsync -ro /srv"', exclusive: true },
    bad: [
      [{ key: 'ssh-dss AAAAB3NzaC1kc3MAAACBAP' }, 'key'], [{ key: KEY.replace('AAAAC3NzaC1lZDI1NTE5', 'AAAAB3NzaC1yc2EAAAAD') }, 'key'],
      [{ key: `${KEY}\n${KEY}` }, 'key'], [{ options: 'from=10.0.0.0/8 no-pty' }, 'options'], [{ options: 'command="unbalanced' }, 'options'],
      [{ state: 'absent' }, 'exclusive'], [{ user: '' }, 'user'],
    ],
  },
  sudoers_file: { good: { name: 'deploy', content: 'deploy ALL=(root) NOPASSWD: /usr/bin/true\n' }, bad: [[{ name: 'deploy.conf' }, 'name'], [{ name: 'x~' }, 'name'], [{ content: '  \n' }, 'content'], [{ mode: '0644' }, 'mode']] },
  systemd_unit_file: {
    good: { unit: 'app@.service', dropin: 'override', content: '[Service]\nRestart=always\n', mode: '0644' },
    bad: [[{ unit: 'app' }, 'unit'], [{ unit: '../app.service' }, 'unit'], [{ dropin: '../x' }, 'dropin'], [{ content: undefined }, 'content']],
  },
  timezone: { good: { name: 'America/Argentina/Buenos_Aires' }, bad: [[{ name: '../etc/passwd' }, 'name'], [{ name: 'Europe/../../x' }, 'name'], [{ localtime: 'localtime' }, 'localtime']] },
  apt_repository: {
    good: { name: 'pgdg', uris: ['https://apt.postgresql.org/pub/repos/apt'], suites: 'bookworm-pgdg', components: ['main'], key: PGP, types: ['deb', 'deb-src'] },
    bad: [
      [{ name: '../x' }, 'name'], [{ uris: [] }, 'uris'], [{ uris: ['not a uri'] }, 'uris.0'], [{ components: [] }, 'components'], [{ suites: ['./', 'x'] }, 'suites'],
      [{ key: 'ssh-rsa AAAA' }, 'key'], [{ key: undefined }, 'key'], [{ types: ['rpm'] }, 'types.0'], [{ enabled: 'no' }, 'enabled'],
    ],
  },
  yum_repository: {
    good: { name: 'pgdg16', baseurl: 'https://download.postgresql.org/pub/repos/yum/16/redhat/rhel-9-x86_64', gpgkey: PGP, priority: 5, options: { sslverify: false } },
    bad: [
      [{ baseurl: undefined }, 'baseurl'], [{ metalink: 'https://m.example.org/x' }, 'baseurl'], [{ baseurl: 'repo.example.org' }, 'baseurl.0'],
      [{ gpgkey: 'ftp:// bad' }, 'gpgkey.0'], [{ priority: 100 }, 'priority'], [{ options: { enabled: 0 } }, 'options.enabled'], [{ name: 'a b' }, 'name'],
    ],
  },
};

t.test('every file-writing method: good parameters pass, each bad one names its field', async (t) => {
  for (const [method, c] of Object.entries(CASES)) {
    t.ok(METHOD_SPECS.has(method), `${method} is registered`);
    t.doesNotThrow(() => validateMethodParams(method, c.good), `${method}: good`);
    for (const [change, field] of c.bad) {
      const params = Object.fromEntries(Object.entries({ ...c.good, ...change }).filter(([, v]) => v !== undefined));
      t.throws(() => validateMethodParams(method, params), { code: 'ERR_METHOD_PARAMS', details: { method, field } }, `${method}: ${JSON.stringify(change)} → ${field}`);
    }
    t.throws(() => validateMethodParams(method, { ...c.good, colour: 'red' }), { code: 'ERR_METHOD_PARAMS', details: { field: 'colour' } }, `${method}: an unknown field`);
  }
});

t.test('every file-writing method takes show_diff, a boolean, and names it when refused', async (t) => {
  for (const [method, c] of Object.entries(CASES)) {
    const spec = METHOD_SPECS.get(method)!;
    const { show_diff: _, ...good } = c.good;
    t.equal(spec.validate(good).show_diff, undefined, `${method}: absent stays absent`);
    for (const v of [true, false]) t.equal(spec.validate({ ...good, show_diff: v }).show_diff, v, `${method}: ${v}`);
    t.throws(() => validateMethodParams(method, { ...good, show_diff: 'false' }), { code: 'ERR_METHOD_PARAMS', details: { field: 'show_diff' } }, `${method}: "false"`);
  }
});

t.test('defaults: each named file in its usual place, the rest as documented', async (t) => {
  const v = (m: string, p: Record<string, unknown>) => METHOD_SPECS.get(m)!.validate(p);
  t.match(v('cron_entry', { name: 'x', schedule: '@daily', user: 'root', command: 'true' }), { path: '/etc/cron.d/x', env: {} });
  t.match(v('sudoers_file', { name: 'ops', content: 'x' }), { path: '/etc/sudoers.d/ops' });
  t.match(v('systemd_unit_file', { unit: 'app.service', content: '' }), { path: '/etc/systemd/system/app.service' });
  t.match(v('systemd_unit_file', { unit: 'app.service', dropin: 'limits.conf', content: '' }), { path: '/etc/systemd/system/app.service.d/limits.conf', dropin: 'limits' });
  t.match(v('apt_repository', { name: 'pgdg', uris: 'https://x.example', suites: 'stable', components: 'main', key: PGP }), {
    path: '/etc/apt/sources.list.d/pgdg.sources', signed_by: '/etc/apt/keyrings/pgdg.asc', types: ['deb'], enabled: true, update: true,
  });
  t.match(v('yum_repository', { name: 'r', baseurl: 'https://x.example/r', gpgkey: PGP }), {
    path: '/etc/yum.repos.d/r.repo', key_path: '/etc/pki/rpm-gpg/RPM-GPG-KEY-r', description: 'r', gpgkey: { text: `${PGP}\n` }, enabled: true, gpgcheck: true,
  });
  t.match(v('timezone', { name: 'UTC' }), { zoneinfo: '/usr/share/zoneinfo', localtime: '/etc/localtime', timezone_file: undefined });
  t.match(v('file_block_present', { path: '/x', name: 'n', block: 'a\nb\n' }), { lines: ['a', 'b'], state: 'present', marker_begin: '# BEGIN CAPSTAN MANAGED BLOCK n', marker_end: '# END CAPSTAN MANAGED BLOCK n' });
  t.match(v('file_key_value', { path: '/x', values: { a: 1 } }), { separator: ' ', comment: '#', key_fields: 1, case_insensitive: false, absent: [] });
  t.match(v('ini_value', { path: '/x', section: '', key: 'k', value: 1 }), { separator: ' = ', state: 'present', value: '1' });
  t.match(v('file_replace', { path: '/x', pattern: 'a', replacement: 'b' }), { flags: 'm' });
  t.match(v('ssh_authorized_key', { user: 'u', key: KEY }), { state: 'present', exclusive: false, key: { type: 'ssh-ed25519', comment: 'alice@laptop' } });
});

t.test('components: the agent\'s component and key for each method, also for a template saved without content', async (t) => {
  t.same(expectedComponents('file_from_template', { path: '/etc/app.conf', template: '{{x}}' }), [{ component: 'File from template', key: '/etc/app.conf' }]);
  t.same(expectedComponents('file_from_template', { path: '/etc/app.conf', source: 'tpl/app.conf.mustache', content: 'rendered' }), [{ component: 'File from template', key: '/etc/app.conf' }]);
  t.same(expectedComponents('file_block_present', { path: '/etc/hosts', name: 'cluster', block: '' }), [{ component: 'File block', key: '/etc/hosts: cluster' }]);
  t.same(expectedComponents('file_key_value', { path: '/etc/ssh/sshd_config', values: { a: 'b' } }), [{ component: 'File key values', key: '/etc/ssh/sshd_config' }]);
  t.same(expectedComponents('ini_value', { path: '/etc/a.ini', section: 's', key: 'k', value: 'v' }), [{ component: 'INI value', key: '/etc/a.ini: [s] k' }]);
  t.same(expectedComponents('ini_value', { path: '/etc/a.ini', section: '', key: 'k', value: 'v' }), [{ component: 'INI value', key: '/etc/a.ini: k' }]);
  t.same(expectedComponents('file_replace', { path: '/etc/x', pattern: 'a', replacement: 'b' }), [{ component: 'File replace', key: '/etc/x: a' }]);
  t.same(expectedComponents('symlink_present', { path: '/etc/x/', target: 'y' }), [{ component: 'Symlink', key: '/etc/x' }]);
  t.same(expectedComponents('cron_entry', { name: 'b', schedule: '@daily', user: 'root', command: 'x' }), [{ component: 'Cron entry', key: 'b' }]);
  t.same(expectedComponents('ssh_authorized_key', { user: 'alice', key: KEY }), [{ component: 'SSH authorized key', key: 'alice: SHA256:zUh2oi6HWZoNakCzxJuKY50Zvt13mQfxq9Xnx6bAdZU' }], 'the fingerprint ssh-keygen -l prints');
  t.same(expectedComponents('timezone', { name: 'UTC' }), [{ component: 'Timezone', key: 'UTC' }]);
  t.same(expectedComponents('apt_repository', { name: 'a', uris: 'https://x', suites: 's', components: 'c', signed_by: '/k' }), [{ component: 'APT repository', key: 'a' }]);
  t.same(expectedComponents('yum_repository', { name: 'r', baseurl: 'https://x/r' }), [{ component: 'YUM repository', key: 'r' }]);
});
