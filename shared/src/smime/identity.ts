/**
 * Node identity: an RSA key and a self-signed certificate whose subject is `UID=<node id>`, the way
 * RUDDER agents make theirs (`openssl req -x509 -sha256 -subj "/UID=<uuid>"`). The root pins this
 * certificate when the node is accepted and verifies every run log and inventory against it.
 */
import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes, sign as cryptoSign, type KeyObject } from 'node:crypto';
import forge from 'node-forge';
import { capstanError } from '../errors.js';
import { OID } from './algorithms.js';
import { checkCertificate, nameUid } from './certificate.js';
import { DerError } from './der.js';

export { parseCertificates } from './certificate.js';

export interface NodeIdentity {
  /** PKCS#8 (or PKCS#1) private key, PEM, unencrypted. */
  keyPem: string;
  /** X.509 certificate, PEM. */
  certPem: string;
}

export interface NodeIdentityOptions {
  /** RSA modulus size; 2048 by default. */
  bits?: number;
  /** Validity in days from `now`; 3650 by default, like RUDDER's agent certificates. */
  days?: number;
  now?: Date;
  /**
   * Certify this existing private key (PEM) instead of generating one; `bits` is then ignored.
   * Key generation costs ~100 ms, so simulators and benchmarks that need thousands of node ids
   * certify a few keys many times; a real agent always makes its own key.
   */
  keyPem?: string;
}

const DAY_MS = 86_400_000;

export function createNodeIdentity(nodeId: string, opts: NodeIdentityOptions = {}): NodeIdentity {
  const bits = opts.bits ?? 2048;
  const days = opts.days ?? 3650;
  const now = opts.now ?? new Date();
  if (typeof nodeId !== 'string' || nodeId.length === 0) throw new TypeError('node id must be a non-empty string');
  if (!Number.isInteger(bits) || bits < 1024 || bits > 16384) throw new RangeError('bits must be an integer in 1024..16384');
  if (!(days > 0)) throw new RangeError('days must be positive');

  const { privateKey, publicKey } = opts.keyPem ? existingKey(opts.keyPem) : generateKeyPairSync('rsa', { modulusLength: bits, publicExponent: 0x10001 });
  const cert = forge.pki.createCertificate();
  cert.publicKey = forge.pki.publicKeyFromPem(publicKey.export({ type: 'spki', format: 'pem' }).toString());
  cert.serialNumber = randomSerial();
  cert.validity.notBefore = new Date(Math.floor(now.getTime() / 1000) * 1000);
  cert.validity.notAfter = new Date(cert.validity.notBefore.getTime() + days * DAY_MS);
  // UTF8String, as `openssl req -subj "/UID=…"` encodes it (see files/keys/*.cert).
  const subject = [{ type: OID.userId, value: nodeId, valueTagClass: forge.asn1.Type.UTF8 as unknown as forge.asn1.Class }];
  cert.setSubject(subject);
  cert.setIssuer(subject);
  cert.setExtensions([
    { name: 'basicConstraints', cA: false },
    { name: 'keyUsage', critical: true, digitalSignature: true, keyEncipherment: true },
    { name: 'subjectKeyIdentifier' },
  ]);

  // What forge's cert.sign() does, with node:crypto doing the RSA (forge's is ~10x slower).
  cert.signatureOid = cert.siginfo.algorithmOid = forge.pki.oids.sha256WithRSAEncryption!;
  const tbs = (forge.pki as unknown as { getTBSCertificate(c: forge.pki.Certificate): forge.asn1.Asn1 }).getTBSCertificate(cert);
  cert.tbsCertificate = tbs;
  const tbsDer = Buffer.from(forge.asn1.toDer(tbs).getBytes(), 'binary');
  cert.signature = cryptoSign('sha256', tbsDer, privateKey).toString('binary');

  return {
    keyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    certPem: forge.pki.certificateToPem(cert).replace(/\r\n/g, '\n'),
  };
}

function existingKey(pem: string): { privateKey: KeyObject; publicKey: KeyObject } {
  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey(pem);
  } catch (err) {
    throw capstanError('ERR_KEY', 'not a readable unencrypted private key', { cause: err });
  }
  if (privateKey.asymmetricKeyType !== 'rsa') throw capstanError('ERR_KEY', 'node keys are RSA keys');
  return { privateKey, publicKey: createPublicKey(privateKey) };
}

/** 128 random bits, made a positive DER INTEGER with no leading zero byte. */
function randomSerial(): string {
  const b = randomBytes(16);
  b[0] = (b[0]! & 0x7f) | 0x40;
  return b.toString('hex');
}

/** The node id a certificate is for: its subject UID attribute, or null when it has none. */
export function certificateNodeId(certPem: string): string | null {
  const cert = checkCertificate(certPem);
  try {
    return nameUid(cert.subject);
  } catch (err) {
    if (err instanceof DerError) throw capstanError('ERR_CERTIFICATE', `malformed certificate subject: ${err.message}`, { cause: err });
    throw err;
  }
}

/** sha256 of the certificate's DER, lower-case hex without separators. */
export function certificateFingerprint(certPem: string): string {
  return createHash('sha256').update(checkCertificate(certPem).der).digest('hex');
}
