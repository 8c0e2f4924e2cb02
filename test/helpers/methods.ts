/**
 * Running generic methods in tests: a method context on temporary paths, one method applied in a
 * mode, a snapshot of a directory tree (to prove a look changed nothing), fake tools on PATH that
 * record their arguments, and the whole cycle every method must go through. (Not a .test.ts: a helper.)
 */
import { chmod, lstat, mkdir, readdir, readFile, readlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Test } from 'tap';
import { silentLogger } from '@capstan/shared';
import { METHODS, type MethodContext, type Outcome } from '@capstan/agent/methods/index';
import { testDiffSettings } from './diff.js';

export function methodCtx(over: Partial<MethodContext> = {}): Omit<MethodContext, 'mode'> {
  return { dryRun: false, log: silentLogger, env: process.env, commandTimeoutMs: 10_000, sysctlRoot: '/proc/sys', fetchShared: async () => Buffer.alloc(0), diff: testDiffSettings(), ...over };
}

export type Look = 'audit' | 'dry-run' | 'enforce';

/** The first outcome of `method` with `params` (validated as the agent does), in `look` mode. */
export async function applyMethod(method: string, params: Record<string, unknown>, look: Look, over: Partial<MethodContext> = {}): Promise<Outcome> {
  const m = METHODS.get(method);
  if (!m) throw new Error(`no method ${method}`);
  const out = await m.apply(m.validate(params), { ...methodCtx({ dryRun: look === 'dry-run', ...over }), mode: look === 'audit' ? 'audit' : 'enforce' });
  return out[0]!;
}

/** Every entry under `dir`: a file's mode and content, a link's target, a directory's mode. */
export async function snapshot(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const walk = async (d: string, rel: string) => {
    for (const name of (await readdir(d)).sort()) {
      const p = join(d, name);
      const r = rel ? `${rel}/${name}` : name;
      const s = await lstat(p);
      if (s.isSymbolicLink()) out[r] = `link → ${await readlink(p)}`;
      else if (s.isDirectory()) {
        out[r] = `dir ${(s.mode & 0o7777).toString(8)}`;
        await walk(p, r);
      } else out[r] = `file ${(s.mode & 0o7777).toString(8)} ${s.uid}:${s.gid} ${await readFile(p, 'utf8')}`;
    }
  };
  await walk(dir, '');
  return out;
}

/**
 * The cycle every method goes through on drift: audit and a dry run report it and change nothing
 * under `dir`, enforce repairs it, and a second enforce run and an audit find nothing to do.
 * Resolves to the repair's outcome.
 */
export async function driftCycle(t: Test, dir: string, method: string, params: Record<string, unknown>, over: Partial<MethodContext> = {}): Promise<Outcome> {
  const before = await snapshot(dir);
  const audit = await applyMethod(method, params, 'audit', over);
  t.equal(audit.status, 'noncompliant', `${method}: audit finds the drift (${audit.message})`);
  const dry = await applyMethod(method, params, 'dry-run', over);
  t.equal(dry.status, 'noncompliant', `${method}: a dry run finds it (${dry.message})`);
  t.match(dry.message, /^would repair/, `${method}: a dry run says what it would do`);
  t.same(await snapshot(dir), before, `${method}: audit and dry run change nothing`);
  const repaired = await applyMethod(method, params, 'enforce', over);
  t.equal(repaired.status, 'repaired', `${method}: enforce repairs (${repaired.message})`);
  const again = await applyMethod(method, params, 'enforce', over);
  t.equal(again.status, 'success', `${method}: a second run changes nothing (${again.message})`);
  t.equal((await applyMethod(method, params, 'audit', over)).status, 'compliant', `${method}: audit agrees`);
  return repaired;
}

/**
 * Fake commands first on PATH: each appends its name and arguments (one line, tab-separated) to
 * `<dir>/calls` and runs `body` (sh; `$@` its arguments). Resolves to the env and a reader of the calls.
 */
export async function fakeTools(dir: string, tools: Record<string, string>): Promise<{ env: NodeJS.ProcessEnv; calls: () => Promise<string[]> }> {
  const bin = join(dir, 'bin');
  await mkdir(bin, { recursive: true });
  const log = join(dir, 'calls');
  await writeFile(log, '');
  for (const [name, body] of Object.entries(tools)) {
    await writeFile(join(bin, name), `#!/bin/sh\n(printf '%s' ${name}; for a in "$@"; do printf '\\t%s' "$a"; done; echo) >> '${log}'\n${body}\n`);
    await chmod(join(bin, name), 0o755);
  }
  return {
    env: { ...process.env, PATH: `${bin}:/usr/sbin:/usr/bin:/sbin:/bin` },
    calls: async () => (await readFile(log, 'utf8')).split('\n').filter(Boolean),
  };
}
