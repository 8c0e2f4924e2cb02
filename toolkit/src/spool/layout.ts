/**
 * Where the spool keeps what. Layout under the root:
 *
 *   tmp/                         partial uploads (never processed; stale ones are swept)
 *   free/                        delivered files kept to be overwritten by later uploads (recycle.ts)
 *   incoming/<kind>/<name>       complete files waiting to be forwarded or ingested
 *   failed/<kind>/<name>         permanently refused files, with <name>.reason beside them
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { capstanError } from '@capstan/shared/errors';
import { makeDir } from '@capstan/shared/dir';
import { SPOOL_KINDS, type SpoolKind } from '@capstan/shared/protocol';

/**
 * The spool's directories, joined once: a file's path is then `${dir}/${name}` (names are one
 * plain component, assertPlainName). path.join per upload was ~5 KB of garbage per file.
 */
export interface SpoolDirs {
  tmp: string;
  free: string;
  incoming: Record<SpoolKind, string>;
  failed: Record<SpoolKind, string>;
}

export function spoolDirs(root: string): SpoolDirs {
  const byKind = (sub: string) => Object.fromEntries(SPOOL_KINDS.map((k) => [k, join(root, sub, k)])) as Record<SpoolKind, string>;
  return { tmp: join(root, 'tmp'), free: join(root, 'free'), incoming: byKind('incoming'), failed: byKind('failed') };
}

/** Make every directory of the layout that is missing. */
export async function makeSpoolDirs(dirs: SpoolDirs): Promise<void> {
  await makeDir(dirs.tmp);
  await makeDir(dirs.free);
  for (const kind of SPOOL_KINDS) {
    await makeDir(dirs.incoming[kind]);
    await makeDir(dirs.failed[kind]);
  }
}

/** A spool entry name must be one plain path component: callers validate the format itself. */
export function assertPlainName(name: string): void {
  if (
    name.length === 0 || name.length > 255 || name.startsWith('.') || /[/\\\0]/.test(name) || name.endsWith('.reason')
  ) {
    throw capstanError('ERR_BAD_PATH', 'file name must be a single plain path component');
  }
}

/** Names in `dir`, oldest first (by mtime), dot files excluded. */
export async function namesByAge(dir: string): Promise<string[]> {
  return (await scanByAge(dir, () => false)).fresh;
}

/**
 * Names in `dir`, dot files excluded: `all` of them in directory order, and `fresh`, those that
 * `known` does not claim, oldest first (by mtime). Only fresh names are stat'd: a catch-up pass
 * over a backlog of 28,000 files already queued spent ~10 % of a server's CPU in their stats.
 */
export async function scanByAge(dir: string, known: (name: string) => boolean): Promise<{ all: string[]; fresh: string[] }> {
  const all = (await readdir(dir)).filter((n) => !n.startsWith('.'));
  const withTimes = await Promise.all(
    all.filter((n) => !known(n)).map(async (n) => {
      try {
        return { n, t: (await stat(join(dir, n))).mtimeMs };
      } catch {
        return null; // removed meanwhile
      }
    }),
  );
  const fresh = withTimes
    .filter((x): x is { n: string; t: number } => x !== null)
    .sort((a, b) => a.t - b.t)
    .map((x) => x.n);
  return { all, fresh };
}

/** Modification time of the oldest entry in `dir`, or null when it is empty. */
export async function oldestIn(dir: string): Promise<number | null> {
  let oldest: number | null = null;
  for (const n of await readdir(dir)) {
    const s = await stat(join(dir, n)).catch(() => null);
    if (s && (oldest === null || s.mtimeMs < oldest)) oldest = s.mtimeMs;
  }
  return oldest;
}

/** Bytes in the regular files (links followed) of `dir`. */
export async function bytesIn(dir: string): Promise<number> {
  let bytes = 0;
  for (const n of await readdir(dir)) {
    const s = await stat(join(dir, n)).catch(() => null);
    if (s?.isFile()) bytes += s.size;
  }
  return bytes;
}
