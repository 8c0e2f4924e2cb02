/**
 * Reading one inventory from its bytes as received: decompression, parsing (Capstan's signed JSON
 * or a RUDDER agent's OCS XML with its `.sign`), mapping and signature checks. Pure CPU work on
 * data handed over, no store and no file: it runs on an inventory worker thread
 * (inventory-pool.ts) so that a costly inventory never holds the event loop, or in the calling
 * thread where no pool is given (unit tests).
 */
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import type { InventoryInfo } from '@capstan/shared/runlog/name';
import { readSignedContentUnverified, verifySmime } from '@capstan/shared/smime/verify';
import { DEFAULT_OCS_LIMITS, readOcsInventory } from './ocs.js';
import { certificateKey, parseSignFile, sameKey, verifyOcsSignature } from './ocs-signature.js';
import { decompressUpload, type IngestLimits } from './runlog-prepare.js';
import type { InventoryDoc } from './inventory.js';

/** What the node already is at the server, as far as reading its inventory goes. */
export interface KnownSigner {
  accepted: string;
  certificate: string | null;
}

/** One inventory to read: everything crosses a thread as plain data. */
export interface InventoryJob {
  format: InventoryInfo['format'];
  compression: InventoryInfo['compression'];
  raw: Uint8Array;
  /** An OCS inventory's `.sign`, as uploaded. */
  sign?: Uint8Array;
  known: KnownSigner | null;
  limits: IngestLimits;
}

function invalid(msg: string): never {
  throw capstanError('ERR_INVENTORY_INVALID', msg);
}

/** Check the required fields of DESIGN.md's inventory contract; unknown fields are kept. */
export function validateInventory(doc: unknown): InventoryDoc {
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) invalid('inventory must be a JSON object');
  const d = doc as Record<string, unknown>;
  for (const f of ['node_id', 'hostname', 'certificate', 'agent_version', 'policy_server'] as const) {
    if (typeof d[f] !== 'string' || (d[f] as string).length === 0) invalid(`inventory.${f} must be a non-empty string`);
  }
  const os = d.os as Record<string, unknown> | undefined;
  if (!os || typeof os !== 'object') invalid('inventory.os must be an object');
  for (const f of ['name', 'version', 'kernel', 'arch']) {
    if (typeof os[f] !== 'string') invalid(`inventory.os.${f} must be a string`);
  }
  return d as InventoryDoc;
}

function parseJson(content: Buffer): unknown {
  try {
    return JSON.parse(content.toString('utf8'));
  } catch {
    return invalid('inventory is not valid JSON');
  }
}

const asBuffer = (u: Uint8Array): Buffer => (Buffer.isBuffer(u) ? u : Buffer.from(u.buffer, u.byteOffset, u.byteLength));

/** Read, check and map one inventory; every refusal is a coded error. */
export async function readInventory(job: InventoryJob): Promise<InventoryDoc> {
  return (await readWithin(job, Infinity))!;
}

/**
 * The same for an inventory of at most `maxBytes` once decompressed, null for a larger one
 * (`[processing] inventory_inline_size`): small ones cost the event loop a few milliseconds, less
 * than handing them to a thread, and a newcomer's first one is not kept waiting while a thread starts.
 */
export async function readSmallInventory(job: InventoryJob, maxBytes: number): Promise<InventoryDoc | null> {
  if (job.compression === 'none' && job.raw.byteLength > maxBytes) return null;
  try {
    return await readWithin(job, maxBytes);
  } catch (err) {
    if (isCapstanError(err) && err.code === 'ERR_DECOMPRESSED_TOO_LARGE') return null;
    throw err;
  }
}

async function readWithin(job: InventoryJob, inline: number): Promise<InventoryDoc | null> {
  const { limits } = job;
  const raw = asBuffer(job.raw);
  if (job.format === 'ocs') {
    const ocs = limits.ocs ?? DEFAULT_OCS_LIMITS;
    if (!job.sign) throw capstanError('ERR_OCS_UNPAIRED', 'an OCS inventory is read with its .sign');
    if (job.compression === 'none' && raw.length > ocs.maxBytes) {
      throw capstanError('ERR_OCS_TOO_LARGE', `OCS inventory of ${raw.length} bytes exceeds limits.ocs_max_size (${ocs.maxBytes})`);
    }
    // A gzip bomb stops at the smaller of the two limits (ERR_DECOMPRESSED_TOO_LARGE).
    const { out: xml, release } = await decompressUpload(raw, job.compression, Math.min(ocs.maxBytes, limits.maxDecompressedBytes, inline), limits);
    try {
      const sig = parseSignFile(asBuffer(job.sign));
      const { doc, publicKey } = readOcsInventory(xml, ocs);
      if (publicKey !== undefined && !sameKey(publicKey, certificateKey(doc.certificate))) {
        throw capstanError('ERR_OCS_INVALID', 'the inventory\'s CFENGINE_KEY is not the key of its AGENT_CERT');
      }
      const signer = job.known?.accepted === 'accepted' && job.known.certificate ? job.known.certificate : doc.certificate;
      verifyOcsSignature(xml, sig, signer);
      return doc;
    } finally {
      release();
    }
  }
  const { out: signed, release } = await decompressUpload(raw, job.compression, Math.min(limits.maxDecompressedBytes, inline), limits);
  try {
    // Which certificate must have signed it: the pinned one, or for a newcomer the one it carries.
    let signer: string;
    if (job.known?.accepted === 'accepted' && job.known.certificate) {
      signer = job.known.certificate;
    } else {
      signer = validateInventory(parseJson(readSignedContentUnverified(signed))).certificate;
    }
    const verified = verifySmime(signed, [signer], { maxBytes: limits.maxDecompressedBytes, allowSha1: limits.allowSha1 === true });
    return validateInventory(parseJson(verified.content));
  } finally {
    release();
  }
}
