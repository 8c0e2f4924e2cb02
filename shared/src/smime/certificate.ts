/**
 * The parts of an X.509 certificate that S/MIME needs: the issuer Name and serial number that a
 * SignerInfo names its signer by, the subject key identifier (CMS's other way), the subject UID
 * (RUDDER's node id), and the public key. node:crypto parses and validates the certificate; the
 * DER reader extracts the raw fields node:crypto only exposes as display strings.
 */
import { X509Certificate, type KeyObject } from 'node:crypto';
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

/** Parse one PEM certificate; anything unreadable → ERR_CERTIFICATE. */
export function parseCertificate(pem: string): ParsedCertificate {
  let x509: X509Certificate;
  try {
    x509 = new X509Certificate(pem);
  } catch (err) {
    throw capstanError('ERR_CERTIFICATE', 'not a readable X.509 certificate', { cause: err });
  }
  const der = x509.raw;
  try {
    const tbs = seq(seq(readOne(der), 'Certificate')[0], 'TBSCertificate');
    let i = 0;
    if (is(tbs[0], CONTEXT, 0)) i++; // [0] EXPLICIT version
    const serial = expect(tbs[i], UNIVERSAL, TAG.INTEGER, 'serialNumber').body;
    const issuer = expect(tbs[i + 2], UNIVERSAL, TAG.SEQUENCE, 'issuer').raw;
    const subject = expect(tbs[i + 4], UNIVERSAL, TAG.SEQUENCE, 'subject').raw;
    const parsed: ParsedCertificate = { pem, der, publicKey: x509.publicKey, issuer, serial, subject };
    const ski = subjectKeyId(tbs.slice(i + 6));
    if (ski) parsed.subjectKeyId = ski;
    return parsed;
  } catch (err) {
    if (err instanceof DerError) throw capstanError('ERR_CERTIFICATE', `malformed certificate: ${err.message}`, { cause: err });
    throw err;
  }
}

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
