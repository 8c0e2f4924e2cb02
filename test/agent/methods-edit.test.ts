/**
 * file_from_template, file_block_present, file_key_value, ini_value and file_replace on temporary
 * files: each drift case goes through audit, dry run, enforce and a second run (driftCycle), then
 * the file is compared with what the method must have written; refusals carry their codes.
 */
import { chmod, readdir, readFile, stat, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { applyMethod, driftCycle, snapshot } from '../helpers/methods.js';

interface Case {
  name: string;
  method: string;
  /** The file before (absent: no file). */
  before?: string;
  params: Record<string, unknown>;
  /** The file after the repair. */
  after: string;
}

const SSHD = `# sshd_config
Port 22
#PermitRootLogin prohibit-password
PermitRootLogin yes
passwordauthentication yes
X11Forwarding yes
PermitRootLogin without-password
Match User backup
    PasswordAuthentication yes
`;

const CASES: Case[] = [
  {
    name: 'file_from_template writes the rendered content, creating the file',
    method: 'file_from_template',
    params: { content: 'worker_processes 4;\n', template: 'worker_processes {{workers}};\n', mode: '0640' },
    after: 'worker_processes 4;\n',
  },
  {
    name: 'file_from_template replaces content that differs',
    method: 'file_from_template',
    before: 'old\n',
    params: { content: 'new\n', source: 'templates/app.conf.mustache' },
    after: 'new\n',
  },
  {
    name: 'file_block_present appends a block at the end, on its own line',
    method: 'file_block_present',
    before: 'a\nb',
    params: { name: 'hosts', block: '10.0.0.1 db\n10.0.0.2 cache\n' },
    after: 'a\nb\n# BEGIN CAPSTAN MANAGED BLOCK hosts\n10.0.0.1 db\n10.0.0.2 cache\n# END CAPSTAN MANAGED BLOCK hosts\n',
  },
  {
    name: 'file_block_present replaces a changed block in place and removes a second copy',
    method: 'file_block_present',
    before: 'top\n# BEGIN CAPSTAN MANAGED BLOCK x\nold\n# END CAPSTAN MANAGED BLOCK x\nmiddle\n# BEGIN CAPSTAN MANAGED BLOCK x\nold\n# END CAPSTAN MANAGED BLOCK x\nend\n',
    params: { name: 'x', block: 'new' },
    after: 'top\n# BEGIN CAPSTAN MANAGED BLOCK x\nnew\n# END CAPSTAN MANAGED BLOCK x\nmiddle\nend\n',
  },
  {
    name: 'file_block_present puts a new block before the first line matching insert_before',
    method: 'file_block_present',
    before: SSHD,
    params: { name: 'hardening', block: 'MaxAuthTries 3', insert_before: '^Match\\s' },
    after: SSHD.replace('Match User', '# BEGIN CAPSTAN MANAGED BLOCK hardening\nMaxAuthTries 3\n# END CAPSTAN MANAGED BLOCK hardening\nMatch User'),
  },
  {
    name: 'file_block_present puts a new block after the last line matching insert_after, with its own markers',
    method: 'file_block_present',
    before: 'server {\n  listen 80;\n  listen 443;\n}\n',
    params: { name: 'tls', block: '  ssl_protocols TLSv1.3;', insert_after: '^\\s*listen ', marker_begin: '  # {tls', marker_end: '  # tls}' },
    after: 'server {\n  listen 80;\n  listen 443;\n  # {tls\n  ssl_protocols TLSv1.3;\n  # tls}\n}\n',
  },
  {
    name: 'file_block_present with state absent removes the block and its markers',
    method: 'file_block_present',
    before: 'a\n# BEGIN CAPSTAN MANAGED BLOCK x\nold\n# END CAPSTAN MANAGED BLOCK x\nb\n',
    params: { name: 'x', state: 'absent' },
    after: 'a\nb\n',
  },
  {
    name: 'file_key_value edits sshd_config: first line in place, later duplicates removed, commented defaults kept, new keys before Match',
    method: 'file_key_value',
    before: SSHD,
    params: { values: { PermitRootLogin: 'no', PasswordAuthentication: 'no', MaxAuthTries: 3 }, absent: ['X11Forwarding'], case_insensitive: true, insert_before: '^Match\\s' },
    after: '# sshd_config\nPort 22\n#PermitRootLogin prohibit-password\nPermitRootLogin no\nPasswordAuthentication no\nMaxAuthTries 3\nMatch User backup\n    PasswordAuthentication yes\n',
  },
  {
    name: 'file_key_value creates a sysctl.d file with "=" settings',
    method: 'file_key_value',
    params: { separator: ' = ', values: { 'net.ipv4.ip_forward': 1, 'vm.swappiness': '10' } },
    after: 'net.ipv4.ip_forward = 1\nvm.swappiness = 10\n',
  },
  {
    name: 'file_key_value reads "key=value" and "key = value" alike, and the last duplicate no longer wins',
    method: 'file_key_value',
    before: 'vm.swappiness=60\nkernel.panic = 10\nvm.swappiness = 30\n',
    params: { separator: '=', values: { 'vm.swappiness': 10, 'kernel.panic': 10 } },
    after: 'vm.swappiness=10\nkernel.panic = 10\n',
  },
  {
    name: 'file_key_value manages limits.conf lines by their first three fields',
    method: 'file_key_value',
    before: '# /etc/security/limits.conf\n*   soft   nofile   1024\n*   hard   nofile   4096\n@db soft nproc 100\n',
    params: { key_fields: 3, values: { '* soft nofile': 65536, '* hard nofile': 4096, 'postgres - memlock': 'unlimited' } },
    after: '# /etc/security/limits.conf\n* soft nofile 65536\n*   hard   nofile   4096\n@db soft nproc 100\npostgres - memlock unlimited\n',
  },
  {
    name: 'file_key_value keeps quotes as part of the value (/etc/default/grub)',
    method: 'file_key_value',
    before: 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX="quiet"\n',
    params: { separator: '=', values: { GRUB_CMDLINE_LINUX: '"quiet audit=1"', GRUB_TIMEOUT: 5 } },
    after: 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX="quiet audit=1"\nGRUB_TIMEOUT=5\n',
  },
  {
    name: 'ini_value sets a key in place in its section, leaving the same key of other sections alone',
    method: 'ini_value',
    before: '[client]\nport = 3306\n\n[mysqld]\nport = 3306\nbind-address = 127.0.0.1\n',
    params: { section: 'mysqld', key: 'port', value: 3307 },
    after: '[client]\nport = 3306\n\n[mysqld]\nport = 3307\nbind-address = 127.0.0.1\n',
  },
  {
    name: 'ini_value adds a missing key after the last setting of its section, before the blank line',
    method: 'ini_value',
    before: '[a]\nx = 1\n\n[b]\ny = 2\n',
    params: { section: 'a', key: 'z', value: 'on' },
    after: '[a]\nx = 1\nz = on\n\n[b]\ny = 2\n',
  },
  {
    name: 'ini_value appends a missing section',
    method: 'ini_value',
    before: '[a]\nx = 1\n',
    params: { section: 'new', key: 'k', value: 'v', separator: '=' },
    after: '[a]\nx = 1\n\n[new]\nk=v\n',
  },
  {
    name: 'ini_value manages keys before any section with section ""',
    method: 'ini_value',
    before: '; global\n[s]\nk = 1\n',
    params: { section: '', key: 'include', value: '/etc/app.d' },
    after: '; global\ninclude = /etc/app.d\n[s]\nk = 1\n',
  },
  {
    name: 'ini_value with state absent removes every line of the key in its section',
    method: 'ini_value',
    before: '[s]\nk = 1\nother = 2\nk = 3\n[t]\nk = 4\n',
    params: { section: 's', key: 'k', state: 'absent' },
    after: '[s]\nother = 2\n[t]\nk = 4\n',
  },
  {
    name: 'file_replace replaces every match with groups, and is compliant once replaced',
    method: 'file_replace',
    before: 'listen 80;\nlisten 8080;\n# listen 80;\n',
    params: { pattern: '^listen (\\d+);$', replacement: 'listen 127.0.0.1:$1;' },
    after: 'listen 127.0.0.1:80;\nlisten 127.0.0.1:8080;\n# listen 80;\n',
  },
  {
    name: 'file_replace with a pattern that still matches what it wrote converges (a fixed point)',
    method: 'file_replace',
    before: '#PermitRootLogin yes\nPermitRootLogin yes\n',
    params: { pattern: '^#?PermitRootLogin .*$', replacement: 'PermitRootLogin no' },
    after: 'PermitRootLogin no\nPermitRootLogin no\n',
  },
];

for (const c of CASES) {
  t.test(c.name, async (t) => {
    const dir = t.testdir(c.before === undefined ? {} : { file: c.before });
    const path = join(dir, 'file');
    await driftCycle(t, dir, c.method, { path, ...c.params });
    t.equal(await readFile(path, 'utf8'), c.after);
    t.same((await readdir(dir)).filter((n) => n.endsWith('.tmp')), [], 'no temporary file left');
  });
}

t.test('a file already as wanted is left byte for byte, CR line ends and a missing final newline included', async (t) => {
  const cases: Array<[string, string, Record<string, unknown>]> = [
    ['file_key_value', 'Port 22\r\nPermitRootLogin no', { values: { PermitRootLogin: 'no' } }],
    ['file_block_present', 'a\r\n# BEGIN CAPSTAN MANAGED BLOCK b\r\nx\r\n# END CAPSTAN MANAGED BLOCK b', { name: 'b', block: 'x' }],
    ['ini_value', '[s]\r\nk = v', { section: 's', key: 'k', value: 'v' }],
    ['file_replace', 'no match here', { pattern: 'absent', replacement: 'x' }],
  ];
  for (const [method, text, params] of cases) {
    const dir = t.testdir({ f: text });
    t.equal((await applyMethod(method, { path: join(dir, 'f'), ...params }, 'enforce')).status, 'success', method);
    t.equal(await readFile(join(dir, 'f'), 'utf8'), text, `${method}: untouched`);
  }
});

t.test('editing methods with nothing to remove from an absent file leave it absent', async (t) => {
  const dir = t.testdir();
  const path = join(dir, 'f');
  for (const [method, params] of [
    ['file_block_present', { name: 'b', state: 'absent' }],
    ['file_key_value', { absent: ['X11Forwarding'] }],
    ['ini_value', { section: 's', key: 'k', state: 'absent' }],
  ] as const) {
    t.equal((await applyMethod(method, { path, ...params }, 'enforce')).status, 'success', method);
  }
  t.same(await readdir(dir), [], 'nothing created');
});

t.test('the repair reports a unified diff of the file', async (t) => {
  const dir = t.testdir({ sshd: 'Port 22\nPermitRootLogin yes\n' });
  const path = join(dir, 'sshd');
  const out = await applyMethod('file_key_value', { path, values: { PermitRootLogin: 'no' } }, 'enforce');
  t.equal(out.diff?.diff, `--- a${path}\n+++ b${path}\n@@ -1,2 +1,2 @@\n Port 22\n-PermitRootLogin yes\n+PermitRootLogin no\n`);
  const created = await applyMethod('file_from_template', { path: join(dir, 'new'), content: 'x\n', mode: '0600' }, 'enforce');
  t.match(created.diff?.diff, new RegExp(`^created ${join(dir, 'new')} \\(mode 0600\\)\n--- /dev/null\n`), 'a created file says so, with its mode');
  const hidden = await applyMethod('file_block_present', { path, name: 'n', block: 'x', show_diff: false }, 'enforce');
  t.equal(hidden.status, 'repaired');
  t.equal(hidden.diff, undefined, 'show_diff false: no diff');
});

t.test('a validate command refusing the candidate is an error, and the old file stays', async (t) => {
  const dir = t.testdir({ 'app.conf': 'ok = 1\n' });
  const path = join(dir, 'app.conf');
  // A checker that reads the candidate it is given: only files with an "ok" line pass.
  const validate = ['sh', '-c', 'grep -q "^ok" "$1" || { echo "$1: no ok line" >&2; exit 3; }', 'check', '%s'];
  const bad = await applyMethod('file_from_template', { path, content: 'broken\n', validate }, 'enforce');
  t.match(bad, { status: 'error', code: 'ERR_FILE_VALIDATE', message: /exit 3.*no ok line/ });
  t.equal(await readFile(path, 'utf8'), 'ok = 1\n', 'the old file is untouched');
  t.same((await readdir(dir)).sort(), ['app.conf'], 'the refused candidate is removed');
  const good = await applyMethod('file_key_value', { path, separator: ' = ', values: { ok: 2 }, validate }, 'enforce');
  t.equal(good.status, 'repaired', 'a candidate the checker accepts is installed');
  t.equal(await readFile(path, 'utf8'), 'ok = 2\n');
  // The candidate the checker sees is the file to be: beside it, with its content and final mode.
  const seen = ['sh', '-c', 'test "$(dirname "$1")" = "$2" && test "$(stat -c %a "$1")" = 640 && grep -qx "ok = 3" "$1" || { echo "candidate $1 not ready" >&2; exit 4; }', 'check', '%s', dir];
  t.equal((await applyMethod('file_from_template', { path, content: 'ok = 3\n', mode: '0640', validate: seen }, 'enforce')).status, 'repaired');
  t.equal(await readFile(path, 'utf8'), 'ok = 3\n');
  const missing = await applyMethod('file_from_template', { path, content: 'x\n', validate: ['/nonexistent/checker', '%s'] }, 'enforce');
  t.match(missing, { status: 'error', code: 'ERR_FILE_VALIDATE' }, 'a checker that cannot run refuses too');
  t.equal(await readFile(path, 'utf8'), 'ok = 3\n');
});

t.test('mode, owner and group converge with the content, by name or id', async (t) => {
  const dir = t.testdir({ f: 'same\n' });
  const path = join(dir, 'f');
  await chmod(path, 0o644);
  const out = await driftCycle(t, dir, 'file_from_template', { path, content: 'same\n', mode: '0600', owner: 'root', group: 0 });
  t.match(out.diff?.diff, /^mode 0644 → 0600\n$/, 'only the mode changed: a mode line, no content diff');
  t.equal((await stat(path)).mode & 0o7777, 0o600);
  if (process.getuid?.() !== 0) return void t.comment('owner changes skipped: they need root');
  const chowned = await driftCycle(t, dir, 'file_from_template', { path, content: 'same\n', mode: '0600', owner: 4321, group: '4322' });
  t.equal(chowned.diff?.diff, 'owner root:root → 4321:4322\n');
  t.match(await stat(path), { uid: 4321, gid: 4322 });
  // A new content keeps the owner the file had.
  await applyMethod('file_from_template', { path, content: 'changed\n' }, 'enforce');
  t.match(await stat(path), { uid: 4321, gid: 4322, mode: 0o100600 });
});

t.test('an unknown owner or group name is an error naming it, and nothing is written', async (t) => {
  const dir = t.testdir();
  const path = join(dir, 'f');
  t.match(await applyMethod('file_from_template', { path, content: 'x', owner: 'no-such-user-capstan' }, 'enforce'), { status: 'error', code: 'ERR_ACCOUNT_UNKNOWN', message: /no-such-user-capstan/ });
  t.match(await applyMethod('file_from_template', { path, content: 'x', group: 'no-such-group-capstan' }, 'audit'), { status: 'error', code: 'ERR_ACCOUNT_UNKNOWN' });
  t.same(await readdir(dir), []);
});

t.test('a symbolic link at the managed path is never written through', async (t) => {
  const dir = t.testdir({ real: 'keep\n', sub: {} });
  await symlink(join(dir, 'real'), join(dir, 'link'));
  const before = await snapshot(dir);
  for (const [method, params] of [
    ['file_from_template', { content: 'x' }],
    ['file_block_present', { name: 'b', block: 'x' }],
    ['file_key_value', { values: { a: 'b' } }],
    ['ini_value', { section: 's', key: 'k', value: 'v' }],
    ['file_replace', { pattern: 'keep', replacement: 'x' }],
  ] as const) {
    const out = await applyMethod(method, { path: join(dir, 'link'), ...params }, 'enforce');
    t.match(out, { status: 'error', code: 'ERR_FILE_SYMLINK' }, method);
    t.ok(out.message.includes(`${join(dir, 'link')} is a symbolic link (to ${join(dir, 'real')})`), `${method}: the message names the link and its target`);
  }
  t.match(await applyMethod('file_from_template', { path: join(dir, 'sub'), content: 'x' }, 'enforce'), { status: 'error', code: 'ERR_FILE_TYPE' }, 'nor over a directory');
  t.same(await snapshot(dir), before, 'nothing changed');
});

t.test('file_from_template without rendered content is an error: the server renders it', async (t) => {
  const dir = t.testdir();
  const out = await applyMethod('file_from_template', { path: join(dir, 'f'), template: 'x = {{x}}\n' }, 'enforce');
  t.match(out, { status: 'error', code: 'ERR_METHOD_PARAMS', component: 'File from template', key: join(dir, 'f') });
  t.same(await readdir(dir), []);
});

t.test('edits refuse what they cannot edit safely, with their codes', async (t) => {
  const dir = t.testdir({
    unbalanced: 'a\n# BEGIN CAPSTAN MANAGED BLOCK b\nx\n',
    stray: '# END CAPSTAN MANAGED BLOCK b\n',
    binary: Buffer.from([0x61, 0x00, 0x62, 0x0a]),
    latin1: Buffer.from('caf\xe9\n', 'latin1'),
    backtrack: `${'a'.repeat(40)}!\n`,
  });
  const big = join(dir, 'big');
  await writeFile(big, Buffer.alloc(4 * 1024 * 1024 + 1, 'a'));
  const before = await snapshot(dir);
  const cases: Array<[string, string, Record<string, unknown>, string]> = [
    ['file_block_present', 'unbalanced', { name: 'b', block: 'y' }, 'ERR_FILE_MARKERS'],
    ['file_block_present', 'stray', { name: 'b', block: 'y' }, 'ERR_FILE_MARKERS'],
    ['file_key_value', 'binary', { values: { a: 'b' } }, 'ERR_FILE_NOT_TEXT'],
    ['ini_value', 'latin1', { section: '', key: 'k', value: 'v' }, 'ERR_FILE_NOT_TEXT'],
    ['file_replace', 'big', { pattern: 'a', replacement: 'b' }, 'ERR_FILE_TOO_LARGE'],
    ['file_replace', 'nothing-here', { pattern: 'a', replacement: 'b' }, 'ERR_FILE_MISSING'],
    // Exponential backtracking: bounded to 1 s, then an error for this directive alone.
    ['file_replace', 'backtrack', { pattern: '^(a+)+$', replacement: 'x' }, 'ERR_REGEX_TIMEOUT'],
    ['file_block_present', 'backtrack', { name: 'b', block: 'y', insert_after: '^(a|a)+$' }, 'ERR_REGEX_TIMEOUT'],
    // A replacement the pattern would change again (a → aa → aaa …) is refused before any write.
    ['file_replace', 'stray', { pattern: 'E', replacement: 'EE' }, 'ERR_METHOD_PARAMS'],
  ];
  for (const [method, file, params, code] of cases) {
    for (const look of ['audit', 'enforce'] as const) {
      t.match(await applyMethod(method, { path: join(dir, file), ...params }, look), { status: 'error', code }, `${method} on ${file} (${look}): ${code}`);
    }
  }
  t.same(await snapshot(dir), before, 'no file was changed');
});

t.test('a file in a missing directory is created with its parents', async (t) => {
  const dir = t.testdir();
  const path = join(dir, 'a', 'b', 'f.conf');
  await driftCycle(t, dir, 'ini_value', { path, section: 's', key: 'k', value: 'v' });
  t.equal(await readFile(path, 'utf8'), '[s]\nk = v\n');
});
