/**
 * Methods that shell out to the host's own tools, with timeouts and no shell: packages (dpkg/apt,
 * rpm/dnf, apk), services (systemctl), commands, and sysctl values.
 */
import { access, readFile, writeFile } from 'node:fs/promises';
import { constants } from 'node:fs';
import { delimiter, join } from 'node:path';
import { capstanError } from '@capstan/shared/agent';
import { converge, paramError, run, str, strList, type Method, type MethodContext } from './types.js';

const PKG_NAME = /^[A-Za-z0-9][A-Za-z0-9+._:-]{0,127}$/;

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

export const packagePresent: Method<{ name: string; version?: string }> = {
  name: 'package_present',
  components: (p) => [{ component: 'Package present', key: p.name }],
  validate: (p) => {
    const name = str('package_present', p, 'name');
    if (!PKG_NAME.test(name)) paramError('package_present', 'name', 'is not a package name');
    const version = str('package_present', p, 'version', { optional: true });
    if (version !== undefined && !/^[A-Za-z0-9+.~:_-]{1,128}$/.test(version)) paramError('package_present', 'version', 'is not a version');
    return { name, version };
  },
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

export const packageAbsent: Method<{ name: string }> = {
  name: 'package_absent',
  components: (p) => [{ component: 'Package absent', key: p.name }],
  validate: (p) => {
    const name = str('package_absent', p, 'name');
    if (!PKG_NAME.test(name)) paramError('package_absent', 'name', 'is not a package name');
    return { name };
  },
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

const UNIT = /^[A-Za-z0-9@:._-]{1,200}$/;

function serviceMethod(name: 'service_running' | 'service_enabled'): Method<{ name: string }> {
  const running = name === 'service_running';
  const component = running ? 'Service running' : 'Service enabled';
  return {
    name,
    components: (p) => [{ component, key: p.name }],
    validate: (p) => {
      const unit = str(name, p, 'name');
      if (!UNIT.test(unit)) paramError(name, 'name', 'is not a unit name');
      return { name: unit };
    },
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

interface Cmd {
  command: string;
  args: string[];
}

function cmdParams(method: string, p: Record<string, unknown>): Cmd {
  return { command: str(method, p, 'command'), args: strList(method, p, 'args') };
}

export const commandCheck: Method<Cmd & { expect_exit: number }> = {
  name: 'command_check',
  auditOnly: true,
  components: (p) => [{ component: 'Command check', key: [p.command, ...p.args].join(' ') }],
  validate: (p) => {
    const e = p.expect_exit ?? 0;
    if (typeof e !== 'number' || !Number.isInteger(e) || e < 0 || e > 255) paramError('command_check', 'expect_exit', 'must be an exit code 0-255');
    return { ...cmdParams('command_check', p), expect_exit: e };
  },
  // Audit only: whatever the directive's mode, it looks and never changes anything.
  apply: async (p, ctx) => {
    const key = [p.command, ...p.args].join(' ');
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
export const commandRun: Method<Cmd & { creates?: string; unless?: Cmd }> = {
  name: 'command_run',
  components: (p) => [{ component: 'Command run', key: [p.command, ...p.args].join(' ') }],
  validate: (p) => {
    const base = cmdParams('command_run', p);
    const creates = str('command_run', p, 'creates', { optional: true, absolute: true });
    let unless: Cmd | undefined;
    if (p.unless !== undefined) {
      if (!p.unless || typeof p.unless !== 'object') paramError('command_run', 'unless', 'must be {command, args}');
      unless = cmdParams('command_run.unless', p.unless as Record<string, unknown>);
    }
    if (!creates && !unless) paramError('command_run', 'creates', 'or unless is required, so that the command runs only when needed');
    return { ...base, creates, unless };
  },
  apply: async (p, ctx) => {
    const key = [p.command, ...p.args].join(' ');
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

export const sysctlValue: Method<{ key: string; value: string }> = {
  name: 'sysctl_value',
  components: (p) => [{ component: 'Sysctl value', key: p.key }],
  validate: (p) => {
    const key = str('sysctl_value', p, 'key');
    if (!/^[a-z0-9_]+(\.[a-z0-9_*-]+)+$/i.test(key)) paramError('sysctl_value', 'key', 'is not a sysctl key such as net.ipv4.ip_forward');
    const v = p.value;
    if (typeof v !== 'string' && typeof v !== 'number') paramError('sysctl_value', 'value', 'must be a string or number');
    return { key, value: String(v) };
  },
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
      ),
    ];
  },
};
