/**
 * Package repositories: an APT source in deb822 form with its signing key, then `apt-get update`
 * of that source alone; a YUM/DNF .repo file with its key, then `rpm --import` of a new key.
 *
 * The command after a change is part of the change: when it fails, the files are put back as they
 * were (rollback) and the outcome is an error, so the next run sees the drift and tries again,
 * rather than a repository on disk that apt has never fetched, or a key rpm never imported.
 */
import { capstanError } from '@capstan/shared/errors';
import { aptRepositorySpec, yumRepositorySpec } from '@capstan/shared/policy/methods';
import { run, type Method, type MethodContext, type ParamsOf } from './types.js';
import { convergeParts, filePart, type Part } from './write.js';

const header = (method: string, name: string) => `# Managed by Capstan (${method} ${name}): changes made here are overwritten.\n`;

type AptParams = ParamsOf<typeof aptRepositorySpec>;
type YumParams = ParamsOf<typeof yumRepositorySpec>;

/** sources.list(5)'s deb822 form: one stanza. */
export function aptSources(p: AptParams): string {
  const fields: Array<[string, string[]]> = [
    ['Types', p.types], ['URIs', p.uris], ['Suites', p.suites], ['Components', p.components],
    ['Architectures', p.architectures], ['Signed-By', [p.signed_by]], ['Enabled', p.enabled ? [] : ['no']],
  ];
  return header('apt_repository', p.name) + fields.filter(([, v]) => v.length > 0).map(([k, v]) => `${k}: ${v.join(' ')}\n`).join('');
}

async function mustRun(cmd: string, args: string[], ctx: MethodContext): Promise<void> {
  const r = await run(cmd, args, ctx);
  if (r.code !== 0) throw capstanError('ERR_COMMAND_FAILED', `${cmd} ${args[0]} failed (exit ${r.code}), the change was undone: ${(r.stderr.trim() || r.stdout.trim()).slice(-500)}`);
}

export const aptRepository: Method<AptParams> = {
  ...aptRepositorySpec,
  apply: async (p, ctx) => {
    const key = p.key;
    const parts: Part[] = [];
    if (key !== undefined) parts.push(filePart({ path: p.signed_by, want: () => key, mode: 0o644 }, ctx));
    parts.push(filePart({ path: p.path, want: () => aptSources(p), mode: 0o644 }, ctx));
    return [
      await convergeParts(ctx, 'APT repository', p.name, parts, { ok: `APT source ${p.name} is configured`, repaired: `APT source ${p.name} was configured${p.update && p.enabled ? ' and fetched' : ''}` }, {
        show_diff: p.show_diff,
        rollback: true,
        after: async (changed) => {
          if (!p.update || !p.enabled || !changed.some(Boolean)) return;
          // This source alone: the other sources' lists are neither fetched nor (List-Cleanup) removed.
          await mustRun('apt-get', [
            'update', '-q', '-o', `Dir::Etc::sourcelist=${p.path}`, '-o', 'Dir::Etc::sourceparts=-', '-o', 'APT::Get::List-Cleanup=0',
          ], { ...ctx, env: { ...ctx.env, DEBIAN_FRONTEND: 'noninteractive' } });
        },
      }),
    ];
  },
};

/** The .repo file: one section; several URLs on continuation lines; `options` after, sorted. */
export function yumRepo(p: YumParams): string {
  const lines = [`[${p.name}]`, `name=${p.description}`];
  const multi = (k: string, v: string[]) => lines.push(`${k}=${v.join('\n        ')}`);
  if (p.baseurl.length > 0) multi('baseurl', p.baseurl);
  if (p.mirrorlist) lines.push(`mirrorlist=${p.mirrorlist}`);
  if (p.metalink) lines.push(`metalink=${p.metalink}`);
  lines.push(`enabled=${p.enabled ? 1 : 0}`, `gpgcheck=${p.gpgcheck ? 1 : 0}`);
  if (p.gpgkey) multi('gpgkey', 'text' in p.gpgkey ? [`file://${p.key_path}`] : p.gpgkey.urls);
  if (p.priority !== undefined) lines.push(`priority=${p.priority}`);
  for (const k of Object.keys(p.options).sort()) lines.push(`${k}=${p.options[k]}`);
  return `${header('yum_repository', p.name)}${lines.join('\n')}\n`;
}

export const yumRepository: Method<YumParams> = {
  ...yumRepositorySpec,
  apply: async (p, ctx) => {
    const parts: Part[] = [];
    const key = p.gpgkey && 'text' in p.gpgkey ? p.gpgkey.text : undefined;
    if (key !== undefined) parts.push(filePart({ path: p.key_path, want: () => key, mode: 0o644 }, ctx));
    parts.push(filePart({ path: p.path, want: () => yumRepo(p), mode: 0o644 }, ctx));
    return [
      await convergeParts(ctx, 'YUM repository', p.name, parts, { ok: `repository ${p.name} is configured`, repaired: `repository ${p.name} was configured` }, {
        show_diff: p.show_diff,
        rollback: true,
        after: async (changed) => {
          if (key !== undefined && changed[0]) await mustRun('rpm', ['--import', p.key_path], ctx);
        },
      }),
    ];
  },
};
