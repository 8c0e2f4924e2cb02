/**
 * S/MIME clear-signing, byte-compatible with what RUDDER agents send:
 * `openssl smime -sign -text -nocerts -md sha256 -signer cert -inkey key`.
 *
 * node-forge builds the PKCS#7 ASN.1 (its own RSA is far too slow to sign with); node:crypto makes
 * the signature over the DER SET OF signed attributes.
 */
import { createHash, createPrivateKey, createPublicKey, randomBytes, sign as cryptoSign, type KeyObject } from 'node:crypto';
import forge from 'node-forge';
import { capstanError } from '../errors.js';
import { OID } from './algorithms.js';
import { parseCertificate } from './certificate.js';
import { derHeader } from './der.js';
import { canonicalise } from './mime.js';

export interface SignOptions {
  /** signingTime attribute; defaults to now. */
  signingTime?: Date;
}

const { asn1 } = forge;
const TEXT_HEADER = Buffer.from('Content-Type: text/plain\r\n\r\n');

/** Sign `content` (text; LF line ends become CRLF) for `id` and return the multipart/signed message. */
export function signSmime(content: Buffer, id: { keyPem: string; certPem: string }, opts: SignOptions = {}): Buffer {
  const cert = parseCertificate(id.certPem);
  const { key, spki } = privateKey(id.keyPem);
  if (!cert.publicKey.export({ type: 'spki', format: 'der' }).equals(spki)) throw capstanError('ERR_KEY', 'private key does not match the certificate');
  const keyType = key.asymmetricKeyType;
  if (keyType !== 'rsa' && keyType !== 'ec') throw capstanError('ERR_KEY', `cannot sign S/MIME with a ${keyType ?? 'unknown'} key`);

  const signedPart = Buffer.concat([TEXT_HEADER, canonicalise(content)]);
  const digest = createHash('sha256').update(signedPart).digest();
  const attrs = [
    attribute(OID.contentType, oidNode(OID.data)),
    attribute(OID.signingTime, timeNode(opts.signingTime ?? new Date())),
    attribute(OID.messageDigest, octetNode(digest)),
  ];
  // DER orders a SET OF by the encodings of its members.
  attrs.sort(Buffer.compare);
  const attrsDer = Buffer.concat(attrs);
  const signature = cryptoSign('sha256', Buffer.concat([derHeader(0x31, attrsDer.length), attrsDer]), key);

  const sha256 = algorithm(OID.sha256, true);
  const signerInfo = seqNode([
    intNode(1),
    seqNode([fromDer(cert.issuer), asn1.create(asn1.Class.UNIVERSAL, asn1.Type.INTEGER, false, binary(cert.serial))]),
    sha256,
    asn1.create(asn1.Class.CONTEXT_SPECIFIC, 0, true, attrs.map(fromDer)),
    keyType === 'rsa' ? algorithm(OID.rsaEncryption, true) : algorithm(OID.ecdsaWithSha256, false),
    octetNode(signature),
  ]);
  const contentInfo = seqNode([
    oidNode(OID.signedData),
    asn1.create(asn1.Class.CONTEXT_SPECIFIC, 0, true, [
      seqNode([
        intNode(1),
        asn1.create(asn1.Class.UNIVERSAL, asn1.Type.SET, true, [algorithm(OID.sha256, true)]),
        seqNode([oidNode(OID.data)]),
        asn1.create(asn1.Class.UNIVERSAL, asn1.Type.SET, true, [signerInfo]),
      ]),
    ]),
  ]);
  const p7s = Buffer.from(asn1.toDer(contentInfo).getBytes(), 'binary');
  return mimeMessage(signedPart, p7s);
}

/**
 * Keys read from PEM, by their text: decoding a PKCS#8 key through OpenSSL cost more than the
 * RSA signature itself (~1.2 ms against ~0.5 ms), and a signer signs with the same few keys again
 * and again (an agent with its one key, the fleet simulator with its pool). Bounded: the
 * oldest entry goes when a new key would pass KEY_CACHE_ENTRIES.
 */
const KEY_CACHE_ENTRIES = 64;
const keys = new Map<string, { key: KeyObject; spki: Buffer }>();

function privateKey(pem: string): { key: KeyObject; spki: Buffer } {
  const known = keys.get(pem);
  if (known) return known;
  let key: KeyObject;
  try {
    key = createPrivateKey(pem);
  } catch (err) {
    throw capstanError('ERR_KEY', 'not a readable unencrypted private key', { cause: err });
  }
  const entry = { key, spki: createPublicKey(key).export({ type: 'spki', format: 'der' }) };
  if (keys.size >= KEY_CACHE_ENTRIES) keys.delete(keys.keys().next().value!);
  keys.set(pem, entry);
  return entry;
}

/** The same layout OpenSSL's SMIME_write_ASN1 produces (LF outside the signed part). */
function mimeMessage(signedPart: Buffer, p7s: Buffer): Buffer {
  const boundary = '----' + randomBytes(16).toString('hex').toUpperCase();
  const b64 = p7s.toString('base64').replace(/.{64}/g, '$&\n').replace(/\n$/, '');
  return Buffer.concat([
    Buffer.from(
      'MIME-Version: 1.0\n' +
        'Content-Type: multipart/signed; protocol="application/x-pkcs7-signature"; micalg="sha-256"; ' +
        `boundary="${boundary}"\n\n` +
        'This is an S/MIME signed message\n\n' +
        `--${boundary}\n`,
    ),
    signedPart,
    Buffer.from(
      `\n--${boundary}\n` +
        'Content-Type: application/x-pkcs7-signature; name="smime.p7s"\n' +
        'Content-Transfer-Encoding: base64\n' +
        'Content-Disposition: attachment; filename="smime.p7s"\n\n' +
        `${b64}\n\n--${boundary}--\n\n`,
    ),
  ]);
}

// --- forge ASN.1 helpers -------------------------------------------------------------------------

const binary = (b: Buffer): string => b.toString('binary');
const seqNode = (items: forge.asn1.Asn1[]): forge.asn1.Asn1 => asn1.create(asn1.Class.UNIVERSAL, asn1.Type.SEQUENCE, true, items);
const oidNode = (oid: string): forge.asn1.Asn1 => asn1.create(asn1.Class.UNIVERSAL, asn1.Type.OID, false, asn1.oidToDer(oid).getBytes());
const octetNode = (b: Buffer): forge.asn1.Asn1 => asn1.create(asn1.Class.UNIVERSAL, asn1.Type.OCTETSTRING, false, binary(b));
const intNode = (n: number): forge.asn1.Asn1 => asn1.create(asn1.Class.UNIVERSAL, asn1.Type.INTEGER, false, asn1.integerToDer(n).getBytes());
const toDer = (node: forge.asn1.Asn1): Buffer => Buffer.from(asn1.toDer(node).getBytes(), 'binary');
// Embeds DER taken from elsewhere (the certificate's issuer, the sorted attributes) unchanged.
const fromDer = (der: Buffer): forge.asn1.Asn1 => asn1.fromDer(binary(der), true);

function algorithm(oid: string, nullParams: boolean): forge.asn1.Asn1 {
  const items = [oidNode(oid)];
  if (nullParams) items.push(asn1.create(asn1.Class.UNIVERSAL, asn1.Type.NULL, false, ''));
  return seqNode(items);
}

function attribute(oid: string, value: forge.asn1.Asn1): Buffer {
  return toDer(seqNode([oidNode(oid), asn1.create(asn1.Class.UNIVERSAL, asn1.Type.SET, true, [value])]));
}

/** UTCTime through 2049, GeneralizedTime after, as RFC 5652 asks for signingTime. */
function timeNode(d: Date): forge.asn1.Asn1 {
  const y = d.getUTCFullYear();
  if (y >= 1950 && y < 2050) return asn1.create(asn1.Class.UNIVERSAL, asn1.Type.UTCTIME, false, asn1.dateToUtcTime(d));
  return asn1.create(asn1.Class.UNIVERSAL, asn1.Type.GENERALIZEDTIME, false, asn1.dateToGeneralizedTime(d));
}
