/**
 * S/MIME verification with the semantics relayd gets from OpenSSL
 * (`PKCS7_verify` with TEXT | NOINTERN | NOVERIFY, R/src/input.rs):
 * - the signer is looked up among the caller's certificates by issuer + serial number (or subject
 *   key identifier); certificates inside the message are ignored, validity and chain are not checked;
 * - the messageDigest attribute must match the signed bytes, and the signature must verify over the
 *   signed attributes re-encoded as a SET OF;
 * - the returned content is the signed text without its `Content-Type: text/plain` header block.
 * node-forge's pkcs7 cannot verify, so the structure is walked here and node:crypto checks the math.
 */
import { createHash, verify as cryptoVerify } from 'node:crypto';
import { capstanError, isCapstanError, type CapstanError } from '../errors.js';
import { DIGESTS, OID, SHA1_SIGNATURES, SIGNATURES } from './algorithms.js';
import { parseCertificate, parseCertificates, type ParsedCertificate } from './certificate.js';
import {
  CONTEXT, DerError, TAG, UNIVERSAL, children, derHeader, expect, is, octets, oid, readOne, seq, time, type Tlv,
} from './der.js';
import { MimeError, decodeBase64, parseContentType, parseHeaders, splitSigned } from './mime.js';

export interface VerifiedContent {
  content: Buffer;
  signerCertPem: string;
  signingTime?: Date;
}

export interface VerifyOptions {
  /** Largest signed message accepted, in bytes. */
  maxBytes?: number;
  /**
   * Accept SHA-1 signatures (old agents). Off by default: SHA-1 collisions are practical, so a
   * SHA-1 signature is refused with ERR_SMIME_WEAK_DIGEST, as MD5 always is.
   */
  allowSha1?: boolean;
}

export const DEFAULT_SMIME_MAX_BYTES = 64 * 1024 * 1024;

const SIGNATURE_TYPES = new Set(['application/pkcs7-signature', 'application/x-pkcs7-signature']);
const OPAQUE_TYPES = new Set(['application/pkcs7-mime', 'application/x-pkcs7-mime']);

/**
 * Verify a clear-signed (multipart/signed) or opaque (application/pkcs7-mime) S/MIME message
 * against `certsPem` and return the signed text. Every failure is a CapstanError:
 * ERR_SMIME_FORMAT, ERR_SMIME_UNSUPPORTED, ERR_SMIME_SIGNER_NOT_FOUND, ERR_SMIME_DIGEST,
 * ERR_SMIME_SIGNATURE, or ERR_CERTIFICATE for an unreadable certificate in `certsPem`.
 */
export function verifySmime(signed: Buffer, certsPem: string[], opts: VerifyOptions = {}): VerifiedContent {
  return coded(() => verifyMessage(signed, certsPem, opts.maxBytes ?? DEFAULT_SMIME_MAX_BYTES, opts.allowSha1 === true));
}

/**
 * The signed text of an S/MIME message WITHOUT checking any signature, for reading what a message
 * claims before it can be verified (the certificate a node's first inventory carries, which the
 * message must then verify against). Never trust the result otherwise. Errors as verifySmime's.
 */
export function readSignedContentUnverified(signed: Buffer, opts: VerifyOptions = {}): Buffer {
  return coded(() => {
    const { content, der } = unwrapMime(checkSize(signed, opts.maxBytes ?? DEFAULT_SMIME_MAX_BYTES));
    const eContent = content ? undefined : parseSignedData(der).eContent;
    if (!content && !eContent) throw format('opaque signed message without content');
    return stripTextHeader((content ?? eContent)!);
  });
}

function coded<T>(f: () => T): T {
  try {
    return f();
  } catch (err) {
    if (isCapstanError(err)) throw err;
    if (err instanceof DerError || err instanceof MimeError) throw format(err.message, err);
    // Anything else is a bug, but a hostile input must still get a coded answer.
    throw format('unreadable S/MIME message', err);
  }
}

function checkSize(input: Buffer, maxBytes: number): Buffer {
  if (!Buffer.isBuffer(input)) throw format('signed message must be a Buffer');
  if (input.length > maxBytes) {
    throw capstanError('ERR_SMIME_FORMAT', `signed message exceeds ${maxBytes} bytes`, { details: { size: input.length, maxBytes } });
  }
  return input;
}

function format(message: string, cause?: unknown): CapstanError {
  return capstanError('ERR_SMIME_FORMAT', message, { cause });
}

/**
 * Pinned certificates already parsed, by their PEM text: the root verifies every run log of a
 * node against the same one, and parsing it (PEM, DER, key import) was a tenth of each
 * verification. Bounded; the oldest entry goes first. A certificate that does not parse is not
 * kept (it fails again, with its error).
 */
const PARSED = new Map<string, ParsedCertificate[]>();
const PARSED_MAX = 4096;

function pinned(pem: string): ParsedCertificate[] {
  let certs = PARSED.get(pem);
  if (certs) return certs;
  const split = parseCertificates(pem);
  certs = (split.length > 0 ? split : [pem]).map(parseCertificate);
  if (PARSED.size >= PARSED_MAX) PARSED.delete(PARSED.keys().next().value!);
  PARSED.set(pem, certs);
  return certs;
}

function verifyMessage(input: Buffer, certsPem: string[], maxBytes: number, allowSha1: boolean): VerifiedContent {
  checkSize(input, maxBytes);
  const certs = certsPem.flatMap(pinned);

  const { content, der } = unwrapMime(input);
  const signedData = parseSignedData(der);
  let signed: Buffer;
  if (content) {
    if (signedData.eContent) throw format('detached signature carries content too');
    signed = content;
  } else {
    if (!signedData.eContent) throw format('opaque signed message without content');
    signed = signedData.eContent;
  }

  const signerInfos = signedData.signerInfos;
  if (signerInfos.length === 0) throw format('no SignerInfo');
  // Every signer must verify, as PKCS7_verify requires; the first one is reported.
  let first: { cert: ParsedCertificate; signingTime?: Date } | undefined;
  for (const si of signerInfos) {
    const r = verifySigner(si, signed, signedData.eContentType, certs, allowSha1);
    first ??= r;
  }

  const text = stripTextHeader(signed);
  const out: VerifiedContent = { content: text, signerCertPem: first!.cert.pem };
  if (first!.signingTime) out.signingTime = first!.signingTime;
  return out;
}

/** Find the signed bytes (clear-signed) and the PKCS#7 DER in a MIME message. */
function unwrapMime(input: Buffer): { content?: Buffer; der: Buffer } {
  const headers = parseHeaders(input);
  const ctValue = headers.fields.get('content-type');
  if (!ctValue) throw format('no Content-Type header');
  const ct = parseContentType(ctValue);
  if (ct.type === 'multipart/signed') {
    const { signedPart, signaturePart } = splitSigned(input, headers, ct);
    const sigHeaders = parseHeaders(signaturePart);
    const sigType = parseContentType(sigHeaders.fields.get('content-type') ?? 'text/plain').type;
    if (!SIGNATURE_TYPES.has(sigType)) throw format(`signature part has type ${sigType}`);
    checkBase64(sigHeaders.fields.get('content-transfer-encoding'));
    return { content: signedPart, der: decodeBase64(signaturePart.subarray(sigHeaders.bodyStart)) };
  }
  if (OPAQUE_TYPES.has(ct.type)) {
    const smimeType = ct.params.get('smime-type')?.toLowerCase();
    if (smimeType && smimeType !== 'signed-data') {
      throw capstanError('ERR_SMIME_UNSUPPORTED', `S/MIME type ${smimeType} is not supported`);
    }
    checkBase64(headers.fields.get('content-transfer-encoding'));
    return { der: decodeBase64(input.subarray(headers.bodyStart)) };
  }
  throw format(`not an S/MIME signed message (Content-Type ${ct.type})`);
}

function checkBase64(cte: string | undefined): void {
  if (cte !== undefined && cte.toLowerCase() !== 'base64') {
    throw capstanError('ERR_SMIME_UNSUPPORTED', `Content-Transfer-Encoding ${cte} is not supported`);
  }
}

interface SignedData {
  eContentType: string;
  eContent?: Buffer;
  signerInfos: Tlv[];
}

function parseSignedData(der: Buffer): SignedData {
  const ci = seq(readOne(der), 'ContentInfo');
  const type = oid(ci[0], 'content type');
  if (type !== OID.signedData) throw capstanError('ERR_SMIME_UNSUPPORTED', `PKCS#7 content type ${type} is not signedData`);
  const explicit = expect(ci[1], CONTEXT, 0, '[0] content');
  const sd = seq(children(explicit)[0], 'SignedData');
  expect(sd[0], UNIVERSAL, TAG.INTEGER, 'SignedData version');
  expect(sd[1], UNIVERSAL, TAG.SET, 'digestAlgorithms');
  const encap = seq(sd[2], 'EncapsulatedContentInfo');
  const out: SignedData = { eContentType: oid(encap[0], 'eContentType'), signerInfos: [] };
  if (encap[1]) out.eContent = octets(children(expect(encap[1], CONTEXT, 0, '[0] eContent'))[0], 'eContent');
  // Optional [0] certificates and [1] crls, then the signerInfos SET, which must come last.
  let i = 3;
  while (is(sd[i], CONTEXT, 0) || is(sd[i], CONTEXT, 1)) i++;
  out.signerInfos = children(expect(sd[i], UNIVERSAL, TAG.SET, 'signerInfos'));
  if (sd.length !== i + 1) throw format('unexpected fields after signerInfos');
  return out;
}

function verifySigner(
  siTlv: Tlv, signed: Buffer, eContentType: string, certs: ParsedCertificate[], allowSha1: boolean,
): { cert: ParsedCertificate; signingTime?: Date } {
  const si = seq(siTlv, 'SignerInfo');
  expect(si[0], UNIVERSAL, TAG.INTEGER, 'SignerInfo version');
  const cert = findSigner(si[1], certs);
  const digestOid = oid(seq(si[2], 'digestAlgorithm')[0], 'digest algorithm');
  const hash = DIGESTS.get(digestOid);
  if (!hash) throw capstanError('ERR_SMIME_UNSUPPORTED', `digest algorithm ${digestOid} is not supported`);
  let i = 3;
  const attrs = is(si[i], CONTEXT, 0) ? si[i++] : undefined;
  const sigOid = oid(seq(si[i++], 'signatureAlgorithm')[0], 'signature algorithm');
  const keyType = SIGNATURES.get(sigOid);
  if (!keyType) throw capstanError('ERR_SMIME_UNSUPPORTED', `signature algorithm ${sigOid} is not supported`);
  if (!allowSha1 && (hash === 'sha1' || SHA1_SIGNATURES.has(sigOid))) {
    throw capstanError('ERR_SMIME_WEAK_DIGEST', 'SHA-1 signatures are refused (sign with SHA-256, or allow SHA-1 for old agents in the configuration)');
  }
  const signature = octets(si[i++], 'signature');
  if (si[i] && !is(si[i], CONTEXT, 1)) throw format('unexpected field in SignerInfo');

  const digest = createHash(hash).update(signed).digest();
  let toVerify = signed;
  let signingTime: Date | undefined;
  if (attrs) {
    const a = readAttributes(attrs);
    if (a.contentType !== undefined && a.contentType !== eContentType) throw format('contentType attribute does not match the content');
    if (!a.messageDigest.equals(digest)) throw capstanError('ERR_SMIME_DIGEST', 'content does not match its signed digest');
    signingTime = a.signingTime;
    // The signature covers the attributes as a DER SET OF (tag 0x31), not as the [0] IMPLICIT field.
    toVerify = Buffer.concat([derHeader(0x31, attrs.body.length), attrs.body]);
  }

  if (cert.publicKey.asymmetricKeyType !== keyType) {
    throw capstanError('ERR_SMIME_SIGNATURE', `a ${cert.publicKey.asymmetricKeyType ?? 'unknown'} key cannot make a ${keyType} signature`);
  }
  let ok = false;
  try {
    ok = cryptoVerify(hash, toVerify, cert.publicKey, signature);
  } catch (err) {
    throw capstanError('ERR_SMIME_SIGNATURE', 'signature does not verify', { cause: err });
  }
  if (!ok) throw capstanError('ERR_SMIME_SIGNATURE', 'signature does not verify');
  return signingTime ? { cert, signingTime } : { cert };
}

/** Match the SignerIdentifier against the given certificates only (OpenSSL's NOINTERN). */
function findSigner(sid: Tlv | undefined, certs: ParsedCertificate[]): ParsedCertificate {
  let found: ParsedCertificate | undefined;
  if (!sid) throw format('SignerInfo without a SignerIdentifier');
  if (is(sid, UNIVERSAL, TAG.SEQUENCE)) {
    const [issuer, serial] = children(sid);
    const issuerDer = expect(issuer, UNIVERSAL, TAG.SEQUENCE, 'issuer').raw;
    const serialBytes = expect(serial, UNIVERSAL, TAG.INTEGER, 'serialNumber').body;
    found = certs.find((c) => c.serial.equals(serialBytes) && c.issuer.equals(issuerDer));
  } else if (is(sid, CONTEXT, 0) && !sid.constructed) {
    found = certs.find((c) => c.subjectKeyId?.equals(sid.body));
  } else {
    throw format('malformed SignerIdentifier');
  }
  if (!found) throw capstanError('ERR_SMIME_SIGNER_NOT_FOUND', 'signer certificate not found');
  return found;
}

interface SignedAttributes {
  messageDigest: Buffer;
  contentType?: string;
  signingTime?: Date;
}

function readAttributes(attrs: Tlv): SignedAttributes {
  const seen = new Set<string>();
  let messageDigest: Buffer | undefined;
  const out: Partial<SignedAttributes> = {};
  for (const attr of children(attrs)) {
    const [typeTlv, valuesTlv] = seq(attr, 'Attribute');
    const type = oid(typeTlv, 'attribute type');
    if (seen.has(type)) throw format(`duplicate signed attribute ${type}`);
    seen.add(type);
    const values = children(expect(valuesTlv, UNIVERSAL, TAG.SET, 'attribute values'));
    if (type === OID.messageDigest || type === OID.contentType || type === OID.signingTime) {
      if (values.length !== 1) throw format(`signed attribute ${type} must have one value`);
      const v = values[0]!;
      if (type === OID.messageDigest) messageDigest = octets(v, 'messageDigest');
      else if (type === OID.contentType) out.contentType = oid(v, 'contentType');
      else out.signingTime = time(v);
    }
  }
  if (!messageDigest) throw format('signed attributes lack messageDigest');
  return { ...out, messageDigest };
}

/** openssl's -text: the signed text must start with a text/plain header block, which is dropped. */
function stripTextHeader(signed: Buffer): Buffer {
  let headers;
  try {
    headers = parseHeaders(signed);
  } catch (err) {
    throw format('signed content has no MIME header (expected Content-Type: text/plain)', err);
  }
  const ct = headers.fields.get('content-type');
  if (!ct || parseContentType(ct).type !== 'text/plain') throw format('signed content is not text/plain');
  return signed.subarray(headers.bodyStart);
}
