/** File methods: content, line present, absent, permissions, directory, file from the shared folder. */
import { createHash, randomBytes } from 'node:crypto';
import { chmod, chown, lstat, mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import {
  capstanError, directoryPresentSpec, fileAbsentSpec, fileContentSpec, fileFromSharedFolderSpec, fileLinePresentSpec,
  filePermissionsSpec,
} from '@capstan/shared/agent';
import { converge, type Method, type ParamsOf } from './types.js';

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
        await mkdir(dirname(p.path), { recursive: true });
        await installFile(p.path, p.content, p.mode);
      },
      { ok: `${p.path} has the expected content`, repaired: `${p.path} content was set` },
    ),
  ],
};

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
        const cur = (await readOrNull(p.path))?.toString('utf8') ?? '';
        const sep = cur.length > 0 && !cur.endsWith('\n') ? '\n' : '';
        await mkdir(dirname(p.path), { recursive: true });
        await installFile(p.path, `${cur}${sep}${p.line}\n`);
      },
      { ok: `${p.path} contains the line`, repaired: `line added to ${p.path}` },
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
        await mkdir(p.path, { recursive: true, mode: p.mode ?? 0o755 });
        if (p.mode !== undefined) await chmod(p.path, p.mode);
      },
      { ok: `${p.path} is a directory`, repaired: `${p.path} was created` },
    ),
  ],
};

export const fileFromSharedFolder: Method<ParamsOf<typeof fileFromSharedFolderSpec>> = {
  ...fileFromSharedFolderSpec,
  apply: async (p, ctx) => [
    await converge(
      ctx, 'File from shared folder', p.path,
      async () => {
        const cur = await readOrNull(p.path);
        if (cur === null) return `${p.path} does not exist`;
        if (sha256(cur) !== p.sha256) return `${p.path} does not match sha256 ${p.sha256.slice(0, 12)}…`;
        if (p.mode !== undefined && ((await stat(p.path)).mode & 0o7777) !== p.mode) return `${p.path} mode differs`;
        return null;
      },
      async () => {
        const data = await ctx.fetchShared(p.source, p.sha256);
        // Never install bytes that are not the ones the signed policy names.
        if (sha256(data) !== p.sha256) throw capstanError('ERR_ARTIFACT_HASH', `shared-folder ${p.source} does not match its sha256`);
        await mkdir(dirname(p.path), { recursive: true });
        await installFile(p.path, data, p.mode);
      },
      { ok: `${p.path} matches the shared folder`, repaired: `${p.path} was installed from the shared folder` },
    ),
  ],
};
