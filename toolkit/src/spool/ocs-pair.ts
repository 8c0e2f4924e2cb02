/**
 * A RUDDER agent sends an OCS inventory as two uploads: `<name>.ocs.gz` (or `.ocs`), then
 * `<name>.ocs.sign`, each its own PUT. They arrive as two spool files and mean something only
 * together, so relayd forwards them, and the server verifies them, as one pair: the inventory's
 * handler takes both once both are there; the signature's handler only waits for it.
 *
 * A half that stays alone longer than the pair wait (`ocs_pair_wait`) is refused for good
 * (ERR_OCS_UNPAIRED, to failed/); until then it waits as a transient error marked `waiting`,
 * which the processor retries quietly (an expected state, not a failure).
 */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { capstanError } from '@capstan/shared/errors';
import { ocsPairNames } from '@capstan/shared/runlog/name';

export interface OcsPair {
  /** The inventory file's name (the one whose handler runs). */
  data: string;
  /** Its `.sign` file's name, in the same directory. */
  sign: string;
}

/** A half waiting for the other: retried quietly by the processor, never logged as a failure. */
function waiting(message: string, partner?: string) {
  return capstanError('ERR_OCS_UNPAIRED', message, { transient: true, details: { waiting: true, ...(partner && { partner }) } });
}

export function isWaiting(err: unknown): boolean {
  return (err as { details?: { waiting?: unknown } } | undefined)?.details?.waiting === true;
}

async function mtime(path: string): Promise<number | null> {
  return (await stat(path).catch(() => null))?.mtimeMs ?? null;
}

/**
 * For a spooled OCS upload `name` in `dir`: the pair when this is the inventory and its signature
 * is there (the caller handles both, then removes the `.sign`). Throws a waiting error while the
 * other half may still come (for a `.sign` whose inventory is there, `prompt` is called with the
 * inventory's name so that its handler runs now rather than at its next retry), ERR_OCS_UNPAIRED
 * once `waitMs` has passed since this half arrived. Null for a name that is not an OCS upload.
 */
export async function ocsPairReady(dir: string, name: string, waitMs: number, prompt?: (name: string) => void, now = Date.now()): Promise<OcsPair | null> {
  const names = ocsPairNames(name);
  if (!names) return null;
  const own = await mtime(join(dir, name));
  if (own === null) {
    // Gone: its pair's handler took it. ENOENT tells the processor there is nothing left to do.
    throw Object.assign(new Error(`${name} is gone`), { code: 'ENOENT' });
  }
  const tooOld = now - own > waitMs;
  if (names.isSign) {
    for (const data of names.data) {
      if ((await mtime(join(dir, data))) !== null) {
        prompt?.(data);
        throw waiting(`signature ${name} goes with ${data}`, data);
      }
    }
    if (tooOld) throw capstanError('ERR_OCS_UNPAIRED', `signature ${name} came without its inventory (${names.data[0]}) within ocs_pair_wait`);
    throw waiting(`signature ${name} waits for its inventory`);
  }
  if ((await mtime(join(dir, names.sign))) !== null) return { data: name, sign: names.sign };
  if (tooOld) throw capstanError('ERR_OCS_UNPAIRED', `inventory ${name} came without its signature (${names.sign}) within ocs_pair_wait`);
  throw waiting(`inventory ${name} waits for its signature ${names.sign}`);
}
