/**
 * Upload batches: how a relay sends its upstream many spooled files in one request instead of
 * one `PUT /<kind>/<file>` each. `POST /batch/<kind>` carries the files framed one after another:
 *
 *   [u16 name length][name, UTF-8][u32 body length][body]   (lengths big-endian), repeated
 *
 * and is answered with one result per file, in the same order, carrying the status and error
 * code that the file's own PUT would have been answered with:
 * `{"data":{"files":[{"file":"…","status":201},{"file":"…","status":400,"error":{"code":"ERR_…","message":"…"}}]}}`.
 * A 2xx for a file means what it means for a PUT: its bytes are durable at the receiver.
 *
 * Per request, HTTP costs the same whatever its size: at a thousand run logs a second, one PUT
 * each was most of the relay's and a good part of the server's CPU. An upstream that does not
 * know batches (an older relay or server) answers 404 or 405, and the sender falls back to PUTs.
 */
import { capstanError, type ErrorCode } from './errors.js';

/** The media type of a batch body. */
export const BATCH_CONTENT_TYPE = 'application/vnd.capstan.batch';

/** `POST <BATCH_PATH>/<kind>`. */
export const BATCH_PATH = '/batch';

/** A file's name is at most this long in a batch (a PUT's path segment has the same bound). */
export const BATCH_MAX_NAME = 1024;

export interface BatchFile {
  name: string;
  /** A view into the batch body: no copy is made. */
  body: Uint8Array;
}

/** One file's answer: what its own PUT would have answered. */
export interface BatchResult {
  file: string;
  status: number;
  error?: { code: string; message: string };
  /**
   * The receiver took the file (2xx) but refused what it holds, for good, and kept it in its own
   * failed/ with this reason (the root keeps a run log with a bad signature there, as after a PUT).
   */
  refused?: { code: string; message: string };
}

export interface BatchAnswer {
  data: { files: BatchResult[] };
}

/** Bytes of a batch holding these files. */
export function batchSize(files: ReadonlyArray<{ name: string; body: Uint8Array }>): number {
  let n = 0;
  for (const f of files) n += 6 + Buffer.byteLength(f.name, 'utf8') + f.body.byteLength;
  return n;
}

/** Frame files into one batch body. Throws RangeError on a name or body too long to frame. */
export function encodeBatch(files: ReadonlyArray<{ name: string; body: Uint8Array }>): Buffer {
  const out = Buffer.allocUnsafe(batchSize(files));
  let at = 0;
  for (const f of files) {
    const nameLength = out.write(f.name, at + 2, 'utf8');
    if (nameLength === 0 || nameLength > BATCH_MAX_NAME) throw new RangeError(`batch file name of ${nameLength} bytes`);
    if (f.body.byteLength > 0xffffffff) throw new RangeError('batch file body over 4 GiB');
    out.writeUInt16BE(nameLength, at);
    at += 2 + nameLength;
    out.writeUInt32BE(f.body.byteLength, at);
    at += 4;
    out.set(f.body, at);
    at += f.body.byteLength;
  }
  return out;
}

function malformed(message: string): Error {
  return capstanError('ERR_BATCH_FORMAT', message);
}

/**
 * The files of a batch body, each body a view into `body` (the caller may hand them to worker
 * threads: keep `body` on a SharedArrayBuffer then, or each view would carry the whole body).
 * Refuses (ERR_BATCH_FORMAT) a body that does not frame exactly, an empty or overlong name, a
 * name that is not UTF-8, and more than `maxFiles` files. Names are not judged here: what a PUT
 * would refuse, the receiver refuses per file.
 */
export function decodeBatch(body: Uint8Array, maxFiles: number): BatchFile[] {
  const buf = Buffer.isBuffer(body) ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  const files: BatchFile[] = [];
  const utf8 = new TextDecoder('utf-8', { fatal: true });
  let at = 0;
  while (at < buf.length) {
    if (files.length >= maxFiles) throw capstanError('ERR_BATCH_TOO_LARGE', `batch holds more than ${maxFiles} files ([http] max_batch_files)`);
    if (buf.length - at < 2) throw malformed(`batch truncated in file ${files.length + 1}'s name length`);
    const nameLength = buf.readUInt16BE(at);
    at += 2;
    if (nameLength === 0 || nameLength > BATCH_MAX_NAME) throw malformed(`file ${files.length + 1} has a name of ${nameLength} bytes (1 to ${BATCH_MAX_NAME})`);
    if (buf.length - at < nameLength + 4) throw malformed(`batch truncated in file ${files.length + 1}'s name or body length`);
    let name: string;
    try {
      name = utf8.decode(buf.subarray(at, at + nameLength));
    } catch {
      throw malformed(`file ${files.length + 1}'s name is not UTF-8`);
    }
    at += nameLength;
    const bodyLength = buf.readUInt32BE(at);
    at += 4;
    if (buf.length - at < bodyLength) throw malformed(`batch truncated in ${JSON.stringify(name.slice(0, 200))}'s body`);
    files.push({ name, body: buf.subarray(at, at + bodyLength) });
    at += bodyLength;
  }
  return files;
}

/** A per-file result from an error, as the PUT would have answered it. */
export function batchError(file: string, status: number, code: ErrorCode | string, message: string): BatchResult {
  return { file, status, error: { code, message } };
}

/**
 * Read a batch answer. Throws (ERR_BATCH_FORMAT) unless it holds exactly one result per sent
 * file, in order, each with an HTTP status.
 */
export function readBatchAnswer(json: unknown, sent: readonly string[]): BatchResult[] {
  const files = (json as BatchAnswer | null)?.data?.files;
  if (!Array.isArray(files) || files.length !== sent.length) throw malformed(`batch answer does not hold ${sent.length} results`);
  return files.map((r: unknown, i): BatchResult => {
    const x = r as Partial<BatchResult> | null;
    if (!x || x.file !== sent[i] || !Number.isInteger(x.status) || (x.status as number) < 100 || (x.status as number) > 599) {
      throw malformed(`batch answer's result ${i + 1} is not the answer for ${sent[i]}`);
    }
    return x as BatchResult;
  });
}
