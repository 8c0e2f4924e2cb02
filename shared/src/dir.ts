/**
 * `mkdir -p` with a bound. Node's `mkdir(path, { recursive: true })` never returns when a file
 * system answers ENOENT for a directory whose parent exists (/proc, /sys, some FUSE mounts): it
 * makes the parent (EEXIST), retries the child (ENOENT) and loops, a busy CPU with no output. Here
 * each missing component is made once, from the first existing ancestor down, so the walk ends
 * after at most one mkdir per path component, with a coded error naming the directory.
 */
import { mkdir, stat } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { capstanError } from './errors.js';

const refused = (target: string, dir: string, err: unknown) =>
  capstanError('ERR_DIRECTORY', `cannot create directory ${target}: ${dir} refused (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, { cause: err });

/** Is `p` a directory (true), absent (false)? Anything else is an error naming `target`. */
async function isDir(p: string, target: string): Promise<boolean> {
  try {
    const s = await stat(p);
    if (!s.isDirectory()) throw capstanError('ERR_DIRECTORY', `cannot create directory ${target}: ${p} exists and is not a directory`);
    return true;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return false;
    if (code === undefined) throw err;
    throw refused(target, p, err);
  }
}

/** Make `path` and its missing parents (each with `mode`, as mkdir applies it under the umask). */
export async function makeDir(path: string, mode = 0o777): Promise<void> {
  const target = resolve(path);
  const missing: string[] = [];
  for (let p = target; !(await isDir(p, target)); p = dirname(p)) {
    if (dirname(p) === p) throw capstanError('ERR_DIRECTORY', `cannot create directory ${target}: no existing ancestor`);
    missing.push(p);
  }
  for (const dir of missing.reverse()) {
    try {
      await mkdir(dir, { mode });
    } catch (err) {
      // EEXIST: made meanwhile by someone else, fine if it is a directory; anything else is final.
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || !(await isDir(dir, target))) throw refused(target, dir, err);
    }
  }
}
