/**
 * A small, strict-enough BER/DER reader for the few structures S/MIME verification walks
 * (ContentInfo, SignedData, SignerInfo, X.509 TBSCertificate).
 *
 * Why not forge.asn1.fromDer: verification needs the *original bytes* of some elements (the signed
 * attributes, the issuer Name) and their offsets, and must turn every malformed input into a coded
 * error. Reading TLVs ourselves gives both, and keeps hostile input away from forge's parser.
 * Indefinite lengths are accepted (OpenSSL's streaming output is BER); they stay rare here.
 */

export interface Tlv {
  /** Tag class: 0 universal, 1 application, 2 context-specific, 3 private. */
  cls: number;
  constructed: boolean;
  /** Tag number (low-tag form up to 30, high-tag form decoded). */
  tag: number;
  /** The whole element (identifier, length, contents, end-of-contents if any). */
  raw: Buffer;
  /** The contents octets (for indefinite lengths, without the end-of-contents marker). */
  body: Buffer;
}

/** Thrown by the reader; callers wrap it into the CapstanError code that fits their input. */
export class DerError extends Error {
  override name = 'DerError';
}

export const UNIVERSAL = 0;
export const CONTEXT = 2;
export const TAG = {
  BOOLEAN: 1, INTEGER: 2, BIT_STRING: 3, OCTET_STRING: 4, NULL: 5, OID: 6,
  UTF8_STRING: 12, SEQUENCE: 16, SET: 17, PRINTABLE_STRING: 19, T61_STRING: 20,
  IA5_STRING: 22, UTC_TIME: 23, GENERALIZED_TIME: 24, UNIVERSAL_STRING: 28, BMP_STRING: 30,
} as const;

// Deep enough for any certificate or CMS structure; shallow enough that a crafted nest of
// indefinite-length elements cannot exhaust the stack.
const MAX_DEPTH = 64;

/** Read one element at `pos`; `end` bounds it. */
export function readTlv(buf: Buffer, pos = 0, end = buf.length, depth = 0): Tlv {
  if (depth > MAX_DEPTH) throw new DerError('ASN.1 nesting too deep');
  const start = pos;
  if (pos >= end) throw new DerError('ASN.1 element truncated');
  const id = buf[pos++]!;
  const cls = id >> 6;
  const constructed = (id & 0x20) !== 0;
  let tag = id & 0x1f;
  if (tag === 0x1f) {
    tag = 0;
    for (let n = 0; ; n++) {
      if (pos >= end || n > 3) throw new DerError('bad ASN.1 tag');
      const b = buf[pos++]!;
      tag = tag * 128 + (b & 0x7f);
      if ((b & 0x80) === 0) break;
    }
  }
  if (pos >= end) throw new DerError('ASN.1 length truncated');
  const first = buf[pos++]!;
  if (first === 0x80) {
    // Indefinite length: constructed only; children run until an end-of-contents (00 00).
    if (!constructed) throw new DerError('indefinite length on a primitive element');
    const bodyStart = pos;
    for (;;) {
      if (pos + 2 > end) throw new DerError('missing end-of-contents');
      if (buf[pos] === 0 && buf[pos + 1] === 0) {
        return { cls, constructed, tag, raw: buf.subarray(start, pos + 2), body: buf.subarray(bodyStart, pos) };
      }
      pos += readTlv(buf, pos, end, depth + 1).raw.length;
    }
  }
  let len = first;
  if (first & 0x80) {
    const n = first & 0x7f;
    if (n > 4) throw new DerError('ASN.1 length too large');
    len = 0;
    for (let i = 0; i < n; i++) {
      if (pos >= end) throw new DerError('ASN.1 length truncated');
      len = len * 256 + buf[pos++]!;
    }
  }
  if (len > end - pos) throw new DerError('ASN.1 element overruns its container');
  return { cls, constructed, tag, raw: buf.subarray(start, pos + len), body: buf.subarray(pos, pos + len) };
}

/** Read a whole buffer as exactly one element (no trailing bytes). */
export function readOne(buf: Buffer): Tlv {
  const t = readTlv(buf);
  if (t.raw.length !== buf.length) throw new DerError('trailing bytes after ASN.1 element');
  return t;
}

/** The children of a constructed element. */
export function children(t: Tlv, depth = 0): Tlv[] {
  if (!t.constructed) throw new DerError('expected a constructed element');
  const out: Tlv[] = [];
  for (let pos = 0; pos < t.body.length; ) {
    const c = readTlv(t.body, pos, t.body.length, depth + 1);
    out.push(c);
    pos += c.raw.length;
  }
  return out;
}

export function is(t: Tlv | undefined, cls: number, tag: number): boolean {
  return t !== undefined && t.cls === cls && t.tag === tag;
}

/** Check an element's class and tag, or throw naming what was expected. */
export function expect(t: Tlv | undefined, cls: number, tag: number, what: string): Tlv {
  if (!t || !is(t, cls, tag)) throw new DerError(`expected ${what}`);
  return t;
}

export function seq(t: Tlv | undefined, what: string): Tlv[] {
  const s = expect(t, UNIVERSAL, TAG.SEQUENCE, what);
  return children(s);
}

/** Dotted-decimal form of an OBJECT IDENTIFIER. */
export function oid(t: Tlv | undefined, what = 'OBJECT IDENTIFIER'): string {
  const b = expect(t, UNIVERSAL, TAG.OID, what).body;
  if (b.length === 0 || b.length > 64 || t!.constructed) throw new DerError(`bad ${what}`);
  const arcs: number[] = [];
  let v = 0;
  for (let i = 0; i < b.length; i++) {
    v = v * 128 + (b[i]! & 0x7f);
    if ((b[i]! & 0x80) === 0) {
      arcs.push(v);
      v = 0;
    } else if (i === b.length - 1) {
      throw new DerError(`bad ${what}`);
    }
  }
  const head = arcs[0]!;
  const top = head < 40 ? 0 : head < 80 ? 1 : 2;
  return [top, head - top * 40, ...arcs.slice(1)].join('.');
}

/** Contents of a primitive or (BER) constructed OCTET STRING, reassembled. */
export function octets(t: Tlv | undefined, what = 'OCTET STRING'): Buffer {
  const s = expect(t, UNIVERSAL, TAG.OCTET_STRING, what);
  if (!s.constructed) return s.body;
  return Buffer.concat(children(s).map((c) => octets(c, what)));
}

/** Decode the ASN.1 string types an X.509 Name may use. */
export function stringValue(t: Tlv): string | null {
  if (t.cls !== UNIVERSAL || t.constructed) return null;
  switch (t.tag) {
    case TAG.UTF8_STRING:
      return t.body.toString('utf8');
    case TAG.PRINTABLE_STRING:
    case TAG.IA5_STRING:
    case TAG.T61_STRING:
      return t.body.toString('latin1');
    case TAG.BMP_STRING:
      if (t.body.length % 2) return null;
      return Buffer.from(t.body).swap16().toString('utf16le');
    case TAG.UNIVERSAL_STRING: {
      if (t.body.length % 4) return null;
      let s = '';
      for (let i = 0; i < t.body.length; i += 4) s += String.fromCodePoint(t.body.readUInt32BE(i));
      return s;
    }
    default:
      return null;
  }
}

/** UTCTime or GeneralizedTime (the forms CMS signingTime and X.509 validity use). */
export function time(t: Tlv): Date {
  const s = t.body.toString('latin1');
  let m: RegExpExecArray | null;
  let year: number;
  if (is(t, UNIVERSAL, TAG.UTC_TIME) && (m = /^(\d\d)(\d\d)(\d\d)(\d\d)(\d\d)(\d\d)?Z$/.exec(s))) {
    const yy = Number(m[1]);
    year = yy < 50 ? 2000 + yy : 1900 + yy;
  } else if (is(t, UNIVERSAL, TAG.GENERALIZED_TIME) && (m = /^(\d{4})(\d\d)(\d\d)(\d\d)(\d\d)(\d\d)(?:\.\d+)?Z$/.exec(s))) {
    year = Number(m[1]);
  } else {
    throw new DerError('bad time value');
  }
  const d = new Date(Date.UTC(year, Number(m[2]) - 1, Number(m[3]), Number(m[4]), Number(m[5]), Number(m[6] ?? 0)));
  if (Number.isNaN(d.getTime())) throw new DerError('bad time value');
  return d;
}

/** A definite-length DER header for `len` content bytes. */
export function derHeader(tagByte: number, len: number): Buffer {
  if (len < 0x80) return Buffer.from([tagByte, len]);
  const bytes: number[] = [];
  for (let n = len; n > 0; n = Math.floor(n / 256)) bytes.unshift(n & 0xff);
  return Buffer.from([tagByte, 0x80 | bytes.length, ...bytes]);
}
