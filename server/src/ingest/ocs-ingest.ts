/**
 * A RUDDER agent's inventory at the server: the OCS XML (gzip'd or not) and its `.sign`, paired
 * here, verified and mapped onto Capstan's inventory document on an inventory thread
 * (inventory-read.ts), then registered as any inventory is (ingest/inventory.ts).
 *
 * Identity (docs/inventory.md, "RUDDER agents"): the node's key is the one in the certificate its
 * inventory carries (RUDDER/AGENT/AGENT_CERT, subject `UID=<node id>`). A newcomer's `.sign` must
 * verify with that certificate's key — proof that the sender holds it — and the certificate is
 * what acceptance pins. Once accepted, the `.sign` must verify with the *pinned* certificate,
 * whatever the XML says, as RUDDER does for a node whose key is certified; a run log is then
 * checked against the same pinned certificate. CFENGINE_KEY, when present, must be the
 * certificate's key: an inventory whose two keys disagree is refused.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { capstanError, isCapstanError, isTransient } from '@capstan/shared/errors';
import { ocsPairReady, ocsWaiting, olderThan } from '@capstan/toolkit/spool/ocs-pair';
import type { Spool } from '@capstan/toolkit/spool/spool';
import { MAX_SIGN_FILE_BYTES } from './ocs-signature.js';

/** An OCS inventory's `.sign`, bounded: it is read whole. */
export async function readSignFile(path: string, max = MAX_SIGN_FILE_BYTES): Promise<Buffer> {
  const bytes = await readFile(path);
  if (bytes.length > max) throw capstanError('ERR_OCS_SIGNATURE', `signature file of ${bytes.length} bytes is larger than ${max}`);
  return bytes;
}

/**
 * The server's handler for one spooled inventory file when it is half of an OCS pair: waits for
 * the other half (ocsPairReady), then tries each `.sign` spooled for it (the upload's and its
 * candidates: junk may have been spooled first under either name) until one verifies, ingests
 * the pair through `ingest` and removes that `.sign`. When none verifies, the inventory waits for
 * another `.sign` until `ocs_pair_wait` has passed since it arrived, then is refused; the
 * signatures go to failed/ beside it unless another inventory candidate still waits for them.
 * Null for any other file.
 */
export async function handleOcsUpload<T>(
  spool: Spool, name: string, waitMs: number, prompt: (name: string) => void,
  ingest: (signPath: string) => Promise<T>,
): Promise<T | null> {
  const dir = spool.incomingDir('inventories');
  const pair = await ocsPairReady(dir, name, waitMs, prompt);
  if (!pair || pair === 'alone') return null;
  let refusal: unknown = null;
  for (const sign of pair.signs) {
    try {
      const out = await ingest(join(dir, sign));
      await spool.remove('inventories', sign);
      return out;
    } catch (err) {
      if (isTransient(err)) throw err;
      refusal = err;
      // Not the signature's fault: the inventory itself is refused, whichever signature.
      if (!(isCapstanError(err) && err.code === 'ERR_OCS_SIGNATURE')) break;
    }
  }
  const code = isCapstanError(refusal) ? refusal.code : 'ERR_INTERNAL';
  if (code === 'ERR_OCS_SIGNATURE' && !(await olderThan(dir, name, waitMs))) {
    // Junk raced ahead under the `.sign`'s name: the real one is kept as a candidate when it comes.
    throw ocsWaiting(`inventory ${name} waits for a signature that verifies it`);
  }
  if (!pair.otherData) {
    for (const sign of pair.signs) await spool.fail('inventories', sign, `${code}: ${(refusal as Error).message}`).catch(() => undefined);
  }
  throw refusal;
}
