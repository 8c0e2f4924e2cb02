/**
 * Packages through the host's own package manager: dpkg/apt, rpm/dnf or apk, whichever is on
 * PATH (in that order). `version` holds a package at one version, up or down, or with "latest"
 * follows the manager's candidate; the candidate is what the manager's metadata says now (apt's
 * lists as `apt-get update` last fetched them, dnf's cache under its metadata_expire).
 */
import { capstanError } from '@capstan/shared/errors';
import { packageAbsentSpec, packagePresentSpec } from '@capstan/shared/policy/methods';
import { onPath, tool, toolError } from './tool.js';
import { converge, run, type Method, type MethodContext, type ParamsOf } from './types.js';

type Family = 'dpkg' | 'rpm' | 'apk';

export async function packageFamily(ctx: MethodContext): Promise<Family> {
  if (await onPath('dpkg-query', ctx.env)) return 'dpkg';
  if (await onPath('rpm', ctx.env)) return 'rpm';
  if (await onPath('apk', ctx.env)) return 'apk';
  throw capstanError('ERR_METHOD_TOOL', 'no package manager found (dpkg, rpm or apk)');
}

interface Installed {
  /** The installed version, null when not installed. */
  version: string | null;
  /** Removed but its configuration files are left (dpkg's config-files state). */
  residue: boolean;
}

/** What the package database says of `name`. */
export async function installed(family: Family, name: string, ctx: MethodContext): Promise<Installed> {
  if (family === 'dpkg') {
    const r = await run('dpkg-query', ['-W', '-f', '${db:Status-Status} ${Version}\n', name], ctx);
    // One line per architecture of a multi-arch package: any installed one counts.
    const lines = r.code === 0 ? r.stdout.trim().split('\n').map((l) => l.split(' ')) : [];
    const inst = lines.find(([s]) => s === 'installed');
    return { version: inst ? (inst[1] ?? '') : null, residue: !inst && lines.some(([s]) => s === 'config-files') };
  }
  if (family === 'rpm') {
    const r = await run('rpm', ['-q', '--qf', '%|EPOCH?{%{EPOCH}:}:{}|%{VERSION}-%{RELEASE}\n', name], ctx);
    return { version: r.code === 0 ? (r.stdout.trim().split('\n').pop() ?? '') : null, residue: false };
  }
  const r = await run('apk', ['info', '-e', '-v', name], ctx);
  const m = new RegExp(`^${name.replace(/[.+]/g, '\\$&')}-(.+)$`).exec(r.stdout.trim());
  return { version: r.code === 0 && m ? m[1]! : null, residue: false };
}

/**
 * An installed rpm version matches a pin given as `[epoch:]version[-release]`: the release may be
 * left out, and an epoch of 0 is no epoch.
 */
export function rpmMatches(installedVersion: string, pin: string): boolean {
  const norm = (v: string) => v.replace(/^0:/, '');
  const have = norm(installedVersion);
  const want = norm(pin);
  return have === want || (!want.includes('-') && have.slice(0, have.lastIndexOf('-')) === want);
}

const matches = (family: Family, have: string, pin: string) => (family === 'rpm' ? rpmMatches(have, pin) : have === pin);

/**
 * The newer version the manager would upgrade an installed package to, or null when there is
 * none (apt's Candidate is the installed version then; dnf and apk list nothing).
 */
export async function upgradeCandidate(family: Family, name: string, have: string, ctx: MethodContext): Promise<string | null> {
  if (family === 'dpkg') {
    const r = await tool('apt-cache', ['policy', name], ctx);
    const candidate = /^\s*Candidate:\s*(\S+)/m.exec(r.stdout)?.[1];
    return candidate === undefined || candidate === '(none)' || candidate === have ? null : candidate;
  }
  if (family === 'rpm') {
    // An "Available Upgrades" list naming the package, or exit 1 with "No matching Packages to list".
    const r = await run('dnf', ['-q', 'list', '--upgrades', name], ctx);
    if (r.code === 1 && /No matching Packages/i.test(r.stderr)) return null;
    if (r.code !== 0) throw toolError('dnf', r);
    const line = r.stdout.split('\n').map((l) => l.trim().split(/\s+/)).find(([n]) => n !== undefined && (n === name || n.startsWith(`${name}.`)));
    return line?.[1] ?? null;
  }
  // `apk version -l '<'` lists only what has a newer version: "name-1.0-r0  <  1.1-r0".
  const r = await tool('apk', ['version', '-l', '<', name], ctx);
  const line = r.stdout.split('\n').find((l) => l.startsWith(`${name}-`));
  return line ? (line.split('<').pop()?.trim() ?? null) : null;
}

const APT_OPTIONS = ['-y', '-q', '-o', 'Dpkg::Options::=--force-confdef', '-o', 'Dpkg::Options::=--force-confold'];
const NONINTERACTIVE = { DEBIAN_FRONTEND: 'noninteractive' };

/** Install (absent), upgrade (`upgrade`) or move to `version` (up or down). */
async function install(family: Family, name: string, how: { version?: string; upgrade?: boolean }, ctx: MethodContext): Promise<void> {
  const { version, upgrade } = how;
  if (family === 'dpkg') {
    const args = version !== undefined ? ['install', ...APT_OPTIONS, '--allow-downgrades', `${name}=${version}`] : ['install', ...APT_OPTIONS, ...(upgrade ? ['--only-upgrade'] : []), name];
    await tool('apt-get', args, ctx, { env: NONINTERACTIVE });
  } else if (family === 'rpm') {
    // dnf install of an older version-release downgrades; `upgrade` leaves absent packages absent.
    await tool('dnf', [upgrade ? 'upgrade' : 'install', '-y', '-q', version !== undefined ? `${name}-${version}` : name], ctx);
  } else {
    await tool('apk', ['add', ...(upgrade ? ['--upgrade'] : []), version !== undefined ? `${name}=${version}` : name], ctx);
  }
}

async function remove(family: Family, name: string, purge: boolean, ctx: MethodContext): Promise<void> {
  if (family === 'dpkg') await tool('apt-get', [purge ? 'purge' : 'remove', ...APT_OPTIONS, name], ctx, { env: NONINTERACTIVE });
  else if (family === 'rpm') await tool('dnf', ['remove', '-y', '-q', name], ctx);
  else await tool('apk', ['del', ...(purge ? ['--purge'] : []), name], ctx);
}

export const packagePresent: Method<ParamsOf<typeof packagePresentSpec>> = {
  ...packagePresentSpec,
  apply: async (p, ctx) => {
    let family: Family;
    const latest = p.version === 'latest';
    const pin = latest ? undefined : p.version;
    // What the last check found: the repair does exactly what it describes.
    let plan: { upgrade?: boolean; version?: string } = {};
    let done = plan;
    return [
      await converge(
        ctx, 'Package present', p.name,
        async () => {
          family ??= await packageFamily(ctx);
          const have = (await installed(family, p.name, ctx)).version;
          plan = { version: pin };
          if (have === null) return `${p.name} is not installed`;
          if (pin !== undefined && !matches(family, have, pin)) return `${p.name} is at ${have}, not ${pin}`;
          if (latest) {
            const candidate = await upgradeCandidate(family, p.name, have, ctx);
            plan = { upgrade: true };
            if (candidate !== null) return `${p.name} is at ${have}, ${candidate} is available`;
          }
          return null;
        },
        () => install(family, p.name, (done = plan), ctx),
        {
          ok: `${p.name} is installed${latest ? ' at the latest version' : pin !== undefined ? ` at ${pin}` : ''}`,
          // Read after the repair, when the plan is known.
          get repaired() {
            return `${p.name} was ${done.upgrade ? 'upgraded' : pin !== undefined ? `set to ${pin}` : 'installed'}`;
          },
        },
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
          const state = await installed(family, p.name, ctx);
          if (state.version !== null) return `${p.name} is installed`;
          return p.purge && state.residue ? `${p.name} has configuration files left` : null;
        },
        () => remove(family, p.name, p.purge, ctx),
        { ok: `${p.name} is not installed`, repaired: `${p.name} was ${p.purge ? 'purged' : 'removed'}` },
      ),
    ];
  },
};
