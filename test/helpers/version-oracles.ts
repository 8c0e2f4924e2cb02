/**
 * The package managers' own version comparisons, as oracles for Capstan's: dpkg's
 * `--compare-versions` (one process per question, so asked a few hundred times) and rpm's
 * `rpm.vercmp` in rpm's Lua (thousands of pairs in one `rpm --eval`). Where a tool is missing,
 * a test skips with the reason outside CI and fails in CI (.ci/run installs rpm).
 */
import { execFile, execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { requiredInCi } from './programs.js';

const run = promisify(execFile);

export function hasCommand(cmd: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Why a test needing `cmd` skips here (false: it runs); in CI (CI=true) a missing one throws. */
export function oracleMissing(cmd: string): false | string {
  return requiredInCi(hasCommand(cmd) ? false : `${cmd} is not installed: its version order cannot be checked here`, `.ci/run installs it (apt-get install ${cmd})`);
}

/** Sign of compare(a, b) for each pair, by dpkg itself; null for a pair dpkg refuses. */
export async function dpkgCompare(pairs: Array<[string, string]>): Promise<Array<number | null>> {
  // One shell runs every dpkg call, so the cost is dpkg's start-up, not a shell's too.
  const script = 'while IFS=" " read -r a b; do if dpkg --compare-versions "$a" lt "$b" 2>/dev/null; then echo -1; ' +
    'elif dpkg --compare-versions "$a" eq "$b" 2>/dev/null; then echo 0; elif dpkg --compare-versions "$a" gt "$b" 2>/dev/null; then echo 1; else echo E; fi; done';
  const child = execFile('sh', ['-c', script], { maxBuffer: 1 << 24 });
  let out = '';
  child.stdout!.on('data', (d) => (out += String(d)));
  const done = new Promise<void>((resolve, reject) => child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`dpkg loop exit ${code}`)))));
  child.stdin!.end(pairs.map(([a, b]) => `${a} ${b}\n`).join(''));
  await done;
  return out.trim().split('\n').map((l) => (l === 'E' ? null : Number(l)));
}

/** Sign of compare(a, b) for each pair, by rpm's `rpm.vercmp`; null for a pair rpm refuses. */
export async function rpmCompare(pairs: Array<[string, string]>, dir: string): Promise<Array<number | null>> {
  // Versions here use letters, digits and . ~ ^ + _ : - only, so a JSON string is a Lua string.
  for (const [a, b] of pairs) if (!/^[0-9A-Za-z.~^+_:-]*$/.test(a + b)) throw new Error(`unsafe version for the Lua batch: ${a} ${b}`);
  const file = join(dir, 'vercmp.lua');
  writeFileSync(file, `local t={${pairs.map(([a, b]) => `{${JSON.stringify(a)},${JSON.stringify(b)}}`).join(',')}}\n` +
    'for _,p in ipairs(t) do local ok,r=pcall(rpm.vercmp,p[1],p[2]) io.write((ok and tostring(r) or "E").."\\n") end\n');
  const { stdout } = await run('rpm', ['--eval', `%{lua: dofile(${JSON.stringify(file)})}`], { maxBuffer: 1 << 26 });
  return stdout.trim().split('\n').map((l) => (l === 'E' ? null : Math.sign(Number(l))));
}

/** A small seeded generator (xorshift), so a failing case can be replayed from its seed. */
export function seeded(seed: number): { next: () => number; pick: <T>(a: readonly T[]) => T; int: (n: number) => number } {
  let s = seed >>> 0 || 1;
  const next = () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 0x100000000;
  };
  return { next, int: (n) => Math.floor(next() * n), pick: (a) => a[Math.floor(next() * a.length)]! };
}

/** Debian-shaped versions: epochs, `~`, `+`, revisions, letters, leading zeros. */
export function debianVersion(r: ReturnType<typeof seeded>): string {
  let up = r.pick(['0', '00', '01', '1', '2', '9', '10', '12', '3']);
  for (let i = r.int(5); i > 0; i--) up += r.pick(['.', '.', '~', '+', 'a', 'b', 'rc', '~rc', '+b', '.0', '0', '~~', 'z', 'A', '+dfsg', '~deb12u']) + (r.next() < 0.6 ? String(r.int(12)) : '');
  const rev = r.pick(['', '', '-1', '-0', '-2', '-1~deb12u1', '-1+deb12u2', '-1ubuntu1', '-1~bpo12+1', '-10', '-01', `-${r.int(5)}+b${r.int(3)}`]);
  return (r.next() < 0.2 ? r.pick(['0:', '1:', '2:', '01:', '10:']) : '') + up + rev;
}

/** RPM-shaped versions: epochs, `~` and `^`, releases with dist tags, separators rpm ignores. */
export function rpmVersion(r: ReturnType<typeof seeded>): string {
  let v = r.pick(['0', '00', '01', '1', '2', '9', '10', '12', '3', 'a']);
  for (let i = r.int(5); i > 0; i--) v += r.pick(['.', '.', '~', '^', '+', '_', 'a', 'b', 'rc', '~rc', '^git', '.0', '0', '~~', 'z', 'A']) + (r.next() < 0.6 ? String(r.int(12)) : '');
  const rel = r.pick(['', '-1', '-1', '-2.el9', '-27.el9', '-0', '-1.el9_2.1', '-10', `-${r.int(30)}.el9_${r.int(4)}`, '-1.module+el9.3.0+111+aaaa']);
  return (r.next() < 0.25 ? r.pick(['0:', '1:', '2:', '01:', '10:']) : '') + v + rel;
}

/** A pair of related versions half of the time (one changed a little), unrelated otherwise. */
export function versionPairs(n: number, seed: number, gen: (r: ReturnType<typeof seeded>) => string): Array<[string, string]> {
  const r = seeded(seed);
  const out: Array<[string, string]> = [];
  for (let i = 0; i < n; i++) {
    const a = gen(r);
    const b = r.next() < 0.5 ? a.replace(/\d+(?!.*\d)/, (d) => r.pick([`${d}0`, `${d}~1`, `${Number(d) + 1}`, d, `0${d}`, `${d}.0`, `${d}^1`])) : gen(r);
    out.push([a, b]);
  }
  return out;
}
