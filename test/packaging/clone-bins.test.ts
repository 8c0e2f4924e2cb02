/**
 * In a fresh clone, `npm ci` links every program into node_modules/.bin, so the README's commands
 * and `npx capstan-server` work once the build has run. They used not to: npm links a workspace's
 * `bin` only if the file exists at install time, and it named dist/cli.js, which the build makes
 * later (and without its run bit). The bins are now committed stubs (bin/<program>.js, mode 755)
 * that import dist/.
 *
 * The clone is of the committed HEAD. `npm ci --offline --ignore-scripts` installs from npm's
 * cache (no network), then the native addons' compiled build/ and each workspace's dist/ are
 * copied from this checkout (built from the same sources by `npm test`'s pretest) instead of
 * compiling them a second time.
 * Skipped with the reason when git, or npm's cache, cannot do that here (failed when CI=true).
 *
 * In CI the checkout under test already is such a clone: .ci/run clones main afresh, runs
 * `npm ci` before anything is built, and only then builds and tests. There the checks run on it
 * directly instead of installing a second copy (about a minute of a 2-core machine's time).
 */
import { execFile } from 'node:child_process';
import { access, constants, cp, lstat, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { ROOT } from '../helpers/programs.js';

const run = promisify(execFile);
/** Packages under `dir` with a compiled addon (build/Release), scoped ones included. */
async function nativeAddons(dir: string): Promise<string[]> {
  const found: string[] = [];
  for (const name of await readdir(dir)) {
    const names = name.startsWith('@') ? (await readdir(join(dir, name))).map((n) => `${name}/${n}`) : [name];
    for (const n of names) if (await access(join(dir, n, 'build', 'Release')).then(() => true, () => false)) found.push(n);
  }
  return found;
}

const PROGRAMS = [['agent', 'capstan-agent'], ['relayd', 'capstan-relayd'], ['server', 'capstan-server'], ['server', 'capstan'], ['bench', 'capstan-sim']] as const;

t.test('a fresh clone runs capstan-* from node_modules/.bin after npm ci and the build', { timeout: 600_000 }, async (t) => {
  const skip = (why: string) => {
    if (process.env.CI === 'true') t.fail(why);
    else t.comment(`skipping: ${why}`);
  };
  let clone = ROOT;
  if (process.env.CI !== 'true') {
    const isRepo = await run('git', ['-C', ROOT, 'rev-parse', '--git-dir']).then(() => true, () => false);
    if (!isRepo) return skip('this checkout is not a git repository (or git is not installed)');
    clone = join(t.testdir(), 'capstan');
    await run('git', ['clone', '--quiet', '--no-hardlinks', ROOT, clone]);
  }

  // The bins are in git with their run bit.
  for (const [ws, name] of PROGRAMS) {
    const { stdout } = await run('git', ['-C', clone, 'ls-files', '-s', `${ws}/bin/${name}.js`]);
    t.match(stdout, /^100755 /, `${ws}/bin/${name}.js is committed executable`);
  }

  if (clone !== ROOT) {
    const installed = await run('npm', ['ci', '--offline', '--ignore-scripts', '--no-audit', '--no-fund'], { cwd: clone, timeout: 480_000, maxBuffer: 16 << 20 })
      .then(() => null, (err: { stderr?: string; message: string }) => (err.stderr ?? err.message).trim().split('\n').slice(-3).join(' '));
    if (installed !== null) return skip(`npm ci --offline cannot install from this machine's npm cache: ${installed}`);
  }

  // Linked at install time, before any build.
  for (const [, name] of PROGRAMS) {
    t.ok((await lstat(join(clone, 'node_modules', '.bin', name))).isSymbolicLink(), `node_modules/.bin/${name} after npm ci`);
  }
  if (clone !== ROOT) {
    for (const ws of ['shared', 'toolkit', 'agent', 'relayd', 'server', 'bench']) await cp(join(ROOT, ws, 'dist'), join(clone, ws, 'dist'), { recursive: true });
    for (const addon of await nativeAddons(join(ROOT, 'node_modules'))) {
      await cp(join(ROOT, 'node_modules', addon, 'build'), join(clone, 'node_modules', addon, 'build'), { recursive: true });
    }
  }

  const { stdout: version } = await run('node', ['-p', "require('./shared/package.json').version"], { cwd: clone });
  for (const [, name] of PROGRAMS) {
    const bin = join(clone, 'node_modules', '.bin', name);
    await access(bin, constants.X_OK);
    t.ok((await stat(bin)).mode & 0o111, `${name} is executable`);
    // Run as a command, the way a shell runs it: the #! line, not `node <file>`.
    const r = await run(bin, ['--version'], { cwd: clone });
    t.equal(r.stdout.trim(), version.trim(), `${name} --version`);
  }
  const viaNpx = await run('npx', ['--offline', '--no-install', 'capstan-server', '--version'], { cwd: clone });
  t.equal(viaNpx.stdout.trim(), version.trim(), 'npx capstan-server --version');
});
