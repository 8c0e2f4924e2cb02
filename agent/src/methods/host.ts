/**
 * The host itself: kernel modules (loaded now, and loaded at boot through modules-load.d) and the
 * host name (/etc/hostname and the live name).
 */
import { stat } from 'node:fs/promises';
import os from 'node:os';
import { basename, join } from 'node:path';
// The registry first: the specs module below takes its helpers from it (see its header).
import '@capstan/shared/policy/methods';
import { hostnameSpec, kernelModuleLoadedSpec } from '@capstan/shared/policy/specs/system';
import { meaningfulLines, readText, textDiff, tool, writeText } from './tool.js';
import { converge, unlessHidden, type Method, type MethodContext, type Outcome, type ParamsOf } from './types.js';

/** The kernel writes module names with `_`; modprobe takes `-` and `_` alike. */
const modName = (n: string) => n.replace(/-/g, '_');

/**
 * Whether a module is in the kernel: listed in <proc>/modules (loaded; the file is absent on a
 * kernel built without module support), or built in (modules.builtin of the running kernel).
 */
export async function moduleState(name: string, ctx: MethodContext): Promise<'loaded' | 'built in' | null> {
  const want = modName(name);
  const loaded = await readText(join(ctx.procRoot ?? '/proc', 'modules'));
  if (loaded?.split('\n').some((l) => l.split(' ')[0] === want)) return 'loaded';
  const builtin = await readText(`/lib/modules/${os.release()}/modules.builtin`);
  const isIt = (l: string) => modName(basename(l.trim()).replace(/\.ko(\.[a-z]+)?$/, '')) === want;
  return builtin?.split('\n').some(isIt) ? 'built in' : null;
}

/** systemd-modules-load reads one module name per line from /etc/modules-load.d/*.conf at boot. */
const persistFile = (name: string) => `/etc/modules-load.d/${name}.conf`;
const withLine = (text: string | null, line: string) => (text === null || text === '' ? `${line}\n` : `${text}${text.endsWith('\n') ? '' : '\n'}${line}\n`);

export const kernelModuleLoaded: Method<ParamsOf<typeof kernelModuleLoadedSpec>> = {
  ...kernelModuleLoadedSpec,
  apply: async (p, ctx) => {
    const out: Outcome[] = [];
    let state: string | null = null;
    out.push(
      await converge(
        ctx, 'Kernel module loaded', p.name,
        async () => ((state = await moduleState(p.name, ctx)) ? null : `${p.name} is not loaded`),
        async () => void (await tool('modprobe', [p.name], ctx)),
        {
          get ok() {
            return `${p.name} is ${state ?? 'loaded'}`;
          },
          repaired: `${p.name} was loaded`,
        },
      ),
    );
    if (!p.persist) return out;
    const file = persistFile(p.name);
    const listed = async () => meaningfulLines(await readText(file)).some((l) => modName(l) === modName(p.name));
    out.push(
      await converge(
        ctx, 'Kernel module persistent', p.name,
        async () => ((await listed()) ? null : `${file} does not list ${p.name}`),
        async () => writeText(file, withLine(await readText(file), p.name)),
        { ok: `${file} loads ${p.name} at boot`, repaired: `${p.name} added to ${file}` },
        unlessHidden(p, async () => {
          const cur = await readText(file);
          return textDiff(file, cur, withLine(cur, p.name), ctx);
        }),
      ),
    );
    return out;
  },
};

const HOSTNAME_FILE = '/etc/hostname';

/** As sd_booted(3): systemd is the init system when /run/systemd/system exists. */
const systemdBooted = () => stat('/run/systemd/system').then((s) => s.isDirectory(), () => false);

/**
 * The static name (/etc/hostname's first line) and the live one (the kernel's, per UTS
 * namespace). Under systemd `hostnamectl set-hostname` sets both, through systemd-hostnamed, so
 * that its view stays right; elsewhere the file is written and `hostname <name>` sets the kernel's.
 */
export const hostname: Method<ParamsOf<typeof hostnameSpec>> = {
  ...hostnameSpec,
  apply: async (p, ctx) => {
    const look = async () => ({ text: await readText(HOSTNAME_FILE), live: os.hostname() });
    const fileName = (text: string | null) => meaningfulLines(text)[0] ?? null;
    return [
      await converge(
        ctx, 'Hostname', p.name,
        async () => {
          const { text, live } = await look();
          const drift = [
            ...(fileName(text) !== p.name ? [`${HOSTNAME_FILE} ${text === null ? 'does not exist' : `says ${fileName(text) ?? 'nothing'}`}`] : []),
            ...(live !== p.name ? [`the live host name is ${live}`] : []),
          ];
          return drift.length ? drift.join(', ') : null;
        },
        async () => {
          if (await systemdBooted()) return void (await tool('hostnamectl', ['set-hostname', p.name], ctx));
          const { text, live } = await look();
          if (fileName(text) !== p.name) await writeText(HOSTNAME_FILE, `${p.name}\n`, 0o644);
          if (live !== p.name) await tool('hostname', [p.name], ctx);
        },
        { ok: `the host name is ${p.name}`, repaired: `the host name was set to ${p.name}` },
        unlessHidden(p, async () => {
          const { text, live } = await look();
          const file = fileName(text) === p.name ? '' : await textDiff(HOSTNAME_FILE, text, `${p.name}\n`, ctx);
          return `${file}${live !== p.name ? `hostname ${live} → ${p.name}\n` : ''}`;
        }),
      ),
    ];
  },
};
