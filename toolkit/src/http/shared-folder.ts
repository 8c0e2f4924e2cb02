/**
 * The shared folder's file-system side, served by relays and by the server alike
 * (`HEAD|GET /rudder/relay-api/1/shared-folder/<path>`, RUDDER's shared_folder.rs): decode and
 * check the path from the raw URL (the router would already have collapsed `//` and decoded
 * segments), resolve it under the root following symlinks but never out of it, and hash a file.
 * Every path that could leave the root is ERR_BAD_PATH (400) before the file system is touched.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { realpath, stat } from 'node:fs/promises';
import { join, sep } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { capstanError } from '@capstan/shared/errors';

const MARK = '/shared-folder/';
const HASH_HEX = { sha256: 64, sha512: 128 } as const;
export type SharedFolderHash = keyof typeof HASH_HEX;

/** The path segments after `/shared-folder/`, decoded and checked; throws ERR_BAD_PATH. */
export function sharedFolderSegments(rawUrl: string): string[] {
  const path = rawUrl.split('?')[0]!;
  const at = path.indexOf(MARK);
  if (at === -1) throw capstanError('ERR_BAD_PATH', 'not a shared-folder path');
  return path.slice(at + MARK.length).split('/').map((raw) => {
    let s: string;
    try {
      s = decodeURIComponent(raw);
    } catch {
      throw capstanError('ERR_BAD_PATH', 'path is not valid percent-encoding');
    }
    if (s === '') throw capstanError('ERR_BAD_PATH', 'empty path segment (absolute path or "//")');
    if (s === '.' || s.startsWith('..')) throw capstanError('ERR_BAD_PATH', 'path segments may not be "." or start with ".."');
    if (/[\\/\0]/.test(s)) throw capstanError('ERR_BAD_PATH', 'path segments may not contain "\\", "/" or NUL');
    return s;
  });
}

/** The file under `root` the segments name, or null when there is none; ERR_BAD_PATH if it leaves root. */
export async function resolveSharedFile(root: string, segments: string[]): Promise<string | null> {
  const rootReal = await realpath(root);
  let real: string;
  try {
    real = await realpath(join(rootReal, ...segments));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return null;
    throw err;
  }
  if (real !== rootReal && !real.startsWith(rootReal + sep)) throw capstanError('ERR_BAD_PATH', 'path leaves the shared folder');
  return (await stat(real)).isFile() ? real : null;
}

/** HEAD's `hash_type` and `hash` query: checked, hash lower-cased ('' when absent). */
export function sharedFolderHashQuery(q: { hash_type?: string; hash?: string }): { type: SharedFolderHash; hash: string } {
  const type = q.hash_type ?? 'sha256';
  if (type !== 'sha256' && type !== 'sha512') throw capstanError('ERR_BAD_REQUEST', `unknown hash_type ${type}`);
  const hash = q.hash ?? '';
  if (hash !== '' && !new RegExp(`^[0-9a-fA-F]{${HASH_HEX[type]}}$`).test(hash)) throw capstanError('ERR_BAD_REQUEST', `hash is not a ${type} in hex`);
  return { type, hash: hash.toLowerCase() };
}

export async function hashFile(path: string, algorithm: SharedFolderHash): Promise<string> {
  const h = createHash(algorithm);
  await pipeline(createReadStream(path), h);
  return h.digest('hex');
}
