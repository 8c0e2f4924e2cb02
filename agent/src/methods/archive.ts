/**
 * `archive_from_shared_folder`: a bundle of files in Choria's archive convention. The shared
 * folder holds `<name>.tar.gz`, whose only top directory is `<name>/` and which carries
 * `<name>/SHA256SUMS` (`sha256sum` output: `<64 lowercase hex>  <relative path>` per line). The
 * signed directive names the archive's sha256 and the SUMS file's sha256, so every installed byte
 * traces back to the policy: archive hash → SUMS hash → each file's hash.
 *
 * The whole archive is read and checked before anything touches the disk, and refused (nothing
 * installed) for: a link, device, FIFO or any entry that is not a plain file or directory; an
 * absolute path, a `..` / `.` / empty segment, a backslash or NUL; an entry outside `<name>/`;
 * duplicate or conflicting entries; an upper-case or malformed SUMS line; a file the SUMS does not
 * list; a SUMS line naming no file; any hash mismatch. A good archive is written to a temporary
 * directory beside the target and renamed into place, so a reader sees the old bundle or the new
 * one, never half of one.
 *
 * Every run re-verifies the installed tree (SUMS hash, each file's hash, no extra file, no link)
 * and reinstalls on drift. `purge: true` removes the other bundles under the target (directories
 * holding a SHA256SUMS file) that no archive directive of the node's policy assigns there.
 *
 * Parsing uses `tar` (node-tar, npm's own implementation): its Parser hands over each entry's
 * header (type, path after pax/GNU long-name processing) before its data, and we never let it
 * write to the file system: extraction is ours, so the rules above are the only ones that apply.
 */
import { createHash, randomBytes } from 'node:crypto';
import { lstat, mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { ReadEntry } from 'tar';
import { makeDir } from '@capstan/shared/dir';
import { capstanError } from '@capstan/shared/errors';
import { archiveFromSharedFolderSpec, type ArchiveParams } from '@capstan/shared/policy/methods';
import { contentDiff, contentOf, modeLine, readContent } from './diff.js';
import { converge, unlessHidden, type Method, type MethodContext, type Outcome } from './types.js';

/** Bounds on what one archive may expand to (a small archive may not fill the disk or memory). */
export const MAX_ARCHIVE_ENTRIES = 10_000;
export const MAX_ARCHIVE_EXPANDED = 512 * 1024 * 1024;

const SUMS = 'SHA256SUMS';
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const invalid = (msg: string) => capstanError('ERR_ARCHIVE_INVALID', msg);

/** Relative path segments, refusing anything that could leave the bundle directory. */
function safeSegments(path: string, what: string): string[] {
  if (/[\x00-\x1f\x7f\\]/.test(path)) throw invalid(`${what} ${JSON.stringify(path)} contains a control character or a backslash`);
  if (path.startsWith('/')) throw invalid(`${what} ${JSON.stringify(path)} is absolute`);
  const segs = path.split('/');
  if (segs.some((s) => s === '..')) throw invalid(`${what} ${JSON.stringify(path)} contains ..`);
  if (segs.some((s) => s === '' || s === '.')) throw invalid(`${what} ${JSON.stringify(path)} has an empty or . segment`);
  return segs;
}

export interface SumsLine {
  hash: string;
  path: string;
}

/**
 * Parse a SHA256SUMS file strictly: `<64 lowercase hex><space><space or *><path>` per line, `\n`
 * line ends, one optional final newline, an optional `./` before the path (find . | sha256sum).
 */
export function parseSums(text: string): SumsLine[] {
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  if (lines.length === 0) throw invalid('SHA256SUMS lists no files');
  const seen = new Set<string>();
  return lines.map((line, i) => {
    const m = /^([0-9A-Fa-f]{64}) [ *](.+)$/.exec(line);
    if (!m) throw invalid(`SHA256SUMS line ${i + 1} is malformed`);
    // sha256sum writes lower case; Choria refuses anything else, and so do we (one spelling, one hash).
    if (/[A-F]/.test(m[1]!)) throw invalid(`SHA256SUMS line ${i + 1} has an upper-case hash`);
    const path = m[2]!.startsWith('./') ? m[2]!.slice(2) : m[2]!;
    safeSegments(path, `SHA256SUMS line ${i + 1}:`);
    if (path === SUMS) throw invalid('SHA256SUMS lists itself');
    if (seen.has(path)) throw invalid(`SHA256SUMS lists ${path} twice`);
    seen.add(path);
    return { hash: m[1]!, path };
  });
}

export interface ArchiveContent {
  /** Paths relative to the bundle directory (without `<name>/`), SHA256SUMS included. */
  files: Map<string, { data: Buffer; mode: number }>;
  dirs: Set<string>;
}

const FILE_TYPES = new Set(['File', 'OldFile', 'ContiguousFile']);

/** Read a .tar.gz (or .tar) from memory, refusing every entry that is not a safe file or directory of `<name>/`. */
export async function readArchive(data: Buffer, name: string): Promise<ArchiveContent> {
  // Loaded on first use: most agent runs install no archive and need not pay for the parser.
  const { Parser } = await import('tar/parse');
  return new Promise((resolve, reject) => {
    const files = new Map<string, { data: Buffer; mode: number }>();
    const dirs = new Set<string>();
    let failure: Error | null = null;
    let count = 0;
    let expanded = 0;
    let settled = false;
    const finish = (err: Error | null) => {
      if (settled) return;
      settled = true;
      if (err) reject(err);
      else resolve({ files, dirs });
    };
    const parser = new Parser({
      strict: true,
      onReadEntry: (entry: ReadEntry) => {
        try {
          if (failure) throw failure;
          if (++count > MAX_ARCHIVE_ENTRIES) throw invalid(`archive has more than ${MAX_ARCHIVE_ENTRIES} entries`);
          const isDir = entry.type === 'Directory';
          if (!isDir && !FILE_TYPES.has(entry.type)) {
            throw invalid(`${JSON.stringify(entry.path)} is a ${entry.type}: only plain files and directories are allowed`);
          }
          const raw = isDir ? entry.path.replace(/\/$/, '') : entry.path;
          const segs = safeSegments(raw, 'entry');
          if (segs[0] !== name) throw invalid(`entry ${JSON.stringify(entry.path)} is outside the top directory ${name}/`);
          const rel = segs.slice(1).join('/');
          if (isDir) {
            if (rel !== '') dirs.add(rel);
            entry.resume();
            return;
          }
          if (rel === '') throw invalid(`the top entry ${name} must be a directory`);
          if (files.has(rel)) throw invalid(`${rel} appears twice in the archive`);
          expanded += entry.size;
          if (expanded > MAX_ARCHIVE_EXPANDED) throw invalid(`archive expands to more than ${MAX_ARCHIVE_EXPANDED} bytes`);
          const chunks: Buffer[] = [];
          // Group/other write and setuid/setgid/sticky never come from an archive.
          const mode = (entry.mode ?? 0o644) & 0o755;
          entry.on('data', (c: Buffer) => chunks.push(c));
          entry.on('end', () => files.set(rel, { data: Buffer.concat(chunks), mode }));
        } catch (err) {
          failure ??= err as Error;
          entry.resume();
        }
      },
    });
    parser.on('error', (err: Error) => finish(failure ?? invalid(`not a valid tar.gz: ${err.message}`)));
    parser.on('end', () => finish(failure));
    parser.end(data);
  });
}

/** Check an archive's content against its SUMS file and the directive's hashes; returns the SUMS lines. */
export function checkContent(content: ArchiveContent, sumsSha256: string): SumsLine[] {
  const sums = content.files.get(SUMS);
  if (!sums) throw invalid(`the archive has no ${SUMS} in its top directory`);
  if (sha256(sums.data) !== sumsSha256) throw capstanError('ERR_ARTIFACT_HASH', `${SUMS} does not match the directive's sums_sha256`);
  const lines = parseSums(sums.data.toString('utf8'));
  const listed = new Set(lines.map((l) => l.path));
  for (const l of lines) {
    const f = content.files.get(l.path);
    if (!f) throw invalid(`${SUMS} lists ${l.path}, which the archive does not hold`);
    if (sha256(f.data) !== l.hash) throw capstanError('ERR_ARTIFACT_HASH', `${l.path} does not match its ${SUMS} hash`);
  }
  for (const path of content.files.keys()) {
    if (path !== SUMS && !listed.has(path)) throw invalid(`${path} is in the archive but not in ${SUMS}`);
  }
  // A path may not be a file and a directory at once (a/b as a file and a/b/c beside it).
  for (const path of content.files.keys()) {
    if (content.dirs.has(path)) throw invalid(`${path} is both a file and a directory`);
    for (let d = dirname(path); d !== '.'; d = dirname(d)) {
      if (content.files.has(d)) throw invalid(`${path} is under ${d}, which is a file`);
    }
  }
  return lines;
}

const exists = (p: string) => lstat(p).then(() => true, () => false);

/** Drift of an installed bundle directory, or null when every file matches its SUMS and nothing else is there. */
export async function verifyInstalled(dir: string, sumsSha256: string): Promise<string | null> {
  const top = await lstat(dir).catch(() => null);
  if (!top) return `${dir} does not exist`;
  if (!top.isDirectory()) return `${dir} is not a directory`;
  const found = new Map<string, string>(); // rel path -> problem or '' for a plain file
  const walk = async (rel: string): Promise<void> => {
    for (const e of await readdir(join(dir, rel), { withFileTypes: true })) {
      const p = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) await walk(p);
      else found.set(p, e.isFile() ? '' : `${p} is not a plain file`);
    }
  };
  await walk('');
  const odd = [...found.values()].find((v) => v !== '');
  if (odd) return odd;
  if (!found.has(SUMS)) return `${SUMS} is missing`;
  const sumsData = await readFile(join(dir, SUMS));
  if (sha256(sumsData) !== sumsSha256) return `${SUMS} differs from the assigned one`;
  let lines: SumsLine[];
  try {
    lines = parseSums(sumsData.toString('utf8'));
  } catch (err) {
    return (err as Error).message;
  }
  const drift: string[] = [];
  for (const l of lines) {
    if (!found.has(l.path)) drift.push(`${l.path} is missing`);
    else if (sha256(await readFile(join(dir, l.path))) !== l.hash) drift.push(`${l.path} was modified`);
    found.delete(l.path);
  }
  found.delete(SUMS);
  for (const extra of found.keys()) drift.push(`${extra} is not part of the bundle`);
  return drift.length ? drift.slice(0, 5).join(', ') + (drift.length > 5 ? `, and ${drift.length - 5} more` : '') : null;
}

/** Write the checked content to a temporary directory beside the target, then rename it into place. */
async function install(p: ArchiveParams, content: ArchiveContent): Promise<void> {
  await makeDir(p.target, 0o755);
  const prefix = `.${p.name}.capstan-`;
  // Leftovers of an interrupted install of this bundle.
  for (const e of await readdir(p.target)) if (e.startsWith(prefix)) await rm(join(p.target, e), { recursive: true, force: true });
  const tmp = join(p.target, `${prefix}${process.pid}-${randomBytes(4).toString('hex')}.tmp`);
  const final = join(p.target, p.name);
  await mkdir(tmp, { mode: 0o755 });
  try {
    for (const d of [...content.dirs].sort()) await makeDir(join(tmp, d), 0o755);
    for (const [rel, f] of content.files) {
      await makeDir(dirname(join(tmp, rel)), 0o755);
      await writeFile(join(tmp, rel), f.data, { mode: f.mode, flag: 'wx' });
    }
    // Directories cannot be renamed over non-empty ones: move the old bundle aside first.
    const old = (await exists(final)) ? `${join(p.target, prefix)}old-${randomBytes(4).toString('hex')}` : null;
    if (old) await rename(final, old);
    try {
      await rename(tmp, final);
    } catch (err) {
      if (old) await rename(old, final).catch(() => undefined);
      throw err;
    }
    if (old) await rm(old, { recursive: true, force: true });
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/**
 * What installing `content` as `dir` changes, file by file: a diff per changed, added or removed
 * file (secret and binary files as contentDiff says), a mode line per file whose mode changes.
 */
async function bundleDiff(dir: string, content: ArchiveContent, ctx: MethodContext): Promise<string> {
  const installed = new Map<string, boolean>(); // rel path -> is a regular file
  const walk = async (rel: string): Promise<void> => {
    for (const e of await readdir(join(dir, rel), { withFileTypes: true }).catch(() => [])) {
      const p = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) await walk(p);
      else installed.set(p, e.isFile());
    }
  };
  if ((await lstat(dir).catch(() => null))?.isDirectory()) await walk('');
  const parts: string[] = [];
  for (const rel of [...new Set([...installed.keys(), ...content.files.keys()])].sort()) {
    const path = join(dir, rel);
    const next = content.files.get(rel);
    if (installed.get(rel) === false) {
      parts.push(`deleted ${path} (not a regular file)\n`);
      if (next) parts.push(await contentDiff(path, null, contentOf(next.data, ctx.diff.maxFileSize), ctx.diff));
      continue;
    }
    const before = installed.has(rel) ? await readContent(path, ctx.diff.maxFileSize) : null;
    const after = next ? contentOf(next.data, ctx.diff.maxFileSize) : null;
    if (before === null || after === null || before.sha256 !== after.sha256) {
      const d = await contentDiff(path, before, after, ctx.diff);
      // A note about a changed file (binary, secret) names it: a bundle holds many.
      parts.push(before === null || after === null || d.startsWith('--- ') ? d : `${path}: ${d}`);
    }
    if (before !== null && next) {
      const was = (await lstat(path)).mode & 0o7777;
      if (was !== next.mode) parts.push(`${path}: ${modeLine(was, next.mode)}`);
    }
  }
  return parts.join('');
}

/** Names the node's policy assigns under `target` (this directive's included). */
function assignedNames(p: ArchiveParams, ctx: MethodContext): Set<string> {
  const names = new Set([p.name]);
  for (const d of ctx.siblings ?? []) {
    if (d.method !== archiveFromSharedFolderSpec.name) continue;
    try {
      const o = archiveFromSharedFolderSpec.validate(d.params);
      if (o.target === p.target) names.add(o.name);
    } catch {
      // An invalid sibling reports its own error; it assigns nothing.
    }
  }
  return names;
}

/** Bundles under the target that nothing assigns: directories (not hidden) holding a SHA256SUMS file. */
async function staleBundles(p: ArchiveParams, ctx: MethodContext): Promise<string[]> {
  const keep = assignedNames(p, ctx);
  const stale: string[] = [];
  for (const e of await readdir(p.target, { withFileTypes: true }).catch(() => [])) {
    if (!e.isDirectory() || e.name.startsWith('.') || keep.has(e.name)) continue;
    const sums = await lstat(join(p.target, e.name, SUMS)).catch(() => null);
    if (sums?.isFile()) stale.push(e.name);
  }
  return stale.sort();
}

export const archiveFromSharedFolder: Method<ArchiveParams> = {
  ...archiveFromSharedFolderSpec,
  apply: async (p, ctx) => {
    const [main, purge] = archiveFromSharedFolderSpec.components(p) as [{ component: string; key: string }, { component: string; key: string }?];
    const dir = join(p.target, p.name);
    // One download, read and checked once, serves the diff and the install.
    let checked: Promise<ArchiveContent> | undefined;
    const prepare = () =>
      (checked ??= (async () => {
        const data = await ctx.fetchShared(p.source, p.sha256);
        // Never open bytes that are not the ones the signed policy names.
        if (sha256(data) !== p.sha256) throw capstanError('ERR_ARTIFACT_HASH', `shared-folder ${p.source} does not match its sha256`);
        const content = await readArchive(data, p.name);
        checkContent(content, p.sums_sha256);
        return content;
      })());
    const out: Outcome[] = [
      await converge(
        ctx, main.component, main.key,
        () => verifyInstalled(dir, p.sums_sha256),
        async () => install(p, await prepare()),
        { ok: `${dir} matches ${p.source}`, repaired: `${dir} was installed from ${p.source}` },
        unlessHidden(p, async () =>
          // Audit and dry runs download nothing (as file_from_shared_folder): they say what differs.
          ctx.mode === 'audit' || ctx.dryRun
            ? `${dir} would be installed from ${p.source} (not downloaded in audit or dry runs): ${await verifyInstalled(dir, p.sums_sha256)}\n`
            : bundleDiff(dir, await prepare(), ctx)),
      ),
    ];
    if (purge) {
      out.push(
        await converge(
          ctx, purge.component, purge.key,
          async () => {
            const stale = await staleBundles(p, ctx);
            return stale.length ? `unassigned bundles: ${stale.join(', ')}` : null;
          },
          async () => {
            for (const name of await staleBundles(p, ctx)) await rm(join(p.target, name), { recursive: true, force: true });
          },
          { ok: `no unassigned bundles under ${p.target}`, repaired: `unassigned bundles removed from ${p.target}` },
          unlessHidden(p, async () => (await staleBundles(p, ctx)).map((name) => `removed bundle ${join(p.target, name)}\n`).join('')),
        ),
      );
    }
    return out;
  },
};
