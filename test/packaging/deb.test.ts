/**
 * The three .deb packages, built by scripts/package.mjs and installed with the real dpkg into a
 * throwaway root (dpkg --root with --force-script-chrootless: the maintainer scripts run with
 * $DPKG_ROOT set and must write only below it). Then: files, modes, owners, users, conffiles,
 * enabled units, each command's --version from the installed tree alone, remove and purge.
 * Nothing here touches the running system: no real user, no systemctl (checked at the end).
 */
import { execFile } from 'node:child_process';
import { lstat, mkdir, mkdtemp, readdir, readFile, readlink, rm, statfs, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import t from 'tap';
import { requiredInCi } from '../helpers/programs.js';

const REPO = resolve(import.meta.dirname, '../..');
const PROGRAMS = ['agent', 'relayd', 'server'] as const;
const VERSION = (JSON.parse(await readFile(join(REPO, 'package.json'), 'utf8')) as { version: string }).version;
// The whole file (packaging three programs with their dependencies and the console, then
// installing them) takes 2–4 minutes on a busy 2-core machine: bounded well above that.
t.setTimeout(600_000);

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command to completion; a non-zero exit is a result, not an exception. */
function run(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<Result> {
  return new Promise((done) => {
    // Packaging copies the relay's and server's dependencies (cloud SDKs, ssh2): up to ~4 minutes when loaded.
    execFile(cmd, args, { ...opts, encoding: 'utf8', maxBuffer: 16 * 1024 * 1024, timeout: 420_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : 127;
      done({ code, stdout, stderr });
    });
  });
}

const has = async (cmd: string) => (await run('sh', ['-c', `command -v ${cmd}`])).code === 0;

// As root the scripts chown for real inside the throwaway root; otherwise fakeroot records it.
const asRoot = process.getuid?.() === 0;

async function skipReason(): Promise<string | undefined> {
  // dpkg-deb and dpkg ship in the same Debian package: where one is missing, so is the other.
  if (!(await has('dpkg-deb')) || !(await has('dpkg'))) return 'dpkg-deb is not installed (Debian packaging needs a Debian or Ubuntu host)';
  if (!(await has('systemd-sysusers'))) return 'systemd-sysusers, which the daemons\' postinst uses to create their users, is not installed';
  if (!asRoot && !(await has('fakeroot'))) return 'installing packages with their owners needs root or fakeroot';
  return undefined;
}

const why = requiredInCi((await skipReason()) ?? false, 'run .ci/run on a Debian host') || undefined;
if (why !== undefined) {
  console.log(`# SKIP ${why}`);
  t.plan(0, why);
} else {
  await packagingTests();
}

/**
 * Where the packages are staged, built and installed: in memory (/dev/shm) when it is a
 * filesystem with room that lets the maintainer scripts run, else the temp dir. The three
 * installed trees are ~12,000 files; on a disk each unpack, reinstall and remove of them waits on
 * the journal (a remove took 15 s on a busy machine, 1 s in memory).
 */
async function workDir(): Promise<string> {
  try {
    const fs = await statfs('/dev/shm');
    if (fs.bavail * fs.bsize < 2 ** 30) throw new Error('less than 1 GiB free');
    const dir = await mkdtemp('/dev/shm/capstan-deb-test-');
    try {
      await writeFile(join(dir, 'exec-check'), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
      if ((await run(join(dir, 'exec-check'), [])).code !== 0) throw new Error('mounted noexec');
      await rm(join(dir, 'exec-check'));
      return dir;
    } catch (err) {
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
  } catch {
    return mkdtemp(join(tmpdir(), 'capstan-deb-test-'));
  }
}

async function packagingTests(): Promise<void> {
  // Outside the repository: Node must not find the repo's node_modules from the installed tree.
  const work = await workDir();
  t.teardown(() => rm(work, { recursive: true, force: true }));
  const ROOT = join(work, 'root');
  const DEBS = join(work, 'debs');
  const FAKEROOT_STATE = join(work, 'fakeroot.state');
  // dpkg wants ldconfig and start-stop-daemon on PATH even when it only unpacks.
  const ENV: NodeJS.ProcessEnv = { ...process.env, PATH: `${process.env.PATH ?? ''}:/usr/sbin:/sbin` };
  delete ENV.NODE_PATH;

  let fakerootStateSaved = false;
  /** A command as the package manager runs it: as root, or under fakeroot keeping its owners. */
  async function privileged(args: string[]): Promise<Result> {
    if (asRoot) return run(args[0]!, args.slice(1), { env: ENV });
    const load = fakerootStateSaved ? ['-i', FAKEROOT_STATE] : [];
    const r = await run('fakeroot', ['-s', FAKEROOT_STATE, ...load, '--', ...args], { env: ENV });
    fakerootStateSaved = true;
    return r;
  }

  function dpkg(...args: string[]): Promise<Result> {
    return privileged([
      'dpkg', `--root=${ROOT}`, `--log=${join(ROOT, 'var/log/dpkg.log')}`,
      '--force-not-root', '--force-script-chrootless', '--force-depends', ...args,
    ]);
  }

  /** Mode (octal), uid and gid as the installed system would see them. */
  async function owner(path: string): Promise<{ mode: string; uid: number; gid: number }> {
    const r = await privileged(['stat', '-c', '%a %u %g', join(ROOT, path)]);
    if (r.code !== 0) throw new Error(`stat ${path}: ${r.stderr}`);
    const [mode, uid, gid] = r.stdout.trim().split(' ');
    return { mode: mode!, uid: Number(uid), gid: Number(gid) };
  }

  async function passwd(): Promise<Map<string, string[]>> {
    const text = await readFile(join(ROOT, 'etc/passwd'), 'utf8').catch(() => '');
    return new Map(text.split('\n').filter(Boolean).map((l) => [l.split(':')[0]!, l.split(':')]));
  }

  const exists = (path: string) => lstat(join(ROOT, path)).then(() => true, () => false);

  /**
   * Files and folders of an installed tree that belong to the benchmarks or the simulator: a
   * `bench` or `sim` folder, a `bench*` or `capstan-sim*` file. The program's own files and the
   * bundled @capstan packages are searched; other bundled packages are not ours to name.
   */
  async function benchOrSim(tree: string): Promise<string[]> {
    const found: string[] = [];
    const walk = async (rel: string): Promise<void> => {
      for (const e of await readdir(join(ROOT, rel), { withFileTypes: true })) {
        const path = `${rel}/${e.name}`;
        if (rel.endsWith('/node_modules') && e.name !== '@capstan') continue;
        if (e.isDirectory() ? e.name === 'bench' || e.name === 'sim' : /^(bench|capstan-sim)([-.]|$)/.test(e.name)) found.push(path);
        if (e.isDirectory()) await walk(path);
      }
    };
    await walk(tree);
    return found;
  }

  // What the host had before: compared at the end to show the install stayed in its root.
  const HOST_FILES = ['/etc/passwd', '/etc/group'];
  const hostBefore = await Promise.all(HOST_FILES.map((f) => readFile(f, 'utf8').catch(() => '')));
  const hostUnitsBefore = await readdir('/etc/systemd/system/multi-user.target.wants').catch(() => []);

  const debs: Record<string, string> = {};

  t.test('npm run package builds one .deb per program', async (t) => {
    // zstd: the same packages as the release's xz, built in seconds instead of half a minute.
    // TMPDIR: the packages are staged beside where they are installed (see workDir).
    const r = await run(process.execPath, [join(REPO, 'scripts/package.mjs'), '--out', DEBS, '--compression', 'zstd'], { cwd: REPO, env: { ...ENV, TMPDIR: work } });
    t.equal(r.code, 0, 'scripts/package.mjs exits 0', { stderr: r.stderr });
    const arch = (await run('dpkg', ['--print-architecture'])).stdout.trim();
    const nodeMajor = Number(process.versions.node.split('.')[0]);
    const nodeRanges = new Set<string>();
    for (const p of PROGRAMS) {
      const deb = join(DEBS, `capstan-${p}_${VERSION}_${arch}.deb`);
      const info = await run('dpkg-deb', ['--field', deb, 'Package', 'Version', 'Architecture', 'Depends']);
      t.equal(info.code, 0, `${deb} is a package`, { stderr: info.stderr });
      t.match(info.stdout, new RegExp(`^Package: capstan-${p}$`, 'm'));
      t.match(info.stdout, new RegExp(`^Version: ${VERSION.replaceAll('.', '\\.')}$`, 'm'));
      t.match(info.stdout, new RegExp(`^Architecture: ${arch}$`, 'm'), 'native addons inside: built for this architecture');
      t.match(info.stdout, /^Depends: .*nodejs \(>= 2\d[.\d]*\)/m);
      // One range for the three: up to the major the release was built and tested on (the
      // server's better-sqlite3 loads only in that one).
      t.match(info.stdout, new RegExp(`nodejs \\(<< ${nodeMajor + 1}\\)`), `capstan-${p}: the same Node.js range`);
      nodeRanges.add((/nodejs \(>=[^)]*\), nodejs \(<<[^)]*\)/.exec(info.stdout) ?? [''])[0]);
      if (info.code === 0) debs[p] = deb;
    }
    t.equal(nodeRanges.size, 1, `one Node.js range: ${[...nodeRanges].join(' | ')}`);
  });

  t.test('an unknown program name is refused with exit 2 and nothing built', async (t) => {
    const out = join(work, 'refused');
    const r = await run(process.execPath, [join(REPO, 'scripts/package.mjs'), '--out', out, 'webui'], { cwd: REPO, env: ENV });
    t.equal(r.code, 2);
    t.match(r.stderr, /unknown argument webui/);
    t.notOk(await lstat(out).then(() => true, () => false), 'no output folder');
  });

  t.test('the three packages install into an empty root', async (t) => {
    if (Object.keys(debs).length !== 3) return t.fail('no packages to install');
    // The least dpkg needs to call a directory a system: an empty database.
    for (const dir of ['var/lib/dpkg/info', 'var/lib/dpkg/updates', 'var/lib/dpkg/triggers', 'var/log', 'etc']) await mkdir(join(ROOT, dir), { recursive: true });
    await writeFile(join(ROOT, 'var/lib/dpkg/status'), '');
    await writeFile(join(ROOT, 'var/lib/dpkg/available'), '');
    const r = await dpkg('-i', debs.agent!, debs.relayd!, debs.server!);
    t.equal(r.code, 0, 'dpkg -i of the three packages exits 0', { stderr: r.stderr });
    const q = await run('dpkg-query', [`--admindir=${join(ROOT, 'var/lib/dpkg')}`, '-W', '-f', '${Package} ${Status}\n']);
    for (const p of PROGRAMS) t.match(q.stdout, new RegExp(`^capstan-${p} install ok installed$`, 'm'));
  });

  t.test('files land where an admin looks for them', async (t) => {
    for (const p of PROGRAMS) {
      const cmd = `usr/bin/capstan-${p}`;
      t.equal(await readlink(join(ROOT, cmd)), `../lib/capstan/${p}/dist/cli.js`, `${cmd} runs the installed program`);
      t.equal((await owner(`usr/lib/capstan/${p}/dist/cli.js`)).mode, '755');
      t.ok(await exists(`usr/lib/capstan/${p}/node_modules/@capstan/shared/dist/index.js`), 'shared is bundled');
      // The daemons' toolkit (spool, HTTP, providers) ships with the relay and the server, never the agent.
      t.equal(await exists(`usr/lib/capstan/${p}/node_modules/@capstan/toolkit/dist/index.js`), p !== 'agent', `${p}: toolkit bundled only with the daemons`);
      t.notOk(await exists(`usr/lib/capstan/${p}/src`), 'no TypeScript sources');
      // Benchmarks and the fleet simulator live in the bench workspace, which no program ships.
      t.same(await benchOrSim(`usr/lib/capstan/${p}`), [], `${p}: no benchmark or simulator file`);
      // The web console ships in the server package only, built (scripts/build-console.mjs), with its libraries' licences.
      t.equal(await exists(`usr/lib/capstan/${p}/dist/web/index.html`), p === 'server', `${p}: the console's page only in the server package`);
      if (p === 'server') t.ok(await exists(`usr/lib/capstan/${p}/dist/web/assets/licenses.txt`), 'the bundled libraries\' licences');
      t.equal(
        await readFile(join(ROOT, `etc/capstan/${p}.toml`), 'utf8'),
        await readFile(join(REPO, `packaging/etc/capstan/${p}.toml`), 'utf8'),
        'the shipped config, unchanged',
      );
      const conffiles = await readFile(join(ROOT, `var/lib/dpkg/info/capstan-${p}.conffiles`), 'utf8');
      t.equal(conffiles.trim(), `/etc/capstan/${p}.toml`, 'the config is a conffile: upgrades keep local edits');
      for (const unit of (await readdir(join(REPO, 'packaging/systemd'))).filter((u) => u.startsWith(`capstan-${p}.`))) {
        t.equal(await readFile(join(ROOT, 'lib/systemd/system', unit), 'utf8'), await readFile(join(REPO, 'packaging/systemd', unit), 'utf8'), unit);
      }
      t.ok(await exists(`usr/share/man/man8/capstan-${p}.8.gz`), 'man page');
      t.match(await readFile(join(ROOT, `usr/share/doc/capstan-${p}/copyright`), 'utf8'), /^License: GPL-3\+$/m);
    }
    // A native addon keeps its compiled module, not its C sources and objects.
    t.ok(await exists('usr/lib/capstan/server/node_modules/better-sqlite3/build/Release/better_sqlite3.node'));
    t.notOk(await exists('usr/lib/capstan/server/node_modules/better-sqlite3/deps/sqlite3/sqlite3.c'));
  t.notOk(await exists('usr/lib/capstan/server/node_modules/better-sqlite3/build/Release/test_extension.node'), 'nor its test fixtures');
    t.notOk(await exists('usr/lib/capstan/agent/node_modules/prebuild-install'), 'install-time tools stay out');
    t.notOk(await exists('usr/bin/capstan-sim'), 'no simulator command');
  });

  t.test('daemons get system users; the agent runs as root', async (t) => {
    const users = await passwd();
    for (const p of ['relayd', 'server']) {
      const u = users.get(`capstan-${p}`);
      t.ok(u, `capstan-${p} is in the root's /etc/passwd`);
      t.ok(Number(u?.[2]) > 0 && Number(u?.[2]) < 1000, 'a system uid');
      t.equal(u?.[5], `/var/lib/capstan/${p}`);
      t.match(u?.[6] ?? '', /nologin$/, 'no login shell');
    }
    t.notOk(users.has('capstan-agent'));
  });

  t.test('state, spool and configs keep keys and tokens private', async (t) => {
    const users = await passwd();
    const id = (name: string) => Number(users.get(name)?.[2]);
    const gid = (name: string) => Number(users.get(name)?.[3]);
    t.same(await owner('var/lib/capstan/agent'), { mode: '700', uid: 0, gid: 0 });
    t.same(await owner('var/lib/capstan/relayd'), { mode: '750', uid: id('capstan-relayd'), gid: gid('capstan-relayd') });
    t.same(await owner('var/spool/capstan/relayd'), { mode: '750', uid: id('capstan-relayd'), gid: gid('capstan-relayd') });
    t.same(await owner('var/lib/capstan/server'), { mode: '700', uid: id('capstan-server'), gid: gid('capstan-server') });
    t.same(await owner('etc/capstan/agent.toml'), { mode: '644', uid: 0, gid: 0 });
    t.same(await owner('etc/capstan/relayd.toml'), { mode: '640', uid: 0, gid: gid('capstan-relayd') });
    t.same(await owner('etc/capstan/server.toml'), { mode: '640', uid: 0, gid: gid('capstan-server') });
  });

  t.test('units are enabled in the root, not started', async (t) => {
    t.equal(await readlink(join(ROOT, 'etc/systemd/system/timers.target.wants/capstan-agent.timer')), '/lib/systemd/system/capstan-agent.timer');
    // The remote-run connection: runs and jobs triggered at the server reach a packaged agent.
    t.equal(
      await readlink(join(ROOT, 'etc/systemd/system/multi-user.target.wants/capstan-agent-listen.service')),
      '/lib/systemd/system/capstan-agent-listen.service',
    );
    for (const p of ['relayd', 'server']) {
      t.equal(
        await readlink(join(ROOT, `etc/systemd/system/multi-user.target.wants/capstan-${p}.service`)),
        `/lib/systemd/system/capstan-${p}.service`,
      );
    }
  });

  t.test('the installed agent-listen unit runs `capstan-agent listen`, restarts on failure, and systemd-analyze verify accepts it', async (t) => {
    const unit = await readFile(join(ROOT, 'lib/systemd/system/capstan-agent-listen.service'), 'utf8');
    t.match(unit, /^ExecStart=\/usr\/bin\/capstan-agent listen --config \/etc\/capstan\/agent\.toml$/m);
    t.match(unit, /^Restart=on-failure$/m);
    t.match(unit, /^RestartPreventExitStatus=2$/m);
    t.match(unit, /^WantedBy=multi-user\.target$/m);
    const postinst = await readFile(join(ROOT, 'var/lib/dpkg/info/capstan-agent.postinst'), 'utf8');
    t.match(postinst, /capstan-agent-listen\.service/, 'the postinst enables it');
    if (!(await has('systemd-analyze'))) {
      const skip = requiredInCi('systemd-analyze is not installed', 'install systemd on the CI host');
      t.comment(`skipping systemd-analyze verify: ${skip}`);
      return;
    }
    // verify checks that ExecStart's binary exists: the installed one is a script for this Node.
    const dir = await mkdtemp(join(work, 'verify-'));
    await writeFile(join(dir, 'capstan-agent-listen.service'), unit.replaceAll('/usr/bin/capstan-agent', process.execPath));
    const r = await run('systemd-analyze', ['verify', '--man=no', join(dir, 'capstan-agent-listen.service')]);
    t.equal(r.code, 0, r.stderr);
    t.notMatch(r.stderr, /capstan-agent-listen\.service/, 'no warning about the unit');
  });

  t.test('each installed command answers --version from the installed tree alone', async (t) => {
    const elsewhere = await mkdtemp(join(work, 'cwd-'));
    // The remote admin CLI ships in the server's package.
    t.equal(await readlink(join(ROOT, 'usr/bin/capstan')), '../lib/capstan/server/dist/admin-cli/cli.js');
    // --version loads no native code: open the addons from each tree too.
    const probe = `
      import { createRequire } from 'node:module';
      const req = createRequire(process.argv[1]);
      const zstd = req('zstd-napi');
      const back = zstd.decompress(zstd.compress(Buffer.from('capstan')));
      let sqlite = 'absent';
      try { req.resolve('better-sqlite3'); sqlite = new (req('better-sqlite3'))(':memory:').prepare('select 41 + 1 as n').get().n; } catch (e) { if (e.code !== 'MODULE_NOT_FOUND') throw e; }
      console.log(back.toString(), sqlite);`;
    // Seven Node.js starts, independent of one another: at once.
    const [cli, versions, probes] = await Promise.all([
      run(process.execPath, [join(ROOT, 'usr/bin/capstan'), '--version'], { cwd: elsewhere, env: ENV }),
      // Through the /usr/bin link, with this machine's node, NODE_PATH unset, cwd outside the tree.
      Promise.all(PROGRAMS.map((p) => run(process.execPath, [join(ROOT, `usr/bin/capstan-${p}`), '--version'], { cwd: elsewhere, env: ENV }))),
      Promise.all(PROGRAMS.map((p) => {
        const anchor = join(ROOT, `usr/lib/capstan/${p}/node_modules/@capstan/shared/dist/index.js`);
        return run(process.execPath, ['--input-type=module', '-e', probe, anchor], { cwd: elsewhere, env: ENV });
      })),
    ]);
    t.equal(cli.code, 0, 'capstan --version exits 0', { stderr: cli.stderr });
    t.equal(cli.stdout.trim(), VERSION, 'capstan --version');
    PROGRAMS.forEach((p, i) => {
      const r = versions[i]!;
      t.equal(r.code, 0, `capstan-${p} --version exits 0`, { stderr: r.stderr });
      t.equal(r.stdout.trim(), VERSION, `capstan-${p} --version`);
    });
    PROGRAMS.forEach((p, i) => {
      const r = probes[i]!;
      t.equal(r.code, 0, 'the probe exits 0', { stderr: r.stderr });
      t.equal(r.stdout.trim(), `capstan ${p === 'server' ? 42 : 'absent'}`, `native addons load in capstan-${p}`);
    });
  });

  t.test('installing again changes nothing', async (t) => {
    const before = await readFile(join(ROOT, 'etc/passwd'), 'utf8');
    const r = await dpkg('-i', debs.agent!, debs.relayd!, debs.server!);
    t.equal(r.code, 0, 'dpkg -i again exits 0', { stderr: r.stderr });
    t.equal(await readFile(join(ROOT, 'etc/passwd'), 'utf8'), before, 'same users, same uids');
    t.equal((await owner('var/lib/capstan/server')).mode, '700');
  });

  t.test('remove keeps the agent identity and configs; purge deletes them', async (t) => {
    await privileged(['sh', '-c', `umask 077 && echo key > ${join(ROOT, 'var/lib/capstan/agent/node.key')}`]);
    let r = await dpkg('--remove', 'capstan-agent', 'capstan-relayd', 'capstan-server');
    t.equal(r.code, 0, 'dpkg --remove exits 0', { stderr: r.stderr });
    t.notOk(await exists('usr/lib/capstan/agent'), 'program gone');
    t.notOk(await exists('usr/bin/capstan-agent'));
    t.ok(await exists('var/lib/capstan/agent/node.key'), 'identity kept on remove');
    t.ok(await exists('etc/capstan/agent.toml'), 'config kept on remove');
    t.ok(await exists('var/spool/capstan/relayd'), 'spool kept on remove');

    r = await dpkg('--purge', 'capstan-agent', 'capstan-relayd', 'capstan-server');
    t.equal(r.code, 0, 'dpkg --purge exits 0', { stderr: r.stderr });
    t.notOk(await exists('var/lib/capstan/agent'), 'identity deleted on purge');
    t.notOk(await exists('var/spool/capstan/relayd'), 'spool deleted on purge');
    for (const p of PROGRAMS) t.notOk(await exists(`etc/capstan/${p}.toml`), `${p}.toml deleted on purge`);
    t.notOk(await exists('etc/systemd/system/timers.target.wants/capstan-agent.timer'), 'timer no longer enabled');
    t.notOk(await exists('etc/systemd/system/multi-user.target.wants/capstan-agent-listen.service'), 'listen service no longer enabled');
    t.ok(await exists('var/lib/capstan/server'), 'the node registry survives even a purge');
    t.ok((await passwd()).has('capstan-server'), 'system users stay, as Debian keeps them');
  });

  t.test('the running system was not touched', async (t) => {
    const after = await Promise.all(HOST_FILES.map((f) => readFile(f, 'utf8').catch(() => '')));
    t.same(after, hostBefore, 'host users and groups unchanged');
    t.same(await readdir('/etc/systemd/system/multi-user.target.wants').catch(() => []), hostUnitsBefore, 'host units unchanged');
  });
}
