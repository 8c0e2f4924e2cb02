/**
 * Just enough MIME for S/MIME as OpenSSL writes and reads it (crypto/asn1/asn_mime.c):
 * header blocks, Content-Type parameters, multipart splitting and line canonicalisation.
 *
 * Everything works on Buffers: the signed part must be hashed byte for byte, and run logs may hold
 * invalid UTF-8. Errors are plain `MimeError`s; verify.ts turns them into coded errors.
 */

export class MimeError extends Error {
  override name = 'MimeError';
}

const LF = 0x0a;
const CR = 0x0d;
export const CRLF = Buffer.from('\r\n');

/** One line of a buffer, without its end-of-line; `eol` tells whether an LF ended it. */
interface Line {
  start: number;
  end: number;
  next: number;
  eol: boolean;
}

function lineAt(buf: Buffer, pos: number): Line {
  const nl = buf.indexOf(LF, pos);
  if (nl === -1) return { start: pos, end: buf.length, next: buf.length, eol: false };
  return { start: pos, end: nl, next: nl + 1, eol: true };
}

/** `end` with trailing CRs dropped, as OpenSSL's strip_eol does on every line. */
function trimCr(buf: Buffer, start: number, end: number): number {
  while (end > start && buf[end - 1] === CR) end--;
  return end;
}

/**
 * Canonical text as OpenSSL signs and reads it (SMIME_crlf_copy, multi_split): each line of
 * [start, end) that ends with LF ends with CRLF instead, trailing CRs of every line are dropped, and
 * the last line keeps no line end. Already-canonical text comes back as a view, without copying.
 */
export function canonicalise(buf: Buffer, start = 0, end = buf.length): Buffer {
  let outLen = 0;
  let canonical = true;
  for (let pos = start; ; ) {
    const nl = buf.indexOf(LF, pos);
    const eol = nl !== -1 && nl < end;
    const lineEnd = eol ? nl : end;
    const kept = trimCr(buf, pos, lineEnd);
    outLen += kept - pos + (eol ? 2 : 0);
    if (kept !== (eol ? lineEnd - 1 : lineEnd)) canonical = false;
    if (!eol) break;
    pos = nl + 1;
  }
  if (canonical) return buf.subarray(start, end);
  const out = Buffer.allocUnsafe(outLen);
  let o = 0;
  for (let pos = start; ; ) {
    const nl = buf.indexOf(LF, pos);
    const eol = nl !== -1 && nl < end;
    const lineEnd = eol ? nl : end;
    o += buf.copy(out, o, pos, trimCr(buf, pos, lineEnd));
    if (!eol) break;
    o += CRLF.copy(out, o);
    pos = nl + 1;
  }
  return out;
}

export interface Headers {
  /** Lower-cased header name → unfolded value (first occurrence wins). */
  fields: Map<string, string>;
  /** Offset of the first body byte, just after the empty line. */
  bodyStart: number;
}

const MAX_HEADER_LINES = 200;

/** Parse a header block starting at `pos` up to and including its empty line (CRLF or LF). */
export function parseHeaders(buf: Buffer, pos = 0, end = buf.length): Headers {
  const fields = new Map<string, string>();
  let name = '';
  let value = '';
  const flush = (): void => {
    if (name && !fields.has(name)) fields.set(name, value.trim());
    name = '';
  };
  for (let n = 0; pos < end; n++) {
    if (n > MAX_HEADER_LINES) throw new MimeError('too many header lines');
    const l = lineAt(buf, pos);
    if (!l.eol || l.next > end) throw new MimeError('header block does not end with an empty line');
    const text = buf.toString('latin1', l.start, trimCr(buf, l.start, l.end));
    pos = l.next;
    if (text === '') {
      flush();
      return { fields, bodyStart: pos };
    }
    if ((text[0] === ' ' || text[0] === '\t') && name) {
      value += ' ' + text.trim(); // folded continuation line
      continue;
    }
    const colon = text.indexOf(':');
    if (colon <= 0) throw new MimeError('malformed header line');
    flush();
    name = text.slice(0, colon).trim().toLowerCase();
    value = text.slice(colon + 1);
  }
  throw new MimeError('header block does not end with an empty line');
}

export interface ContentType {
  type: string;
  params: Map<string, string>;
}

/** `type/subtype; name=value; name="quoted value"` with lower-cased type and parameter names. */
export function parseContentType(value: string): ContentType {
  const semi = value.indexOf(';');
  const type = (semi === -1 ? value : value.slice(0, semi)).trim().toLowerCase();
  if (!/^[a-z0-9!#$&^_.+-]+\/[a-z0-9!#$&^_.+-]+$/.test(type)) throw new MimeError('malformed Content-Type');
  const params = new Map<string, string>();
  const re = /;\s*([^\s=;]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;]*))/g;
  const rest = semi === -1 ? '' : value.slice(semi);
  for (let m = re.exec(rest); m; m = re.exec(rest)) {
    const name = m[1]!.toLowerCase();
    const v = m[2] !== undefined ? m[2].replace(/\\(.)/g, '$1') : m[3]!;
    if (!params.has(name)) params.set(name, v);
  }
  return { type, params };
}

export interface MultipartSigned {
  /** The signed part, canonicalised to CRLF lines the way OpenSSL reads it back (multi_split). */
  signedPart: Buffer;
  /** The signature part, headers included, as transmitted (minus the line break before the delimiter). */
  signaturePart: Buffer;
}

/** Is the line `--boundary` (kind 1) or `--boundary--` (kind 2), allowing trailing blanks? */
function boundaryKind(buf: Buffer, l: Line, delim: Buffer): 0 | 1 | 2 {
  if (l.end - l.start < delim.length || buf.compare(delim, 0, delim.length, l.start, l.start + delim.length) !== 0) return 0;
  let p = l.start + delim.length;
  let kind: 1 | 2 = 1;
  if (p + 1 < l.end && buf[p] === 0x2d && buf[p + 1] === 0x2d) {
    kind = 2;
    p += 2;
  }
  for (; p < l.end; p++) {
    const c = buf[p];
    if (c !== 0x20 && c !== 0x09 && c !== CR) return 0;
  }
  return kind;
}

/**
 * Split a multipart body into its parts, each as a byte range: the line break before a delimiter
 * belongs to the delimiter (RFC 2046), so a part ends just before that LF. Preamble and epilogue
 * are ignored; exactly `expected` parts and a closing delimiter are required.
 */
export function splitMultipart(buf: Buffer, bodyStart: number, boundary: string, expected: number): Array<[number, number]> {
  const delim = Buffer.from('--' + boundary, 'latin1');
  const parts: Array<[number, number]> = [];
  let partStart = -1;
  for (let pos = bodyStart; pos < buf.length; ) {
    const l = lineAt(buf, pos);
    pos = l.next;
    const kind = boundaryKind(buf, l, delim);
    if (kind === 0) continue;
    if (partStart >= 0) parts.push([partStart, Math.max(partStart, l.start - 1)]);
    if (kind === 2) {
      if (parts.length !== expected) throw new MimeError(`expected ${expected} MIME parts, found ${parts.length}`);
      return parts;
    }
    if (parts.length >= expected) throw new MimeError(`more than ${expected} MIME parts`);
    partStart = l.next;
  }
  throw new MimeError('no closing MIME boundary');
}

/** Parse a `multipart/signed` message (outer headers already parsed). */
export function splitSigned(buf: Buffer, headers: Headers, ct: ContentType): MultipartSigned {
  const boundary = ct.params.get('boundary');
  if (!boundary || boundary.length > 200) throw new MimeError('multipart/signed without a usable boundary');
  const [signed, signature] = splitMultipart(buf, headers.bodyStart, boundary, 2);
  return { signedPart: canonicalise(buf, ...signed!), signaturePart: buf.subarray(...signature!) };
}

/** Decode a base64 body strictly: only base64 characters and whitespace, correct padding. */
export function decodeBase64(body: Buffer): Buffer {
  const text = body.toString('latin1').replace(/[\s]+/g, '');
  if (text.length === 0 || text.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(text)) {
    throw new MimeError('malformed base64 body');
  }
  return Buffer.from(text, 'base64');
}
