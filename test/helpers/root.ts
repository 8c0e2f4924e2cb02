/**
 * Throwaway roots: the machine's own `/` seen through an overlay whose upper layer is a test
 * directory, entered with chroot in private mount, UTS and PID namespaces (and a private network
 * unless asked otherwise). Inside, useradd, apt-get, dnf, mount, hostname and systemctl do their
 * real work, and all of it lands in the upper layer or in the namespaces: the host's files, mounts,
 * host name and processes are untouched (test/agent/throwaway-root.test.ts checks that).
 *
 *   const why = await rootSkipReason({ family: 'rpm' });  // undefined when this machine can; throws in CI
 *   const root = await throwawayRoot(t, { family: 'debian' | 'rpm', systemd?: true, network?: 'host' });
 *   await root.exec('id', ['app'])                         // { code, stdout, stderr }, never throws on exit codes
 *   await root.sh('useradd app && id app')                  // the same through /bin/sh -ec
 *   await root.method('user_present', { name: 'app' }, { mode: 'audit' })  // Outcome[], via method-driver.mjs
 *   await root.methods([{ method, params, mode }, …])     // Outcome[][]: several steps, one driver process
 *   await root.agent(['run', '--relay', url, '--state-dir', '/var/lib/capstan/agent'])  // the built agent
 *   root.upper                                              // the upper layer: every file the root changed
 *   root.pid, root.cgroup                                   // its PID 1 as the host sees it; a systemd root's cgroup
 *
 * `family: 'rpm'` takes dpkg's and apt's front ends out of the root (the agent then finds rpm),
 * points rpm at /var/lib/rpm and installs a release package so dnf knows its $releasever.
 * `systemd: true` boots systemd as the root's PID 1 (container mode, default unit a target with no
 * dependencies, /proc/sys and /sys read-only, a private network, a cgroup of its own made under
 * ours and removed at teardown), so systemctl really starts and stops units. `network: 'host'`
 * shares the host's network (a root whose agent talks to a loopback relay); not with systemd.
 * The root and everything in it is killed at the test's teardown; setpriv --pdeathsig makes it die
 * with the test process too, should that be killed first.
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, readlinkSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, rmdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import { BIN, programDir, requiredInCi, ROOT } from './programs.js';
import { familyScript, systemdUnits } from './root-setup.js';

export interface RootOptions {
  family?: 'debian' | 'rpm';
  systemd?: boolean;
  network?: 'private' | 'host';
}

export interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

export interface RootOutcome {
  component: string;
  key: string;
  status: string;
  message: string;
  diff?: { diff: string; truncated: boolean };
}

export interface StepOptions {
  mode?: 'enforce' | 'audit';
  dryRun?: boolean;
  /** Where the method reads `modules` (a fake under the root in tests of kernel_module_loaded). */
  procRoot?: string;
}

export interface Root {
  upper: string;
  /** The root's PID 1 as the host sees it (sleep, or systemd). */
  pid: number;
  /** A systemd root's cgroup (removed at teardown). */
  cgroup: string | null;
  exec(cmd: string, args?: string[], opts?: { input?: string; env?: Record<string, string>; timeoutMs?: number }): Promise<Ran>;
  sh(script: string): Promise<Ran>;
  method(method: string, params: Record<string, unknown>, opts?: StepOptions): Promise<RootOutcome[]>;
  /** Several steps in one driver process (each start of node costs ~0.5 s on a busy machine). */
  methods(steps: Array<{ method: string; params: Record<string, unknown> } & StepOptions>): Promise<RootOutcome[][]>;
  agent(args: string[]): Promise<Ran>;
}

export const DRIVER = join(ROOT, 'test/helpers/method-driver.mjs');
const PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

function sh(cmd: string, args: string[], input?: string, timeoutMs = 60_000): Promise<Ran> {
  return new Promise((done) => {
    const child = execFile(cmd, args, { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024, timeout: timeoutMs, env: { PATH, HOME: '/root', LANG: 'C.UTF-8' } }, (err, stdout, stderr) => {
      done({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : 127, stdout, stderr: stderr || (err && typeof err.code !== 'number' ? err.message : '') });
    });
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(input ?? '');
  });
}

const onPath = (tool: string) => PATH.split(':').some((d) => existsSync(join(d, tool)));

/** The cgroup2 directory this process is in, or null without a cgroup2 hierarchy. */
function ownCgroup(): string | null {
  const mount = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').map((l) => l.split(' ')).find((f) => f[f.indexOf('-') + 1] === 'cgroup2');
  const path = /^0::(.*)$/m.exec(readFileSync('/proc/self/cgroup', 'utf8'))?.[1];
  return mount && path !== undefined ? join(mount[4]!, path) : null;
}

let probed: Promise<string | undefined> | undefined;

/** Whether an overlay of / can be mounted in a new mount namespace here (tried once per process). */
function probeOverlay(): Promise<string | undefined> {
  probed ??= (async () => {
    const dir = await mkdtemp(join(tmpdir(), 'capstan-root-probe-'));
    try {
      for (const d of ['u', 'w', 'm']) await mkdir(join(dir, d));
      const r = await sh('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', `mount -t overlay overlay -o lowerdir=/,upperdir=${q(join(dir, 'u'))},workdir=${q(join(dir, 'w'))} ${q(join(dir, 'm'))} && test -d ${q(join(dir, 'm', 'etc'))}`]);
      return r.code === 0 ? undefined : `an overlay of / cannot be mounted in a mount namespace here: ${r.stderr.trim()}`;
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  })();
  return probed;
}

async function skipReason(opts: RootOptions): Promise<string | undefined> {
  if (process.platform !== 'linux') return 'throwaway roots need Linux namespaces';
  if (process.getuid?.() !== 0) return 'throwaway roots need root (mount and PID namespaces, overlayfs, chroot)';
  if (!/\toverlay$/m.test(readFileSync('/proc/filesystems', 'utf8'))) return 'the kernel has no overlayfs';
  for (const t of ['unshare', 'nsenter', 'setpriv', 'chroot', 'mount']) if (!onPath(t)) return `${t} is not installed (util-linux, coreutils)`;
  if (!existsSync(join(ROOT, 'agent/dist/methods/index.js'))) return 'the agent is not built (npm run build)';
  if (opts.family === 'rpm') {
    for (const t of ['rpm', 'rpmbuild', 'dnf', 'createrepo_c']) if (!onPath(t)) return `${t} is not installed (Debian packages rpm, dnf and createrepo-c; .ci/run installs them)`;
  }
  if (opts.systemd) {
    if (!existsSync('/lib/systemd/systemd')) return 'systemd is not installed';
    if (ownCgroup() === null) return 'no cgroup2 hierarchy is mounted (systemd needs one)';
  }
  return probeOverlay();
}

/** Why throwaway roots with `opts` cannot run here (undefined: they can). In CI (`CI=true`) a reason throws. */
export async function rootSkipReason(opts: RootOptions = {}): Promise<string | undefined> {
  return requiredInCi((await skipReason(opts)) ?? false, 'run the tests as root on a Linux with overlayfs; .ci/run installs the tools') || undefined;
}

/** The mounts every root gets, then the overlay's own files; runs before the chroot, as root of the namespaces. */
function setupScript(dir: string, opts: RootOptions, cgroup: string | null): string {
  const m = q(join(dir, 'merged'));
  const lines = [
    'set -eu',
    // Our pid as the host sees it (/proc is still the host's here): what nsenter needs.
    'read -r hostpid _ < /proc/self/stat',
    `mount -t overlay overlay -o lowerdir=/,upperdir=${q(join(dir, 'upper'))},workdir=${q(join(dir, 'work'))} ${m}`,
    `mount -t proc proc ${m}/proc`,
    // The kernel's settings are the host's: nothing inside may write them.
    `mount --bind ${m}/proc/sys ${m}/proc/sys`, `mount -o remount,bind,ro ${m}/proc/sys`,
    `if [ -e ${m}/proc/sysrq-trigger ]; then mount --bind ${m}/proc/sysrq-trigger ${m}/proc/sysrq-trigger; mount -o remount,bind,ro ${m}/proc/sysrq-trigger; fi`,
    `mount -t sysfs -o ro sysfs ${m}/sys`,
    // A /dev of our own: the host's device nodes we need, bound one by one, and a private devpts.
    `mount -t tmpfs -o mode=0755,size=4m tmpfs ${m}/dev`,
    `for n in null zero full random urandom tty; do : > ${m}/dev/$n; mount --bind /dev/$n ${m}/dev/$n; done`,
    `mkdir ${m}/dev/pts ${m}/dev/shm`,
    `mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts ${m}/dev/pts`,
    `ln -s pts/ptmx ${m}/dev/ptmx; ln -s /proc/self/fd ${m}/dev/fd`,
    `ln -s /proc/self/fd/0 ${m}/dev/stdin; ln -s /proc/self/fd/1 ${m}/dev/stdout; ln -s /proc/self/fd/2 ${m}/dev/stderr`,
    `mount -t tmpfs -o mode=1777 tmpfs ${m}/dev/shm`,
    `mount -t tmpfs -o mode=0755 tmpfs ${m}/run`,
    `mount -t tmpfs -o mode=1777 tmpfs ${m}/tmp`,
    // The repository (the agent's code and the method driver), read-only, bound last: on another
    // file system than / the overlay would not hold it, and under /tmp or /run (a CI clone made
    // by mktemp) the fresh tmpfs above would hide it.
    `mkdir -p ${m}${q(ROOT)}`, `mount --bind ${q(ROOT)} ${m}${q(ROOT)}`, `mount -o remount,bind,ro ${m}${q(ROOT)}`,
  ];
  // "ready" is said from inside the chroot, by the process nsenter will follow (exec keeps its
  // pid): said before, a command could enter the namespaces with the host's / as its root.
  const ready = (then: string) => `exec chroot ${m} /bin/sh -c ${q(`echo "ready $1"; exec ${then}`)} sh "$hostpid"`;
  if (!opts.systemd) return [...lines, ready('/bin/sleep infinity')].join('\n');
  return [
    ...lines,
    ...systemdUnits(join(dir, 'merged')),
    `mkdir ${q(cgroup!)}`, `echo 0 > ${q(join(cgroup!, 'cgroup.procs'))}`,
    // In a cgroup namespace rooted at our new cgroup, systemd sees that cgroup as the whole tree.
    `exec unshare --cgroup sh -c ${q(`mount -t cgroup2 cgroup2 ${m}/sys/fs/cgroup && hostpid=$1 && ${ready(`/usr/bin/env -i container=capstan-root PATH=${PATH} /lib/systemd/systemd --system --unit=capstan-root.target --log-target=null`)}`)} sh "$hostpid"`,
  ].join('\n');
}

/** Remove a cgroup and its children once their processes are gone (bounded wait). */
async function removeCgroup(path: string): Promise<void> {
  const until = Date.now() + 10_000;
  const walk = async (p: string): Promise<void> => {
    for (const e of await readdir(p, { withFileTypes: true }).catch(() => [])) if (e.isDirectory()) await walk(join(p, e.name));
    await rmdir(p);
  };
  for (;;) {
    try {
      return await walk(path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      if (Date.now() > until) throw err;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

export async function throwawayRoot(t: Test, opts: RootOptions = {}): Promise<Root> {
  if (opts.systemd && opts.network === 'host') throw new Error('a systemd root has a network of its own');
  // t.testdir() empties the test's directory: a test that made one already (with programDir, so
  // that this teardown runs before it is removed) keeps it, and each root gets a directory in it.
  const dir = await mkdtemp(join(existsSync(t.testdirName) ? t.testdirName : programDir(t), 'root-'));
  for (const d of ['upper', 'work', 'merged']) await mkdir(join(dir, d));
  const own = opts.systemd ? ownCgroup() : null;
  const cgroup = own && join(own, `capstan-root-${randomBytes(6).toString('hex')}`);
  const args = ['--pdeathsig', 'KILL', 'unshare', '--mount', '--uts', '--pid', '--fork', '--kill-child', '--propagation', 'private'];
  if (opts.systemd || opts.network !== 'host') args.push('--net');
  const holder = spawn('setpriv', [...args, 'sh', '-c', setupScript(dir, opts, cgroup)], { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH } });
  let stderr = '';
  holder.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<void>((r) => holder.once('exit', () => r()));
  let init = 0;
  t.teardown(async () => {
    // The namespace dies with its PID 1; unshare then reaps it and exits (killed only if it lingers).
    if (init > 0) process.kill(init, 'SIGKILL');
    const late = setTimeout(() => holder.kill('SIGKILL'), init > 0 ? 10_000 : 0);
    await exited;
    clearTimeout(late);
    if (cgroup) await removeCgroup(cgroup);
  });
  init = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`throwaway root not ready in 30 s: ${stderr}`)), 30_000);
    holder.stdout.on('data', (d: Buffer) => {
      const m = /ready (\d+)/.exec(d.toString());
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`throwaway root setup failed: ${stderr}`));
    });
  });

  // Never a command with the host's / for its root: the root's PID 1 must be in the overlay.
  const merged = join(dir, 'merged');
  const rootOf = (pid: number) => {
    try {
      return readlinkSync(`/proc/${pid}/root`);
    } catch {
      return null;
    }
  };
  if (rootOf(init) !== merged) throw new Error(`throwaway root: process ${init} is not chrooted into ${merged} (${rootOf(init)})`);
  const exec: Root['exec'] = (cmd, cmdArgs = [], o = {}) =>
    new Promise((done) => {
      // tap puts its loader into every child's NODE_OPTIONS: env -u keeps it out of the root.
      const child = spawn('nsenter', ['-t', String(init), '-a', '-r', '-w', '/usr/bin/env', '-u', 'NODE_OPTIONS', cmd, ...cmdArgs], {
        env: { PATH, HOME: '/root', LANG: 'C.UTF-8', ...o.env }, stdio: ['pipe', 'pipe', 'pipe'],
      });
      let out = '';
      let err = '';
      const timer = setTimeout(() => child.kill('SIGKILL'), o.timeoutMs ?? 120_000);
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (err += d.toString()));
      child.stdin.on('error', () => undefined);
      child.stdin.end(o.input ?? '');
      child.once('close', (code, signal) => {
        clearTimeout(timer);
        done({ code: code ?? (signal ? 128 : 1), stdout: out, stderr: err });
      });
    });
  const root: Root = {
    upper: join(dir, 'upper'),
    pid: init,
    cgroup,
    exec,
    sh: (script) => exec('/bin/sh', ['-ec', script]),
    method: async (method, params, o = {}) => (await root.methods([{ method, params, ...o }]))[0]!,
    methods: async (steps) => {
      const r = await exec(process.execPath, [DRIVER], { input: JSON.stringify(steps) });
      const lines = r.stdout.trim().split('\n').filter((l) => l.startsWith('{'));
      if (r.code !== 0 || lines.length !== steps.length) throw new Error(`method driver exited ${r.code}: ${r.stderr}${r.stdout}`);
      return lines.map((line) => {
        const res = JSON.parse(line) as { outcomes?: RootOutcome[]; error?: { code: string; message: string } };
        if (res.error) throw Object.assign(new Error(res.error.message), { code: res.error.code });
        return res.outcomes!;
      });
    },
    agent: (agentArgs) => exec(process.execPath, [BIN.agent, ...agentArgs]),
  };
  if (opts.systemd) {
    const until = Date.now() + 30_000;
    for (;;) {
      const r = await exec('systemctl', ['is-system-running']);
      if (/^(running|degraded)/.test(r.stdout)) break;
      if (Date.now() > until) throw new Error(`systemd in the root did not come up: ${r.stdout}${r.stderr}${stderr}`);
      await new Promise((res) => setTimeout(res, 50));
    }
  }
  if (opts.family === 'rpm') {
    const r = await root.sh(familyScript('rpm'));
    if (r.code !== 0) throw new Error(`rpm root setup failed: ${r.stderr}`);
  }
  return root;
}
