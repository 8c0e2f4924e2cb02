/**
 * cron_entry, ssh_authorized_key, sudoers_file and systemd_unit_file on temporary paths. visudo
 * is the real one where installed (in CI: .ci/run installs sudo), and a recording fake besides;
 * systemctl is a fake that remembers what it loaded, as systemd's NeedDaemonReload does.
 */
import { randomBytes } from 'node:crypto';
import { access, chmod, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { requiredInCi } from '../helpers/programs.js';
import { applyMethod, driftCycle, fakeTools, snapshot } from '../helpers/methods.js';

const me = userInfo();
const group = (await readFile('/etc/group', 'utf8')).split('\n').find((l) => l.split(':')[2] === String(me.gid))?.split(':')[0] ?? String(me.gid);

t.test('cron_entry writes one entry per file, root-owned 0644, environment sorted', async (t) => {
  if (me.uid !== 0) return void t.comment('cron_entry skipped: its files are root:root, which needs root');
  const dir = t.testdir();
  const path = join(dir, 'backup');
  const params = { name: 'backup', path, schedule: '30 2 * * mon-fri', user: 'root', command: '/usr/local/bin/backup --quiet', env: { PATH: '/usr/bin:/bin', MAILTO: 'ops@example.org' } };
  const out = await driftCycle(t, dir, 'cron_entry', params);
  t.match(out, { component: 'Cron entry', key: 'backup' });
  t.equal(await readFile(path, 'utf8'), '# Managed by Capstan (cron_entry backup): changes made here are overwritten.\nMAILTO=ops@example.org\nPATH=/usr/bin:/bin\n30 2 * * mon-fri root /usr/local/bin/backup --quiet\n');
  t.match(await stat(path), { mode: 0o100644, uid: 0, gid: 0 });
  const moved = await driftCycle(t, dir, 'cron_entry', { ...params, schedule: '@daily' });
  t.match(moved.diff?.diff, /-30 2 \* \* mon-fri root .*\n\+@daily root /);
  await chmod(path, 0o666);
  t.match(await driftCycle(t, dir, 'cron_entry', { ...params, schedule: '@daily' }), { diff: { diff: 'mode 0666 → 0644\n' } }, 'a writable cron file is made private again');
});

/** An SSH public key line of `type` with random key bytes (the blob's own type field matches). */
function keyLine(type: string, comment?: string): string {
  const field = (b: Buffer) => Buffer.concat([Buffer.from([0, 0, 0, b.length]), b]);
  const blob = Buffer.concat([field(Buffer.from(type)), field(randomBytes(32))]).toString('base64');
  return `${type} ${blob}${comment ? ` ${comment}` : ''}`;
}

t.test('ssh_authorized_key creates ~/.ssh 0700 and authorized_keys 0600 for the user', async (t) => {
  const dir = t.testdir();
  const path = join(dir, 'home', '.ssh', 'authorized_keys');
  const key = keyLine('ssh-ed25519', 'alice@laptop');
  const out = await driftCycle(t, dir, 'ssh_authorized_key', { user: me.username, key, path });
  t.match(out.key, new RegExp(`^${me.username}: SHA256:[A-Za-z0-9+/]{43}$`), 'keyed by user and fingerprint');
  t.equal(await readFile(path, 'utf8'), `${key}\n`);
  t.match(await stat(join(dir, 'home', '.ssh')), { mode: 0o40700, uid: me.uid, gid: me.gid });
  t.match(await stat(path), { mode: 0o100600, uid: me.uid, gid: me.gid });
  t.match(out.diff?.diff, new RegExp(`^created directory ${join(dir, 'home', '.ssh')} \\(mode 0700\\)\ncreated ${path} \\(mode 0600, owner ${me.username}:${group}\\)\n`));
});

t.test('ssh_authorized_key edits only its own key: options set in place, duplicates dropped, others kept', async (t) => {
  const mine = keyLine('ssh-ed25519', 'deploy');
  const other = keyLine('ecdsa-sha2-nistp256', 'bob');
  const blob = mine.split(' ')[1];
  const dir = t.testdir({ authorized_keys: `# team keys\n${other}\nno-pty ssh-ed25519 ${blob} old-comment\n${mine}\n` });
  const path = join(dir, 'authorized_keys');
  await chmod(path, 0o600);
  const params = { user: me.username, key: mine, options: 'from="10.0.0.0/8",command="/usr/bin/rrsync -ro /srv"', path };
  await driftCycle(t, dir, 'ssh_authorized_key', params);
  t.equal(await readFile(path, 'utf8'), `# team keys\n${other}\n${params.options} ${mine}\n`);
  await driftCycle(t, dir, 'ssh_authorized_key', { ...params, state: 'absent', options: undefined });
  t.equal(await readFile(path, 'utf8'), `# team keys\n${other}\n`);
});

t.test('ssh_authorized_key exclusive keeps only the keys the policy puts in the file', async (t) => {
  const [a, b, stranger] = [keyLine('ssh-ed25519', 'a'), keyLine('sk-ssh-ed25519@openssh.com', 'b'), keyLine('ssh-rsa', 'stranger')];
  const dir = t.testdir({ authorized_keys: `# comment stays\n${stranger}\nssh-dss AAAAB3NzaC1kc3MAAACBAP old-dsa\n${b}\n` });
  const path = join(dir, 'authorized_keys');
  await chmod(path, 0o600);
  const siblings = [
    { method: 'ssh_authorized_key', params: { user: me.username, key: a, path, exclusive: true } },
    { method: 'ssh_authorized_key', params: { user: me.username, key: b, path } },
    { method: 'ssh_authorized_key', params: { user: me.username, key: stranger, path: join(dir, 'elsewhere') } },
  ];
  await driftCycle(t, dir, 'ssh_authorized_key', siblings[0]!.params, { siblings });
  t.equal(await readFile(path, 'utf8'), `# comment stays\n${b}\n${a}\n`, 'the stranger (another file) and an unknown key type are gone');
});

t.test('ssh_authorized_key finds the file in the user\'s home from /etc/passwd, and refuses unknown users', async (t) => {
  const home = (await readFile('/etc/passwd', 'utf8')).split('\n').find((l) => l.startsWith(`${me.username}:`))!.split(':')[5]!;
  // Audit only: the user's real home is read, never written.
  const look = await applyMethod('ssh_authorized_key', { user: me.username, key: keyLine('ssh-ed25519') }, 'audit');
  t.not(look.status, 'repaired');
  t.match(look.message, `${home.replace(/\/$/, '')}/.ssh`);
  t.match(await applyMethod('ssh_authorized_key', { user: 'no-such-user-capstan', key: keyLine('ssh-ed25519'), path: '/nonexistent/x' }, 'enforce'), { status: 'error', code: 'ERR_ACCOUNT_UNKNOWN' });
});

/** visudo where the host has it; a reason (false: none) otherwise, which CI does not accept. */
async function realVisudo(): Promise<string | false> {
  for (const p of ['/usr/sbin/visudo', '/usr/bin/visudo']) if (await access(p).then(() => true, () => false)) return false;
  return requiredInCi('visudo not found (Debian package sudo)');
}

t.test('sudoers_file: a candidate visudo refuses is an error and the old file stays', async (t) => {
  const dir = t.testdir({ 'sudoers.d': {} });
  // A fake visudo that refuses any file holding "BAD", as the real one refuses a syntax error.
  const fake = await fakeTools(dir, { visudo: `for f; do :; done\nif grep -q BAD "$f"; then echo "$f:1:5: syntax error" >&2; exit 1; fi\necho "$f: parsed OK"` });
  const path = join(dir, 'sudoers.d', 'backup');
  const params = { name: 'backup', path, content: 'backup ALL=(root) NOPASSWD: /usr/bin/rsync' };
  const out = await driftCycle(t, join(dir, 'sudoers.d'), 'sudoers_file', params, { env: fake.env });
  t.match(out, { component: 'Sudoers file', key: 'backup' });
  t.equal(await readFile(path, 'utf8'), `${params.content}\n`, 'a final newline, which sudo needs');
  t.match(await stat(path), { mode: 0o100440 });
  const checked = (await fake.calls()).filter((c) => c.startsWith('visudo'));
  t.equal(checked.length, 1, 'checked once, when written');
  t.match(checked[0], new RegExp(`^visudo\t-cf\t${path}\\.capstan-[0-9a-f]{12}\\.tmp$`), 'the candidate beside the file, before the rename');
  const bad = await applyMethod('sudoers_file', { ...params, content: 'BAD line\n' }, 'enforce', { env: fake.env });
  t.match(bad, { status: 'error', code: 'ERR_FILE_VALIDATE', message: /syntax error/ });
  t.equal(await readFile(path, 'utf8'), `${params.content}\n`, 'the old file stays');
  t.same(await readdir(join(dir, 'sudoers.d')), ['backup'], 'no candidate left behind');
});

t.test('sudoers_file with the real visudo', async (t) => {
  const why = await realVisudo();
  if (why) return void t.comment(`skipped: ${why}`);
  const dir = t.testdir({ 'sudoers.d': {} });
  const path = join(dir, 'sudoers.d', 'deploy');
  const env = { ...process.env, PATH: `/usr/sbin:/usr/bin:/sbin:/bin` };
  const good = 'Defaults:deploy !requiretty\ndeploy ALL=(root) NOPASSWD: /usr/bin/systemctl restart app.service\n';
  await driftCycle(t, dir, 'sudoers_file', { name: 'deploy', path, content: good }, { env });
  const before = await snapshot(dir);
  const bad = await applyMethod('sudoers_file', { name: 'deploy', path, content: 'deploy ALL=(root NOPASSWD /usr/bin/true\n' }, 'enforce', { env });
  t.match(bad, { status: 'error', code: 'ERR_FILE_VALIDATE' });
  t.same(await snapshot(dir), before, 'the old file stays as it was');
});

/** A systemctl that loads the unit file on daemon-reload and says NeedDaemonReload when the file differs from what it loaded. */
async function fakeSystemd(dir: string, unitPath: string) {
  const state = join(dir, 'systemd-state');
  return fakeTools(dir, {
    systemctl: `mkdir -p '${state}'
case "$1" in
  show) if [ ! -e '${unitPath}' ] && [ ! -e '${state}/loaded' ]; then echo no; elif cmp -s '${unitPath}' '${state}/loaded'; then echo no; else echo yes; fi;;
  daemon-reload) if [ -e '${state}/fail' ]; then echo 'Failed to reload daemon: Access denied' >&2; exit 1; fi; cp '${unitPath}' '${state}/loaded';;
  *) exit 2;;
esac`,
  });
}

t.test('systemd_unit_file reloads systemd when the file changed, and again next run when a reload failed', async (t) => {
  const dir = t.testdir({ etc: {} });
  const path = join(dir, 'etc', 'app.service');
  const fake = await fakeSystemd(dir, path);
  const reloads = async () => (await fake.calls()).filter((c) => c === 'systemctl\tdaemon-reload').length;
  const params = { unit: 'app.service', path, content: '[Service]\nExecStart=/usr/bin/app\n' };
  const out = await driftCycle(t, join(dir, 'etc'), 'systemd_unit_file', params, { env: fake.env });
  t.match(out, { component: 'Systemd unit file', key: 'app.service' });
  t.equal(await reloads(), 1, 'one reload, for the write');
  t.equal(await readFile(path, 'utf8'), params.content);

  await writeFile(join(dir, 'systemd-state', 'fail'), '');
  const failed = await applyMethod('systemd_unit_file', { ...params, content: '[Service]\nExecStart=/usr/bin/app --v2\n' }, 'enforce', { env: fake.env });
  t.match(failed, { status: 'error', code: 'ERR_COMMAND_FAILED', message: /Access denied/ });
  t.equal(await readFile(path, 'utf8'), '[Service]\nExecStart=/usr/bin/app --v2\n', 'the file is written; systemd has the old one');
  t.match(await applyMethod('systemd_unit_file', { ...params, content: '[Service]\nExecStart=/usr/bin/app --v2\n' }, 'audit', { env: fake.env }), { status: 'noncompliant', message: /has not reloaded/ });
  await rm(join(dir, 'systemd-state', 'fail'));
  const retried = await applyMethod('systemd_unit_file', { ...params, content: '[Service]\nExecStart=/usr/bin/app --v2\n' }, 'enforce', { env: fake.env });
  t.match(retried, { status: 'repaired', message: /has not reloaded/ }, 'the next run reloads');
  t.equal((await applyMethod('systemd_unit_file', { ...params, content: '[Service]\nExecStart=/usr/bin/app --v2\n' }, 'enforce', { env: fake.env })).status, 'success');
});

t.test('systemd_unit_file writes a drop-in under <unit>.d', async (t) => {
  const { METHODS } = await import('@capstan/agent/methods/index');
  const p = METHODS.get('systemd_unit_file')!.validate({ unit: 'nginx.service', dropin: 'limits', content: '[Service]\nLimitNOFILE=65536\n' });
  t.match(p, { path: '/etc/systemd/system/nginx.service.d/limits.conf' });
  t.same(METHODS.get('systemd_unit_file')!.components(p), [{ component: 'Systemd unit file', key: 'nginx.service.d/limits.conf' }]);
  const dir = t.testdir({ etc: {} });
  const path = join(dir, 'etc', 'nginx.service.d', 'limits.conf');
  const fake = await fakeSystemd(dir, path);
  await driftCycle(t, join(dir, 'etc'), 'systemd_unit_file', { unit: 'nginx.service', dropin: 'limits.conf', path, content: '[Service]\nLimitNOFILE=65536\n' }, { env: fake.env });
  t.same((await fake.calls()).filter((c) => !c.startsWith('systemctl\tshow')), ['systemctl\tdaemon-reload']);
});
