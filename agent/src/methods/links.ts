/**
 * Symbolic links (symlink_present, symlink_absent) and the time zone, which is one
 * (/etc/localtime → zoneinfo) plus Debian's /etc/timezone.
 *
 * A link is replaced atomically: made under a temporary name beside it, then renamed over the
 * path. What is in the way is replaced only when it is a link (to elsewhere), or, with `force`, a
 * file or an empty directory; a non-empty directory never is (ERR_FILE_TYPE).
 */
import { randomBytes } from 'node:crypto';
import { readdir, readlink, rename, rm, rmdir, stat, symlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { makeDir } from '@capstan/shared/dir';
import { capstanError } from '@capstan/shared/errors';
import { symlinkAbsentSpec, symlinkPresentSpec, timezoneSpec } from '@capstan/shared/policy/methods';
import { converge, unlessHidden, type Method, type MethodContext, type ParamsOf } from './types.js';
import { convergeParts, filePart, kindOf, lstatOrNull, type Part, type Undo } from './write.js';

async function makeLink(path: string, target: string): Promise<void> {
  await makeDir(dirname(path));
  const tmp = `${path}.capstan-${randomBytes(6).toString('hex')}.tmp`;
  await symlink(target, tmp);
  await rename(tmp, path).catch(async (err: unknown) => {
    await rm(tmp, { force: true });
    throw err;
  });
}

/** `path` a symbolic link to `target`. */
export function linkPart(path: string, target: string, force: boolean): Part {
  return {
    plan: async () => {
      const st = await lstatOrNull(path);
      const was = st?.isSymbolicLink() ? await readlink(path) : null;
      if (st && was === target) return { drift: [], describe: async () => '', apply: async () => null };
      let note = '';
      let clear = async () => {};
      if (st && !st.isSymbolicLink()) {
        if (st.isDirectory()) {
          if ((await readdir(path)).length > 0) throw capstanError('ERR_FILE_TYPE', `${path} is a non-empty directory: never replaced by a link`);
          if (!force) throw capstanError('ERR_FILE_TYPE', `${path} is an empty directory: replaced by a link only with force`);
          note = ' (replaces an empty directory)';
          // rename() cannot put a link over a directory: the directory goes first.
          clear = () => rmdir(path);
        } else {
          if (!force) throw capstanError('ERR_FILE_TYPE', `${path} is ${kindOf(st)}: replaced by a link only with force`);
          note = ` (replaces ${kindOf(st)} of ${st.size} bytes)`;
        }
      }
      return {
        drift: [st === null ? `${path} does not exist` : was !== null ? `${path} links to ${was}, not ${target}` : `${path} is ${kindOf(st)}, not a link`],
        describe: async () => (st === null ? `created link ${path} → ${target}\n` : `link ${path} → ${target}${was !== null ? ` (was → ${was})` : note}\n`),
        apply: async (): Promise<Undo> => {
          await clear();
          await makeLink(path, target);
          return was !== null ? () => makeLink(path, was) : () => rm(path, { force: true });
        },
      };
    },
  };
}

export const symlinkPresent: Method<ParamsOf<typeof symlinkPresentSpec>> = {
  ...symlinkPresentSpec,
  apply: async (p, ctx) => [
    await convergeParts(ctx, 'Symlink', p.path, [linkPart(p.path, p.target, p.force)], { ok: `${p.path} links to ${p.target}`, repaired: `${p.path} now links to ${p.target}` }, { show_diff: p.show_diff }),
  ],
};

/** Removes a link, never what it points to, and never anything that is not a link. */
export const symlinkAbsent: Method<ParamsOf<typeof symlinkAbsentSpec>> = {
  ...symlinkAbsentSpec,
  apply: async (p, ctx) => {
    const look = async () => {
      const st = await lstatOrNull(p.path);
      if (st && !st.isSymbolicLink()) throw capstanError('ERR_FILE_TYPE', `${p.path} is ${kindOf(st)}, not a link: not removed (file_absent removes files)`);
      return st ? readlink(p.path) : null;
    };
    return [
      await converge(
        ctx, 'Symlink absent', p.path,
        async () => {
          const to = await look();
          return to === null ? null : `${p.path} links to ${to}`;
        },
        () => rm(p.path, { force: true }),
        { ok: `${p.path} is not a link`, repaired: `link ${p.path} was removed` },
        unlessHidden(p, async () => `deleted link ${p.path} (→ ${await look()})\n`),
      ),
    ];
  },
};

/**
 * /etc/localtime a link to the zone's file (as timedatectl makes it), and /etc/timezone holding
 * the zone's name where Debian keeps it. A zone the node's zoneinfo does not have is refused.
 */
export const timezone: Method<ParamsOf<typeof timezoneSpec>> = {
  ...timezoneSpec,
  apply: async (p, ctx: MethodContext) => {
    const zone = join(p.zoneinfo, p.name);
    const known = await stat(zone).then((s) => s.isFile(), () => false);
    if (!known) {
      return [{ component: 'Timezone', key: p.name, status: 'error', code: 'ERR_METHOD_PARAMS', message: `unknown time zone ${p.name}: ${zone} is not a zoneinfo file` }];
    }
    const file = p.timezone_file ?? ((await lstatOrNull('/etc/timezone')) ? '/etc/timezone' : '');
    const parts = [linkPart(p.localtime, zone, true)];
    if (file !== '') parts.push(filePart({ path: file, want: () => `${p.name}\n` }, ctx));
    return [await convergeParts(ctx, 'Timezone', p.name, parts, { ok: `the time zone is ${p.name}`, repaired: `the time zone was set to ${p.name}` }, { show_diff: p.show_diff })];
  },
};
