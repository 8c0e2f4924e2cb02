/** File methods: content, line present, absent, permissions, directory, file from the shared folder. */
import { createHash } from 'node:crypto';
import { chmod, chown, lstat, mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { capstanError } from '@capstan/shared/agent';
import { converge, modeParam, paramError, str, type Method } from './types.js';

async function readOrNull(path: string): Promise<Buffer | null> {
  try {
    return await readFile(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/** Replace a file atomically (temp file in the same directory, then rename), keeping its mode. */
export async function installFile(path: string, data: Buffer | string, mode?: number): Promise<void> {
  const prev = await stat(path).catch(() => null);
  const tmp = `${path}.capstan-${process.pid}.tmp`;
  await writeFile(tmp, data, { mode: mode ?? (prev ? prev.mode & 0o7777 : 0o644) });
  if (mode !== undefined) await chmod(tmp, mode);
  else if (prev) await chmod(tmp, prev.mode & 0o7777);
  await rename(tmp, path);
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

export const fileContent: Method<{ path: string; content: string; mode?: number }> = {
  name: 'file_content',
  components: (p) => [{ component: 'File content', key: p.path }],
  validate: (p) => {
    const content = p.content;
    if (typeof content !== 'string') paramError('file_content', 'content', 'must be a string');
    return { path: str('file_content', p, 'path', { absolute: true }), content, mode: modeParam('file_content', p) };
  },
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

export const fileLinePresent: Method<{ path: string; line: string }> = {
  name: 'file_line_present',
  components: (p) => [{ component: 'File line', key: `${p.path}: ${p.line}` }],
  validate: (p) => {
    const line = str('file_line_present', p, 'line');
    if (/[\r\n]/.test(line)) paramError('file_line_present', 'line', 'must be a single line');
    return { path: str('file_line_present', p, 'path', { absolute: true }), line };
  },
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

export const fileAbsent: Method<{ path: string }> = {
  name: 'file_absent',
  components: (p) => [{ component: 'File absent', key: p.path }],
  validate: (p) => ({ path: str('file_absent', p, 'path', { absolute: true }) }),
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

interface Perms {
  path: string;
  mode?: number;
  owner?: number;
  group?: number;
}

function idParam(p: Record<string, unknown>, field: string): number | undefined {
  const v = p[field];
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) paramError('file_permissions', field, 'must be a numeric id');
  return v;
}

export const filePermissions: Method<Perms> = {
  name: 'file_permissions',
  components: (p) => [{ component: 'File permissions', key: p.path }],
  validate: (p) => {
    const out = { path: str('file_permissions', p, 'path', { absolute: true }), mode: modeParam('file_permissions', p), owner: idParam(p, 'owner'), group: idParam(p, 'group') };
    if (out.mode === undefined && out.owner === undefined && out.group === undefined) paramError('file_permissions', 'mode', 'or owner or group is required');
    return out;
  },
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

export const directoryPresent: Method<{ path: string; mode?: number }> = {
  name: 'directory_present',
  components: (p) => [{ component: 'Directory', key: p.path }],
  validate: (p) => ({ path: str('directory_present', p, 'path', { absolute: true }), mode: modeParam('directory_present', p) }),
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

export const fileFromSharedFolder: Method<{ source: string; path: string; sha256: string; mode?: number }> = {
  name: 'file_from_shared_folder',
  components: (p) => [{ component: 'File from shared folder', key: p.path }],
  validate: (p) => {
    const source = str('file_from_shared_folder', p, 'source');
    if (source.split('/').some((s) => s === '..' || s === '.') || source.startsWith('/') || source.includes('\\')) {
      paramError('file_from_shared_folder', 'source', 'must be a relative path inside the shared folder');
    }
    const hash = str('file_from_shared_folder', p, 'sha256');
    if (!/^[0-9a-f]{64}$/.test(hash)) paramError('file_from_shared_folder', 'sha256', 'must be 64 lowercase hex digits');
    return { source, path: str('file_from_shared_folder', p, 'path', { absolute: true }), sha256: hash, mode: modeParam('file_from_shared_folder', p) };
  },
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
        const data = await ctx.fetchShared(p.source);
        // Never install bytes that are not the ones the signed policy names.
        if (sha256(data) !== p.sha256) throw capstanError('ERR_ARTIFACT_HASH', `shared-folder ${p.source} does not match its sha256`);
        await mkdir(dirname(p.path), { recursive: true });
        await installFile(p.path, data, p.mode);
      },
      { ok: `${p.path} matches the shared folder`, repaired: `${p.path} was installed from the shared folder` },
    ),
  ],
};
