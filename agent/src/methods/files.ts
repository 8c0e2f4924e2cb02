/** File methods: content, line present, absent, permissions, directory, file from the shared folder. */
import { createHash, randomBytes } from 'node:crypto';
import { chmod, chown, lstat, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { makeDir } from '@capstan/shared/dir';
import { capstanError } from '@capstan/shared/errors';
import { directoryPresentSpec, fileAbsentSpec, fileContentSpec, fileFromSharedFolderSpec, fileLinePresentSpec, filePermissionsSpec } from '@capstan/shared/policy/methods';
import { contentDiff, contentOf, modeLine, octal, ownerLine, pendingContentNote, readContent } from './diff.js';
import { converge, unlessHidden, type Method, type MethodContext, type ParamsOf } from './types.js';

async function readOrNull(path: string): Promise<Buffer | null> {
  try {
    return await readFile(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/**
 * Replace a file atomically (temp file in the same directory, then rename), keeping its mode.
 * The temporary name is unpredictable and created exclusively ('wx': O_EXCL, which also refuses
 * an existing symlink), so nobody who can write to the directory can redirect the write.
 */
export async function installFile(path: string, data: Buffer | string, mode?: number): Promise<void> {
  const prev = await stat(path).catch(() => null);
  const tmp = `${path}.capstan-${randomBytes(6).toString('hex')}.tmp`;
  try {
    await writeFile(tmp, data, { mode: mode ?? (prev ? prev.mode & 0o7777 : 0o644), flag: 'wx' });
    if (mode !== undefined) await chmod(tmp, mode);
    else if (prev) await chmod(tmp, prev.mode & 0o7777);
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true }).catch(() => undefined);
    throw err;
  }
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/**
 * What installing `next` at `path` (with `mode`, when the directive sets one) changes: the content
 * diff when the content differs, a mode line when the mode does; a created file is announced with
 * its diff from /dev/null.
 */
async function installDiff(path: string, next: Buffer, mode: number | undefined, ctx: MethodContext): Promise<string> {
  const cur = await readContent(path, ctx.diff.maxFileSize);
  const after = contentOf(next, ctx.diff.maxFileSize);
  let text = cur === null || cur.sha256 !== after.sha256 ? await contentDiff(path, cur, after, ctx.diff) : '';
  if (cur === null && mode !== undefined) text = text.replace(/^created .*\n/, (l) => `${l.slice(0, -1)} (mode ${octal(mode)})\n`);
  if (cur !== null && mode !== undefined) {
    const was = (await stat(path)).mode & 0o7777;
    if (was !== mode) text += modeLine(was, mode);
  }
  return text;
}

export const fileContent: Method<ParamsOf<typeof fileContentSpec>> = {
  ...fileContentSpec,
  apply: async (p, ctx) => [
    await converge(
      ctx, 'File content', p.path,
      async () => {
        const cur = await readOrNull(p.path);
        if (cur === null) return `${p.path} does not exist`;
        if (!cur.equals(Buffer.from(p.content))) return `${p.path} content differs`;
        if (p.mode !== undefined && ((await stat(p.path)).mode & 0o7777) !== p.mode) return `${p.path} mode differs`;
        return null;
      },
      async () => {
        await makeDir(dirname(p.path));
        await installFile(p.path, p.content, p.mode);
      },
      { ok: `${p.path} has the expected content`, repaired: `${p.path} content was set` },
      unlessHidden(p, () => installDiff(p.path, Buffer.from(p.content), p.mode, ctx)),
    ),
  ],
};

/** The file's text with `line` appended (after a newline when the last line has none). */
function withLine(cur: Buffer | null, line: string): string {
  const text = cur?.toString('utf8') ?? '';
  const sep = text.length > 0 && !text.endsWith('\n') ? '\n' : '';
  return `${text}${sep}${line}\n`;
}

export const fileLinePresent: Method<ParamsOf<typeof fileLinePresentSpec>> = {
  ...fileLinePresentSpec,
  apply: async (p, ctx) => [
    await converge(
      ctx, 'File line', `${p.path}: ${p.line}`,
      async () => {
        const cur = await readOrNull(p.path);
        if (cur === null) return `${p.path} does not exist`;
        return cur.toString('utf8').split(/\r?\n/).includes(p.line) ? null : `line missing from ${p.path}`;
      },
      async () => {
        await makeDir(dirname(p.path));
        await installFile(p.path, withLine(await readOrNull(p.path), p.line));
      },
      { ok: `${p.path} contains the line`, repaired: `line added to ${p.path}` },
      unlessHidden(p, async () => installDiff(p.path, Buffer.from(withLine(await readOrNull(p.path), p.line)), undefined, ctx)),
    ),
  ],
};

export const fileAbsent: Method<ParamsOf<typeof fileAbsentSpec>> = {
  ...fileAbsentSpec,
  apply: async (p, ctx) => [
    await converge(
      ctx, 'File absent', p.path,
      async () => {
        const s = await lstat(p.path).catch(() => null);
        if (!s) return null;
        if (s.isDirectory()) throw capstanError('ERR_METHOD_PARAMS', `${p.path} is a directory, not removed`);
        return `${p.path} exists`;
      },
      () => rm(p.path, { force: true }),
      { ok: `${p.path} is absent`, repaired: `${p.path} was removed` },
      unlessHidden(p, async () => {
        const s = await lstat(p.path);
        // A link is removed, not what it points to: say so, and show nothing of the target.
        if (!s.isFile()) return `deleted ${p.path} (${s.isSymbolicLink() ? 'a symbolic link' : 'not a regular file'})\n`;
        return contentDiff(p.path, await readContent(p.path, ctx.diff.maxFileSize), null, ctx.diff);
      }),
    ),
  ],
};


export const filePermissions: Method<ParamsOf<typeof filePermissionsSpec>> = {
  ...filePermissionsSpec,
  apply: async (p, ctx) => [
    await converge(
      ctx, 'File permissions', p.path,
      async () => {
        const s = await stat(p.path).catch(() => null);
        if (!s) throw capstanError('ERR_METHOD_PARAMS', `${p.path} does not exist`);
        const drift: string[] = [];
        if (p.mode !== undefined && (s.mode & 0o7777) !== p.mode) drift.push(`mode ${(s.mode & 0o7777).toString(8)} ≠ ${p.mode.toString(8)}`);
        if (p.owner !== undefined && s.uid !== p.owner) drift.push(`owner ${s.uid} ≠ ${p.owner}`);
        if (p.group !== undefined && s.gid !== p.group) drift.push(`group ${s.gid} ≠ ${p.group}`);
        return drift.length ? drift.join(', ') : null;
      },
      async () => {
        if (p.mode !== undefined) await chmod(p.path, p.mode);
        if (p.owner !== undefined || p.group !== undefined) {
          const s = await stat(p.path);
          await chown(p.path, p.owner ?? s.uid, p.group ?? s.gid);
        }
      },
      { ok: `${p.path} permissions are correct`, repaired: `${p.path} permissions were set` },
      // Modes and owners are not content: they are shown for secret files too.
      unlessHidden(p, async () => {
        const s = await stat(p.path);
        let text = p.mode !== undefined && (s.mode & 0o7777) !== p.mode ? modeLine(s.mode, p.mode) : '';
        const next = { uid: p.owner ?? s.uid, gid: p.group ?? s.gid };
        if (next.uid !== s.uid || next.gid !== s.gid) text += await ownerLine(s, next);
        return text;
      }),
    ),
  ],
};

export const directoryPresent: Method<ParamsOf<typeof directoryPresentSpec>> = {
  ...directoryPresentSpec,
  apply: async (p, ctx) => [
    await converge(
      ctx, 'Directory', p.path,
      async () => {
        const s = await stat(p.path).catch(() => null);
        if (!s) return `${p.path} does not exist`;
        if (!s.isDirectory()) throw capstanError('ERR_METHOD_PARAMS', `${p.path} exists and is not a directory`);
        if (p.mode !== undefined && (s.mode & 0o7777) !== p.mode) return `${p.path} mode differs`;
        return null;
      },
      async () => {
        await makeDir(p.path, p.mode ?? 0o755);
        if (p.mode !== undefined) await chmod(p.path, p.mode);
      },
      { ok: `${p.path} is a directory`, repaired: `${p.path} was created` },
      unlessHidden(p, async () => {
        const s = await stat(p.path).catch(() => null);
        if (!s) return `created directory ${p.path}${p.mode !== undefined ? ` (mode ${octal(p.mode)})` : ''}\n`;
        return p.mode !== undefined ? modeLine(s.mode, p.mode) : '';
      }),
    ),
  ],
};

export const fileFromSharedFolder: Method<ParamsOf<typeof fileFromSharedFolderSpec>> = {
  ...fileFromSharedFolderSpec,
  apply: async (p, ctx) => {
    // One download serves both the diff and the install.
    let fetched: Promise<Buffer> | undefined;
    const download = () =>
      (fetched ??= ctx.fetchShared(p.source, p.sha256).then((data) => {
        // Never install (nor show) bytes that are not the ones the signed policy names.
        if (sha256(data) !== p.sha256) throw capstanError('ERR_ARTIFACT_HASH', `shared-folder ${p.source} does not match its sha256`);
        return data;
      }));
    return [await converge(
      ctx, 'File from shared folder', p.path,
      async () => {
        const cur = await readOrNull(p.path);
        if (cur === null) return `${p.path} does not exist`;
        if (sha256(cur) !== p.sha256) return `${p.path} does not match sha256 ${p.sha256.slice(0, 12)}…`;
        if (p.mode !== undefined && ((await stat(p.path)).mode & 0o7777) !== p.mode) return `${p.path} mode differs`;
        return null;
      },
      async () => {
        const data = await download();
        await makeDir(dirname(p.path));
        await installFile(p.path, data, p.mode);
      },
      { ok: `${p.path} matches the shared folder`, repaired: `${p.path} was installed from the shared folder` },
      unlessHidden(p, async () => {
        // Audit and dry runs download nothing (drift that stays would cost a download every run):
        // they name the content by its hash.
        if (ctx.mode === 'audit' || ctx.dryRun) {
          const cur = await readContent(p.path, ctx.diff.maxFileSize);
          let text = cur === null || cur.sha256 !== p.sha256 ? await pendingContentNote(p.path, cur, p.sha256, ctx.diff) : '';
          if (cur !== null && p.mode !== undefined) {
            const was = (await stat(p.path)).mode & 0o7777;
            if (was !== p.mode) text += modeLine(was, p.mode);
          }
          return text;
        }
        return installDiff(p.path, await download(), p.mode, ctx);
      }),
    )];
  },
};
