/**
 * Methods that shell out to the host's own tools, with timeouts and no shell: packages (dpkg/apt,
 * rpm/dnf, apk), services (systemctl), commands, and sysctl values.
 */
import { access, readFile, writeFile } from 'node:fs/promises';
import { constants } from 'node:fs';
import { delimiter, join } from 'node:path';
import { capstanError } from '@capstan/shared/errors';
import { commandCheckSpec, commandKey, commandRunSpec, packageAbsentSpec, packagePresentSpec, serviceEnabledSpec, serviceRunningSpec, sysctlValueSpec } from '@capstan/shared/policy/methods';
import { converge, run, type Method, type MethodContext, type ParamsOf } from './types.js';

async function onPath(cmd: string, env: NodeJS.ProcessEnv): Promise<boolean> {
  for (const dir of (env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    try {
      await access(join(dir, cmd), constants.X_OK);
      return true;
    } catch {
      /* next */
    }
  }
  return false;
}

type Family = 'dpkg' | 'rpm' | 'apk';

async function packageFamily(ctx: MethodContext): Promise<Family> {
  if (await onPath('dpkg-query', ctx.env)) return 'dpkg';
  if (await onPath('rpm', ctx.env)) return 'rpm';
  if (await onPath('apk', ctx.env)) return 'apk';
  throw capstanError('ERR_INTERNAL', 'no package manager found (dpkg, rpm or apk)');
}

/** The installed version of a package, or null when it is not installed. */
async function installedVersion(family: Family, name: string, ctx: MethodContext): Promise<string | null> {
  if (family === 'dpkg') {
    const r = await run('dpkg-query', ['-W', '-f', '${db:Status-Status} ${Version}', name], ctx);
    const [status, version] = r.stdout.trim().split(' ');
    return r.code === 0 && status === 'installed' ? (version ?? '') : null;
  }
  if (family === 'rpm') {
    const r = await run('rpm', ['-q', '--qf', '%{VERSION}-%{RELEASE}', name], ctx);
    return r.code === 0 ? r.stdout.trim() : null;
  }
  const r = await run('apk', ['info', '-e', '-v', name], ctx);
  const m = new RegExp(`^${name.replace(/[.+]/g, '\\$&')}-(.+)$`).exec(r.stdout.trim());
  return r.code === 0 && m ? m[1]! : null;
}

async function pkgTool(family: Family, action: 'install' | 'remove', name: string, version: string | undefined, ctx: MethodContext): Promise<void> {
  const env = { ...ctx.env, DEBIAN_FRONTEND: 'noninteractive' };
  const c = { ...ctx, env };
  const spec = version ? (family === 'dpkg' ? `${name}=${version}` : family === 'rpm' ? `${name}-${version}` : `${name}=${version}`) : name;
  const r =
    family === 'dpkg'
      ? await run('apt-get', action === 'install' ? ['install', '-y', '-q', spec] : ['remove', '-y', '-q', name], c)
      : family === 'rpm'
        ? await run('dnf', [action, '-y', '-q', action === 'install' ? spec : name], c)
        : await run('apk', [action === 'install' ? 'add' : 'del', action === 'install' ? spec : name], c);
  if (r.code !== 0) throw capstanError('ERR_INTERNAL', `${action} ${name} failed (${r.code}): ${r.stderr.trim().split('\n').pop() ?? ''}`);
}

export const packagePresent: Method<ParamsOf<typeof packagePresentSpec>> = {
  ...packagePresentSpec,
  apply: async (p, ctx) => {
    let family: Family;
    return [
      await converge(
        ctx, 'Package present', p.name,
        async () => {
          family ??= await packageFamily(ctx);
          const v = await installedVersion(family, p.name, ctx);
          if (v === null) return `${p.name} is not installed`;
          if (p.version !== undefined && v !== p.version) return `${p.name} is at ${v}, not ${p.version}`;
          return null;
        },
        () => pkgTool(family, 'install', p.name, p.version, ctx),
        { ok: `${p.name} is installed`, repaired: `${p.name} was installed` },
      ),
    ];
  },
};

export const packageAbsent: Method<ParamsOf<typeof packageAbsentSpec>> = {
  ...packageAbsentSpec,
  apply: async (p, ctx) => {
    let family: Family;
    return [
      await converge(
        ctx, 'Package absent', p.name,
        async () => {
          family ??= await packageFamily(ctx);
          return (await installedVersion(family, p.name, ctx)) === null ? null : `${p.name} is installed`;
        },
        () => pkgTool(family, 'remove', p.name, undefined, ctx),
        { ok: `${p.name} is not installed`, repaired: `${p.name} was removed` },
      ),
    ];
  },
};


function serviceMethod(name: 'service_running' | 'service_enabled'): Method<{ name: string }> {
  const running = name === 'service_running';
  const component = running ? 'Service running' : 'Service enabled';
  return {
    ...(running ? serviceRunningSpec : serviceEnabledSpec),
    apply: async (p, ctx) => [
      await converge(
        ctx, component, p.name,
        async () => {
          const r = await run('systemctl', [running ? 'is-active' : 'is-enabled', '--quiet', p.name], ctx);
          return r.code === 0 ? null : `${p.name} is not ${running ? 'running' : 'enabled'}`;
        },
        async () => {
          const r = await run('systemctl', [running ? 'start' : 'enable', p.name], ctx);
          if (r.code !== 0) throw capstanError('ERR_INTERNAL', `systemctl ${running ? 'start' : 'enable'} ${p.name} failed: ${r.stderr.trim()}`);
        },
        { ok: `${p.name} is ${running ? 'running' : 'enabled'}`, repaired: `${p.name} was ${running ? 'started' : 'enabled'}` },
      ),
    ],
  };
}

export const serviceRunning = serviceMethod('service_running');
export const serviceEnabled = serviceMethod('service_enabled');


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
