/**
 * Each generic method in enforce and audit mode, against temporary files and fake package and
 * service tools put first on PATH (a real package install would be unsafe on a test machine).
 */
import { chmod, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import t from 'tap';
import { testDiffSettings } from '../helpers/diff.js';
import { silentLogger } from '@capstan/shared';
import { METHODS, type MethodContext, type Outcome } from '@capstan/agent/methods/index';

function ctx(over: Partial<MethodContext> = {}): Omit<MethodContext, 'mode'> {
  return { dryRun: false, log: silentLogger, env: process.env, commandTimeoutMs: 10_000, sysctlRoot: '/proc/sys', fetchShared: async () => Buffer.alloc(0), diff: testDiffSettings(), ...over };
}

async function apply(method: string, params: Record<string, unknown>, mode: 'enforce' | 'audit', c = ctx()): Promise<Outcome> {
  const m = METHODS.get(method)!;
  const out = await m.apply(m.validate(params), { ...c, mode });
  return out[0]!;
}

t.test('file_content: audit reports drift, enforce repairs once, then stays compliant', async (t) => {
  const dir = t.testdir({ 'motd': 'old\n' });
  const path = join(dir, 'motd');
  const p = { path, content: 'hello\n', mode: '0640' };
  t.match(await apply('file_content', p, 'audit'), { status: 'noncompliant' });
  t.equal(await readFile(path, 'utf8'), 'old\n', 'audit changes nothing');
  t.match(await apply('file_content', p, 'enforce', ctx({ dryRun: true })), { status: 'noncompliant', message: /would repair/ });
  t.equal(await readFile(path, 'utf8'), 'old\n', 'a dry run changes nothing');
  t.match(await apply('file_content', p, 'enforce'), { status: 'repaired' });
  t.equal(await readFile(path, 'utf8'), 'hello\n');
  t.equal((await stat(path)).mode & 0o777, 0o640);
  t.match(await apply('file_content', p, 'enforce'), { status: 'success' }, 'idempotent');
  t.match(await apply('file_content', p, 'audit'), { status: 'compliant' });
  t.match(await apply('file_content', { path: join(dir, 'new', 'file'), content: 'x' }, 'enforce'), { status: 'repaired' }, 'creates parents');
});

t.test('file_line_present, file_absent, file_permissions, directory_present', async (t) => {
  const dir = t.testdir({ 'conf': 'a=1', 'gone': 'x', 'sub': {} });
  t.match(await apply('file_line_present', { path: join(dir, 'conf'), line: 'b=2' }, 'enforce'), { status: 'repaired' });
  t.equal(await readFile(join(dir, 'conf'), 'utf8'), 'a=1\nb=2\n', 'appended on its own line');
  t.match(await apply('file_line_present', { path: join(dir, 'conf'), line: 'b=2' }, 'enforce'), { status: 'success' });
  t.match(await apply('file_absent', { path: join(dir, 'gone') }, 'audit'), { status: 'noncompliant' });
  t.match(await apply('file_absent', { path: join(dir, 'gone') }, 'enforce'), { status: 'repaired' });
  t.match(await apply('file_absent', { path: join(dir, 'gone') }, 'enforce'), { status: 'success' });
  t.match(await apply('file_absent', { path: join(dir, 'sub') }, 'enforce'), { status: 'error' }, 'never removes a directory');
  await chmod(join(dir, 'conf'), 0o666);
  t.match(await apply('file_permissions', { path: join(dir, 'conf'), mode: '0600' }, 'enforce'), { status: 'repaired' });
  t.equal((await stat(join(dir, 'conf'))).mode & 0o777, 0o600);
  t.match(await apply('file_permissions', { path: join(dir, 'conf'), mode: '0600' }, 'enforce'), { status: 'success' });
  t.match(await apply('file_permissions', { path: join(dir, 'nope'), mode: '0600' }, 'enforce'), { status: 'error' });
  t.match(await apply('directory_present', { path: join(dir, 'a', 'b'), mode: '0750' }, 'enforce'), { status: 'repaired' });
  t.equal((await stat(join(dir, 'a', 'b'))).mode & 0o777, 0o750);
  t.match(await apply('directory_present', { path: join(dir, 'a', 'b'), mode: '0750' }, 'audit'), { status: 'compliant' });
});

t.test('file_from_shared_folder installs only bytes that match the signed hash', async (t) => {
  const dir = t.testdir();
  const good = Buffer.from('artifact v1\n');
  const sha = createHash('sha256').update(good).digest('hex');
  let served = good;
  const c = ctx({ fetchShared: async (p) => (p === 'app/conf' ? served : Promise.reject(new Error('404'))) });
  const p = { source: 'app/conf', path: join(dir, 'conf'), sha256: sha };
  t.match(await apply('file_from_shared_folder', p, 'enforce', c), { status: 'repaired' });
  t.same(await readFile(join(dir, 'conf')), good);
  t.match(await apply('file_from_shared_folder', p, 'enforce', c), { status: 'success' });
  await writeFile(join(dir, 'conf'), 'drifted');
  served = Buffer.from('tampered by a relay');
  t.match(await apply('file_from_shared_folder', p, 'enforce', c), { status: 'error', message: /does not match its sha256/ });
  t.equal(await readFile(join(dir, 'conf'), 'utf8'), 'drifted', 'nothing installed');
  t.throws(() => METHODS.get('file_from_shared_folder')!.validate({ ...p, source: '../etc/passwd' }), { code: 'ERR_METHOD_PARAMS' });
});

/** Fake dpkg-query/apt-get and systemctl keeping their state in files. */
async function fakeTools(dir: string): Promise<NodeJS.ProcessEnv> {
  const bin = join(dir, 'bin');
  await mkdir(bin);
  const state = join(dir, 'state');
  await mkdir(state);
  const scripts: Record<string, string> = {
    'dpkg-query': `#!/bin/sh\nfor last; do :; done\nif [ -f "${state}/pkg-$last" ]; then printf 'installed %s' "$(cat "${state}/pkg-$last")"; else echo "dpkg-query: no packages found matching $last" >&2; exit 1; fi\n`,
    'apt-get': `#!/bin/sh\ncmd=$1; for last; do :; done\nname=\${last%%=*}; ver=\${last#*=}; [ "$ver" = "$last" ] && ver=1.0\ncase $cmd in install) echo "$ver" > "${state}/pkg-$name";; remove) rm -f "${state}/pkg-$name";; esac\n`,
    systemctl: `#!/bin/sh\ncase $1 in is-active) [ -f "${state}/active-$3" ];; is-enabled) [ -f "${state}/enabled-$3" ];; start) touch "${state}/active-$2";; enable) touch "${state}/enabled-$2";; *) exit 2;; esac\n`,
  };
  for (const [name, body] of Object.entries(scripts)) {
    await writeFile(join(bin, name), body);
    await chmod(join(bin, name), 0o755);
  }
  return { ...process.env, PATH: `${bin}:/usr/bin:/bin` };
}

t.test('packages and services through the host tools (fakes on PATH)', async (t) => {
  const env = await fakeTools(t.testdir());
  const c = ctx({ env });
  t.match(await apply('package_present', { name: 'htop' }, 'audit', c), { status: 'noncompliant' });
  t.match(await apply('package_present', { name: 'htop' }, 'enforce', c), { status: 'repaired' });
  t.match(await apply('package_present', { name: 'htop' }, 'enforce', c), { status: 'success' });
  t.match(await apply('package_present', { name: 'htop', version: '2.0' }, 'enforce', c), { status: 'repaired', message: /1.0, not 2.0/ });
  t.match(await apply('package_absent', { name: 'htop' }, 'enforce', c), { status: 'repaired' });
  t.match(await apply('package_absent', { name: 'htop' }, 'enforce', c), { status: 'success' });
  t.throws(() => METHODS.get('package_present')!.validate({ name: '-oDpkg::x' }), { code: 'ERR_METHOD_PARAMS' }, 'no option injection');
  t.match(await apply('service_running', { name: 'nginx' }, 'enforce', c), { status: 'repaired' });
  t.match(await apply('service_running', { name: 'nginx' }, 'enforce', c), { status: 'success' });
  t.match(await apply('service_enabled', { name: 'nginx' }, 'audit', c), { status: 'noncompliant' });
  t.match(await apply('service_enabled', { name: 'nginx' }, 'enforce', c), { status: 'repaired' });
});

t.test('commands: command_check only looks; command_run needs a guard and runs when needed', async (t) => {
  const dir = t.testdir();
  t.match(await apply('command_check', { command: 'true' }, 'enforce'), { status: 'compliant' });
  t.match(await apply('command_check', { command: 'false' }, 'enforce'), { status: 'noncompliant' });
  t.match(await apply('command_check', { command: 'sh', args: ['-c', 'exit 3'], expect_exit: 3 }, 'audit'), { status: 'compliant' });
  t.match(await apply('command_check', { command: '/nonexistent/cmd' }, 'audit'), { status: 'error' });
  t.throws(() => METHODS.get('command_run')!.validate({ command: 'touch' }), { code: 'ERR_METHOD_PARAMS', message: /creates/ });
  const marker = join(dir, 'done');
  const p = { command: 'touch', args: [marker], creates: marker };
  t.match(await apply('command_run', p, 'audit'), { status: 'noncompliant' });
  t.match(await apply('command_run', p, 'enforce'), { status: 'repaired' });
  t.match(await apply('command_run', p, 'enforce'), { status: 'success' }, 'not run again');
  t.match(await apply('command_run', { command: 'false', unless: { command: 'false' } }, 'enforce'), { status: 'error' });
  const slow = await apply('command_run', { command: 'sleep', args: ['5'], unless: { command: 'false' } }, 'enforce', ctx({ commandTimeoutMs: 200 }));
  t.match(slow, { status: 'error', message: /timed out|exited/ }, 'bounded by the timeout');
});

t.test('sysctl_value reads and writes under the sysctl root', async (t) => {
  const root = t.testdir({ net: { ipv4: { ip_forward: '0\n' } } });
  const c = ctx({ sysctlRoot: root });
  t.match(await apply('sysctl_value', { key: 'net.ipv4.ip_forward', value: 1 }, 'audit', c), { status: 'noncompliant', message: /is 0, not 1/ });
  t.match(await apply('sysctl_value', { key: 'net.ipv4.ip_forward', value: 1 }, 'enforce', c), { status: 'repaired' });
  t.match(await apply('sysctl_value', { key: 'net.ipv4.ip_forward', value: '1' }, 'enforce', c), { status: 'success' });
  t.throws(() => METHODS.get('sysctl_value')!.validate({ key: '../../etc/passwd', value: 1 }), { code: 'ERR_METHOD_PARAMS' });
});

t.test('bad parameters are coded errors naming the field', async (t) => {
  t.throws(() => METHODS.get('file_content')!.validate({ path: 'relative', content: 'x' }), { code: 'ERR_METHOD_PARAMS', message: /path/ });
  t.throws(() => METHODS.get('file_content')!.validate({ path: '/x', content: 1 }), { code: 'ERR_METHOD_PARAMS', message: /content/ });
  t.throws(() => METHODS.get('file_content')!.validate({ path: '/x', content: 'x', mode: 'rwx' }), { code: 'ERR_METHOD_PARAMS', message: /mode/ });
  t.throws(() => METHODS.get('file_line_present')!.validate({ path: '/x', line: 'a\nb' }), { code: 'ERR_METHOD_PARAMS' });
});

t.test('files are replaced through an exclusive, unpredictable temporary name, and nothing is left behind', async (t) => {
  const { installFile } = await import('@capstan/agent/methods/files');
  const { readdir, symlink } = await import('node:fs/promises');
  const dir = t.testdir({ 'conf': 'old\n', 'victim': 'keep\n' });
  // The old fixed name (<path>.capstan-<pid>.tmp) could be planted as a symlink by anyone able to
  // write to the directory, and the write went through it.
  await symlink(join(dir, 'victim'), join(dir, `conf.capstan-${process.pid}.tmp`));
  await installFile(join(dir, 'conf'), 'new\n', 0o600);
  t.equal(await readFile(join(dir, 'conf'), 'utf8'), 'new\n');
  t.equal((await stat(join(dir, 'conf'))).mode & 0o777, 0o600);
  t.equal(await readFile(join(dir, 'victim'), 'utf8'), 'keep\n', 'the planted link was not followed');
  t.same((await readdir(dir)).sort(), ['conf', `conf.capstan-${process.pid}.tmp`, 'victim'].sort(), 'no temporary file of ours left');
  await mkdir(join(dir, 'adir'));
  await t.rejects(installFile(join(dir, 'adir'), 'x'), 'a directory is not replaced by a file');
  t.same((await readdir(dir)).filter((n) => n.startsWith('adir.')), [], 'the failed attempt left nothing');
});
