/**
 * The parts of an X.509 certificate that S/MIME needs: the issuer Name and serial number that a
 * SignerInfo names its signer by, the subject key identifier (CMS's other way), the subject UID
 * (RUDDER's node id), and the public key. The DER reader extracts the fields; node:crypto makes
 * the key.
 *
 * Two entry points. `checkCertificate` is for certificates arriving from outside (enrollment, an
 * admin adding a node): node:crypto's X509Certificate parses and validates the whole thing.
 * `parseCertificate` is for the pinned certificates the root verifies every run log against:
 * only the fields above, with the RSA key imported from its modulus and exponent (JWK). Measured
 * on Node 20: X509Certificate or createPublicKey(SPKI) cost ~110 µs each, through OpenSSL 3's
 * decoders; a JWK import ~7 µs. At the root that was half of a run log's S/MIME verification.
 */
import { createPublicKey, X509Certificate, type KeyObject } from 'node:crypto';
import { capstanError } from '../errors.js';
import { CONTEXT, DerError, TAG, UNIVERSAL, children, expect, is, octets, oid, readOne, seq, stringValue, type Tlv } from './der.js';
import { OID } from './algorithms.js';

export interface ParsedCertificate {
  pem: string;
  der: Buffer;
  publicKey: KeyObject;
  /** DER of the issuer Name, exactly as in the certificate. */
  issuer: Buffer;
  /** Contents octets of the serialNumber INTEGER. */
  serial: Buffer;
  /** DER of the subject Name. */
  subject: Buffer;
  subjectKeyId?: Buffer;
}

const PEM_CERT = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g;

/** Split a concatenated PEM bundle into one PEM string per certificate (text outside is ignored). */
export function parseCertificates(pemBundle: string): string[] {
  return (pemBundle.match(PEM_CERT) ?? []).map((p) => p.replace(/\r\n/g, '\n') + '\n');
}

const PEM_ONE = /-----BEGIN CERTIFICATE-----\r?\n([A-Za-z0-9+/=\s]+)-----END CERTIFICATE-----/;

/** The DER inside one PEM certificate block. */
function pemDer(pem: string): Buffer {
  const m = PEM_ONE.exec(pem);
  const der = m ? Buffer.from(m[1]!.replace(/\s+/g, ''), 'base64') : null;
  if (!der || der.length === 0) throw capstanError('ERR_CERTIFICATE', 'not a readable X.509 certificate: expected one PEM CERTIFICATE block');
  return der;
}

/** An ASN.1 INTEGER's magnitude as base64url, without the sign byte (JWK's form). */
function jwkInteger(t: Tlv | undefined, what: string): string {
  let b = expect(t, UNIVERSAL, TAG.INTEGER, what).body;
  if (b.length === 0 || (b[0]! & 0x80) !== 0) throw new DerError(`${what} is not a positive INTEGER`);
  while (b.length > 1 && b[0] === 0) b = b.subarray(1);
  return b.toString('base64url');
}

/** The public key of a SubjectPublicKeyInfo: RSA through JWK (fast), anything else through SPKI. */
function publicKeyOf(spki: Tlv): KeyObject {
  const [alg, bits] = seq(spki, 'SubjectPublicKeyInfo');
  const algorithm = oid(seq(alg, 'AlgorithmIdentifier')[0], 'algorithm');
  try {
    if (algorithm === OID.rsaEncryption) {
      const bitString = expect(bits, UNIVERSAL, TAG.BIT_STRING, 'subjectPublicKey').body;
      if (bitString[0] !== 0) throw new DerError('subjectPublicKey has unused bits');
      const [n, e] = seq(readOne(bitString.subarray(1)), 'RSAPublicKey');
      return createPublicKey({ key: { kty: 'RSA', n: jwkInteger(n, 'modulus'), e: jwkInteger(e, 'publicExponent') }, format: 'jwk' });
    }
    return createPublicKey({ key: spki.raw, format: 'der', type: 'spki' });
  } catch (err) {
    if (err instanceof DerError) throw err;
    throw capstanError('ERR_CERTIFICATE', 'certificate public key is not usable', { cause: err });
  }
}

/**
 * Parse one pinned PEM certificate (see the header: fields and key, not a full validation);
 * anything unreadable → ERR_CERTIFICATE.
 */
export function parseCertificate(pem: string): ParsedCertificate {
  const der = pemDer(pem);
  return walkTbs(der, (tbs, i) => {
    const serial = expect(tbs[i], UNIVERSAL, TAG.INTEGER, 'serialNumber').body;
    const issuer = expect(tbs[i + 2], UNIVERSAL, TAG.SEQUENCE, 'issuer').raw;
    const subject = expect(tbs[i + 4], UNIVERSAL, TAG.SEQUENCE, 'subject').raw;
    const publicKey = publicKeyOf(expect(tbs[i + 5], UNIVERSAL, TAG.SEQUENCE, 'subjectPublicKeyInfo'));
    const parsed: ParsedCertificate = { pem, der, publicKey, issuer, serial, subject };
    const ski = subjectKeyId(tbs.slice(i + 6));
    if (ski) parsed.subjectKeyId = ski;
    return parsed;
  });
}

/**
 * `read` given a certificate's TBSCertificate fields and the index of its serialNumber (1 after
 * an explicit version, else 0); a DER error in either becomes ERR_CERTIFICATE.
 */
function walkTbs<T>(der: Buffer, read: (tbs: Tlv[], i: number) => T): T {
  try {
    const top = readOne(der);
    if (top.raw.length !== der.length) throw new DerError('trailing bytes after the certificate');
    const tbs = seq(seq(top, 'Certificate')[0], 'TBSCertificate');
    return read(tbs, is(tbs[0], CONTEXT, 0) ? 1 : 0); // [0] EXPLICIT version
  } catch (err) {
    if (err instanceof DerError) throw capstanError('ERR_CERTIFICATE', `malformed certificate: ${err.message}`, { cause: err });
    throw err;
  }
}

/**
 * The DER of a PEM certificate's SubjectPublicKeyInfo, as the certificate holds it (DER is
 * canonical: the bytes OpenSSL exports for its key). A walk of the TBSCertificate: 12 µs with
 * the hash for an RSA 2048 certificate, against 338 µs parsing it whole with X509Certificate and
 * exporting the key (measured on a loaded 2-core machine); the relays' nodes list hashes the key
 * of every node it lists. Malformed → ERR_CERTIFICATE.
 */
export function spkiOf(pem: string): Buffer {
  return walkTbs(pemDer(pem), (tbs, i) => expect(tbs[i + 5], UNIVERSAL, TAG.SEQUENCE, 'subjectPublicKeyInfo').raw);
}

/**
 * A certificate from outside: validated whole by node:crypto (OpenSSL's X.509 parser), then
 * parsed as above; the two must agree on the DER.
 */
export function checkCertificate(pem: string): ParsedCertificate {
  const kept = checked.get(pem);
  if (kept) return kept;
  let x509: X509Certificate;
  try {
    x509 = new X509Certificate(pem);
  } catch (err) {
    throw capstanError('ERR_CERTIFICATE', 'not a readable X.509 certificate', { cause: err });
  }
  const parsed = parseCertificate(pem);
  if (!parsed.der.equals(x509.raw)) throw capstanError('ERR_CERTIFICATE', 'not a readable X.509 certificate: unexpected PEM layout');
  checked.set(pem, parsed);
  if (checked.size > CHECKED_KEPT) checked.delete(checked.keys().next().value!);
  return parsed;
}

/**
 * The last certificates checkCertificate accepted, by their PEM text (its answer depends on the
 * text alone). An inventory's certificate is checked for its node id and for its fingerprint,
 * and OpenSSL's parse was 8 % of a server's time while a fleet enrolled.
 */
const CHECKED_KEPT = 32;
const checked = new Map<string, ParsedCertificate>();

function subjectKeyId(rest: Tlv[]): Buffer | undefined {
  const exts = rest.find((t) => is(t, CONTEXT, 3));
  if (!exts) return undefined;
  for (const ext of seq(children(exts)[0], 'Extensions')) {
    const fields = seq(ext, 'Extension');
    if (oid(fields[0]) !== OID.subjectKeyIdentifier) continue;
    const value = octets(fields[fields.length - 1], 'extnValue');
    return octets(readOne(value), 'SubjectKeyIdentifier');
  }
  return undefined;
}

/** The first UID (userId, 0.9.2342.19200300.100.1.1) attribute of a DER Name, if any. */
export function nameUid(name: Buffer): string | null {
  for (const rdn of children(readOne(name))) {
    for (const atv of children(rdn)) {
      const [type, value] = seq(atv, 'AttributeTypeAndValue');
      if (oid(type) === OID.userId && value) return stringValue(value);
    }
  }
  return null;
}
