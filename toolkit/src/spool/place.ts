/**
 * The last step of a spool write: a complete, fsync'd temp file takes its name in incoming/.
 * rename(2) would replace a file already there, and an unauthenticated upload under the name of
 * a file the spool acknowledged (and still holds: upstream down, backlog, backoff) would destroy
 * it. Here the name is taken with link(2), which never replaces, then the temp name is unlinked:
 *
 * - nothing there: placed;
 * - the same bytes there: the upload is a re-send, answered as a success (idempotent), and the
 *   temp file goes;
 * - different bytes there: a conflict (ERR_SPOOL_CONFLICT, 409, retried later by whoever sends),
 *   unless the caller names a candidate name to keep it under instead (an OCS half, whose pair is
 *   chosen by verification at the root: ocs-pair.ts).
 *
 * A sync twin serves the writer threads (writer-worker.ts), which block on the disk on purpose.
 */
import { createHash } from 'node:crypto';
import { linkSync, readFileSync, unlinkSync } from 'node:fs';
import { link, readFile, unlink } from 'node:fs/promises';
import { capstanError } from '@capstan/shared/errors';

export type Placed = 'placed' | 'same';

/** The errno-style code a conflict carries across a writer thread (turned into ERR_SPOOL_CONFLICT). */
export const CONFLICT = 'ESPOOLCONFLICT';

/** Different bytes already under the name: thrown as an errno-style error (code CONFLICT). */
function conflict(dest: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`${dest.slice(dest.lastIndexOf('/') + 1)} is already spooled with different bytes`), { code: CONFLICT });
}

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

/** Place `tmp` at `dest` (or, on a conflict, at `alt` when given); `hash` is the body's sha256. */
export async function placeFile(tmp: string, dest: string, hash: string, alt?: string): Promise<{ placed: Placed; path: string }> {
  for (const target of alt ? [dest, alt] : [dest]) {
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        await link(tmp, target);
        await unlink(tmp);
        return { placed: 'placed', path: target };
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') {
          await unlink(tmp).catch(() => undefined);
          throw err;
        }
      }
      const there = await readFile(target).catch((err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT') return null; // removed meanwhile (forwarded): try again
        throw err;
      });
      if (there === null) continue;
      if (sha256(there) === hash) {
        await unlink(tmp);
        return { placed: 'same', path: target };
      }
      break;
    }
  }
  await unlink(tmp).catch(() => undefined);
  throw conflict(dest);
}

/** placeFile() with blocking calls, for a writer thread. */
export function placeFileSync(tmp: string, dest: string, hash: string, alt?: string): { placed: Placed; path: string } {
  for (const target of alt ? [dest, alt] : [dest]) {
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        linkSync(tmp, target);
        unlinkSync(tmp);
        return { placed: 'placed', path: target };
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') {
          try {
            unlinkSync(tmp);
          } catch {
            // gone already
          }
          throw err;
        }
      }
      let there: Buffer;
      try {
        there = readFileSync(target);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
        throw err;
      }
      if (sha256(there) === hash) {
        unlinkSync(tmp);
        return { placed: 'same', path: target };
      }
      break;
    }
  }
  try {
    unlinkSync(tmp);
  } catch {
    // gone already
  }
  throw conflict(dest);
}

/** A conflict from placeFile() (or a writer thread) as the coded error callers answer with; others as they are. */
export function asConflict(err: unknown): unknown {
  if ((err as NodeJS.ErrnoException | null)?.code !== CONFLICT) return err;
  return capstanError('ERR_SPOOL_CONFLICT', `${(err as Error).message}: refused, the file spooled first is kept (retry once it has been delivered)`);
}
