/**
 * Commands, run without a shell and bounded in time, and sysctl values. Packages are in
 * packages.ts, services in services.ts.
 */
import { access, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { capstanError } from '@capstan/shared/errors';
import { commandCheckSpec, commandKey, commandRunSpec, sysctlValueSpec } from '@capstan/shared/policy/methods';
import { converge, run, type Method, type ParamsOf } from './types.js';

export const commandCheck: Method<ParamsOf<typeof commandCheckSpec>> = {
  ...commandCheckSpec,
  apply: async (p, ctx) => {
    const key = commandKey(p);
    const r = await run(p.command, p.args, ctx);
    if (r.code === 127 && r.stdout === '') return [{ component: 'Command check', key, status: 'error', message: r.stderr }];
    return [
      r.code === p.expect_exit
        ? { component: 'Command check', key, status: 'compliant', message: `exit ${r.code} as expected` }
        : { component: 'Command check', key, status: 'noncompliant', message: `exit ${r.code}, expected ${p.expect_exit}` },
    ];
  },
};

/**
 * A command run to converge something. It must say how to tell it is not needed (`creates`: a
 * path the command makes; `unless`: a check command that exits 0 when all is well), so that a
 * second run on an unchanged host repairs nothing.
 */
export const commandRun: Method<ParamsOf<typeof commandRunSpec>> = {
  ...commandRunSpec,
  apply: async (p, ctx) => {
    const key = commandKey(p);
    return [
      await converge(
        ctx, 'Command run', key,
        async () => {
          if (p.creates) {
            const exists = await access(p.creates).then(() => true, () => false);
            if (!exists) return `${p.creates} does not exist`;
          }
          if (p.unless && (await run(p.unless.command, p.unless.args, ctx)).code !== 0) return `${p.unless.command} says the command is needed`;
          return null;
        },
        async () => {
          const r = await run(p.command, p.args, ctx);
          if (r.code !== 0) throw capstanError('ERR_INTERNAL', `${key} exited ${r.code}: ${r.stderr.trim().slice(0, 200)}`);
        },
        { ok: 'nothing to do', repaired: `${key} ran` },
      ),
    ];
  },
};

export const sysctlValue: Method<ParamsOf<typeof sysctlValueSpec>> = {
  ...sysctlValueSpec,
  apply: async (p, ctx) => {
    const path = join(ctx.sysctlRoot, ...p.key.split('.'));
    const norm = (s: string) => s.trim().split(/\s+/).join(' ');
    return [
      await converge(
        ctx, 'Sysctl value', p.key,
        async () => {
          const cur = norm(await readFile(path, 'utf8'));
          return cur === norm(p.value) ? null : `${p.key} is ${cur}, not ${p.value}`;
        },
        () => writeFile(path, `${p.value}\n`),
        { ok: `${p.key} is ${p.value}`, repaired: `${p.key} set to ${p.value}` },
        // A kernel setting is written to a file under /proc/sys: its diff is the value's.
        async () => `${p.key} ${norm(await readFile(path, 'utf8'))} → ${norm(p.value)}\n`,
      ),
    ];
  },
};
