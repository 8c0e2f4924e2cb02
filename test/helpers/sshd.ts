/**
 * What the bootstrap end-to-end tests need of a real OpenSSH server and a node to install on:
 * Debian's sshd started as `sshd -D -f <config>` on a loopback port with a throwaway host key,
 * logging in the current user by an AuthorizedKeysFile in the test's directory; the agent package
 * as `npm run package` builds it; and a throwaway dpkg root standing for the node's `/`.
 * Nothing outside the test's directories changes.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { copyFile, mkdir, mkdtemp, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { userInfo } from 'node:os';
import { join, relative } from 'node:path';
import type { Test } from 'tap';
import { ROOT, waitFor } from './programs.js';

export const SSHD = '/usr/sbin/sshd';

export function sh(cmd: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(cmd, args, { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024, timeout: 240_000 }, (err, stdout, stderr) => {
      done({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : 127, stdout, stderr });
    });
  });
}

/** Why these tests cannot run here, or undefined when they can. */
export async function sshdSkipReason(): Promise<string | undefined> {
  if (!existsSync(SSHD)) return `${SSHD} is absent (Debian's openssh-server; .ci/run installs it)`;
  if ((await sh('sh', ['-c', 'command -v ssh-keygen && command -v dpkg-deb && command -v dpkg'])).code !== 0) return 'ssh-keygen, dpkg and dpkg-deb are needed';
  // As root, sshd needs its privilege separation directory (its service makes it; so does .ci/run).
  if (process.getuid?.() === 0 && !existsSync('/run/sshd')) return '/run/sshd is absent (sshd\'s privilege separation directory; .ci/run makes it)';
  return undefined;
}

export { freePort } from './ports.js';

/** Resolves once something answers the SSH banner on the port. */
function banner(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.setTimeout(1000, () => { s.destroy(); resolve(false); });
    s.once('data', (d) => { s.destroy(); resolve(d.toString().startsWith('SSH-2.0-')); });
    s.once('error', () => resolve(false));
  });
}

export interface Sshd { port: number; stop(): Promise<void> }

/** sshd -D on `port` with `hostKey`, logging in the current user with the keys in `authorizedKeys`. */
export async function startSshd(t: Test, dir: string, port: number, hostKey: string, authorizedKeys: string): Promise<Sshd> {
  const cfg = join(dir, `sshd_config.${port}.${Date.now()}`);
  // The sessions' HOME is an empty directory of the test's. Debian's bash, which runs each command
  // sent over SSH, reads $HOME/.bashrc for it: the rc file of whoever runs the tests (root's here
  // runs `pyenv init`, ~0.5 s of CPU for every command) is no part of the node being bootstrapped.
  const home = join(dir, 'ssh-home');
  await mkdir(home, { recursive: true });
  await writeFile(cfg, [
    `Port ${port}`, 'ListenAddress 127.0.0.1', `HostKey ${hostKey}`, `PidFile ${join(dir, 'sshd.pid')}`,
    `AuthorizedKeysFile ${authorizedKeys}`, 'StrictModes no', 'UsePAM no', 'PasswordAuthentication no',
    'KbdInteractiveAuthentication no', 'PermitRootLogin prohibit-password', `AllowUsers ${userInfo().username}`,
    `SetEnv HOME=${home}`, 'Subsystem sftp internal-sftp', 'LogLevel ERROR', '',
  ].join('\n'));
  const proc: ChildProcess = spawn(SSHD, ['-D', '-e', '-f', cfg], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const stop = () => new Promise<void>((r) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return r();
    proc.once('exit', () => r());
    proc.kill('SIGTERM');
  });
  t.teardown(stop);
  await waitFor(async () => {
    if (proc.exitCode !== null) throw new Error(`sshd exited ${proc.exitCode}: ${stderr}`);
    return (await banner(port)) ? true : undefined;
  }, `sshd on port ${port}`, 15_000);
  return { port, stop };
}

/** ed25519 key pairs `<dir>/<name>` (and .pub), no passphrase. */
export async function makeSshKeys(dir: string, names: string[]): Promise<void> {
  await mkdir(dir, { recursive: true });
  for (const k of names) {
    const r = await sh('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', `capstan-test-${k}`, '-f', join(dir, k)]);
    if (r.code !== 0) throw new Error(`ssh-keygen: ${r.stderr}`);
  }
}

/** `SHA256:…` of a public key file, as ssh-keygen -l prints it. */
export async function sshFingerprintOf(pubFile: string): Promise<string> {
  return (await sh('ssh-keygen', ['-l', '-E', 'sha256', '-f', pubFile])).stdout.split(' ')[1]!;
}

/** The agent package, built as `npm run package` builds it, into `dir`. */
export async function buildAgentPackage(dir: string): Promise<void> {
  // Built once per build of what goes into it (the bootstrap tests each need it): kept under
  // .tap/ by a key of those files' sizes and times, made in a directory of its own and renamed
  // into place, so a test that builds it beside another never reads half a package.
  const inputs = ['agent/dist', 'shared/dist', 'toolkit/dist', 'packaging', 'scripts/package.mjs', 'package-lock.json'];
  const hash = createHash('sha256');
  const walk = async (p: string): Promise<void> => {
    const st = await stat(p);
    hash.update(`${relative(ROOT, p)}\0${st.size}\0${st.mtimeMs}\n`);
    if (st.isDirectory()) for (const e of (await readdir(p)).sort()) await walk(join(p, e));
  };
  for (const i of inputs) await walk(join(ROOT, i));
  const cached = join(ROOT, '.tap', `agent-package-${hash.digest('hex').slice(0, 16)}`);
  if (!existsSync(cached)) {
    await mkdir(join(ROOT, '.tap'), { recursive: true });
    const tmp = await mkdtemp(join(ROOT, '.tap', 'agent-package-tmp-'));
    // gzip: these tests install the package, they do not weigh it (xz, the default, is the slowest to make).
    const built = await sh(process.execPath, [join(ROOT, 'scripts/package.mjs'), '--out', tmp, '--compression', 'gzip', 'agent']);
    if (built.code !== 0) throw new Error(`package.mjs: ${built.stderr}`);
    await rename(tmp, cached).catch(async (err: NodeJS.ErrnoException) => {
      // Another test put the same package there first.
      if (err.code !== 'ENOTEMPTY' && err.code !== 'EEXIST') throw err;
      await rm(tmp, { recursive: true, force: true });
    });
  }
  await mkdir(dir, { recursive: true });
  for (const f of await readdir(cached)) await copyFile(join(cached, f), join(dir, f));
}

/** A throwaway dpkg root standing for the node's `/` (the least dpkg needs: an empty database). */
export async function makeDpkgRoot(root: string): Promise<void> {
  for (const d of ['var/lib/dpkg/info', 'var/lib/dpkg/updates', 'var/lib/dpkg/triggers', 'var/log', 'etc']) await mkdir(join(root, d), { recursive: true });
  await writeFile(join(root, 'var/lib/dpkg/status'), '');
  await writeFile(join(root, 'var/lib/dpkg/available'), '');
}

/** The current user's authorized_keys file in `dir`, holding `pubFile`'s key. */
export async function authorizeKey(dir: string, pubFile: string): Promise<string> {
  const authorized = join(dir, 'authorized_keys');
  await writeFile(authorized, await readFile(pubFile, 'utf8'));
  return authorized;
}
