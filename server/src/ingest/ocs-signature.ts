/**
 * The `.sign` file a RUDDER agent sends beside its OCS inventory, checked as RUDDER's server
 * checks it: Java-properties lines `header=rudder-signature-v1`, `algorithm=sha512` (the only one
 * v1 allows) and `digest=<hex>`, an RSA PKCS#1 v1.5 signature with SHA-512 over the *uncompressed*
 * XML (the agent signs, then gzips) — what `openssl dgst -sha512 -hex -sign <key>` prints. The
 * informative fields (`hostname`, `keydate`, `keyid`) are not trusted. When `hash_value` (the
 * SHA-512 of the signed file, written by newer signing tools) is present it must match: a `.sign`
 * made for another file is then named as such rather than as a bad signature.
 */
import { createHash, createPublicKey, verify, X509Certificate, type KeyObject } from 'node:crypto';
import { capstanError } from '@capstan/shared/errors';

/** Larger than any real `.sign` (a 8192-bit key's digest is 2 KiB of hex, short_pubkey about as much). */
export const MAX_SIGN_FILE_BYTES = 64 * 1024;

export interface OcsSignature {
  algorithm: 'sha512';
  signature: Buffer;
  /** SHA-512 of the signed file, hex, when the `.sign` carries it. */
  hashValue?: string;
}

function bad(msg: string): never {
  throw capstanError('ERR_OCS_SIGNATURE', msg);
}

export function parseSignFile(bytes: Buffer): OcsSignature {
  if (bytes.length > MAX_SIGN_FILE_BYTES) bad(`signature file of ${bytes.length} bytes is larger than ${MAX_SIGN_FILE_BYTES}`);
  const fields = new Map<string, string>();
  for (const raw of bytes.toString('utf8').split(/\r?\n/)) {
    const line = raw.trim();
    if (line.length === 0 || line.startsWith('#') || line.startsWith('!')) continue;
    const eq = line.search(/[=:]/);
    if (eq <= 0) bad('signature file has a line that is not key=value');
    const key = line.slice(0, eq).trim().toLowerCase();
    // The first value wins, as a second `digest=` must not replace a checked one unnoticed.
    if (!fields.has(key)) fields.set(key, line.slice(eq + 1).trim());
  }
  if (fields.get('header')?.toLowerCase() !== 'rudder-signature-v1') bad('signature file header is not rudder-signature-v1');
  const algorithm = fields.get('algorithm')?.toLowerCase();
  if (algorithm !== 'sha512') bad(`signature algorithm ${JSON.stringify(algorithm ?? '')} is not sha512 (the only one rudder-signature-v1 allows)`);
  const digest = fields.get('digest') ?? '';
  if (!/^([0-9a-fA-F]{2}){64,2048}$/.test(digest)) bad('signature file digest is not a hex RSA signature');
  const hashValue = fields.get('hash_value');
  if (hashValue !== undefined && !/^[0-9a-fA-F]{128}$/.test(hashValue)) bad('signature file hash_value is not a SHA-512 hex digest');
  return { algorithm: 'sha512', signature: Buffer.from(digest, 'hex'), ...(hashValue !== undefined && { hashValue: hashValue.toLowerCase() }) };
}

export function certificateKey(pem: string): KeyObject {
  try {
    return new X509Certificate(pem).publicKey;
  } catch {
    throw capstanError('ERR_CERTIFICATE', 'the node certificate cannot be read');
  }
}

/** Whether the public key PEM (PKCS#1 or SPKI) is the certificate's. */
export function sameKey(publicKeyPem: string, certificate: KeyObject): boolean {
  let key: KeyObject;
  try {
    key = createPublicKey(publicKeyPem);
  } catch {
    return false;
  }
  const der = (k: KeyObject) => k.export({ type: 'spki', format: 'der' });
  return der(key).equals(der(certificate));
}

/** Throws ERR_OCS_SIGNATURE unless `sig` is `certificatePem`'s key's signature over `xml`. */
export function verifyOcsSignature(xml: Buffer, sig: OcsSignature, certificatePem: string): void {
  if (sig.hashValue !== undefined && createHash('sha512').update(xml).digest('hex') !== sig.hashValue) {
    bad('the signature file was made for another file (its hash_value is not this inventory\'s SHA-512)');
  }
  const key = certificateKey(certificatePem);
  let ok = false;
  try {
    ok = verify('sha512', xml, key, sig.signature);
  } catch {
    ok = false;
  }
  if (!ok) bad('the inventory\'s signature does not verify with the node\'s key');
}
