/**
 * zstd (Capstan agents' `.zst`) through zstd-napi's low-level streaming API.
 *
 * The library's DecompressStream pushes everything one input chunk yields before anyone can stop
 * it, so a small bomb would expand fully in memory. Driving ZSTD_decompressStream ourselves caps
 * the output at maxBytes + 1 and stops the moment it overflows.
 */
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import zstd from 'zstd-napi/binding.js';
import { Compressor } from 'zstd-napi';
import { corrupt, tooLarge } from './limits.js';

const OUT_CHUNK = zstd.dStreamOutSize(); // 128 KiB, the size zstd recommends
// Give the event loop a turn this often: a 64 MiB log takes tens of milliseconds to expand.
const YIELD_BYTES = 8 * 1024 * 1024;
const YIELD_CALLS = 4096;
const INITIAL_MAX = 16 * 1024 * 1024;
const MAX_CALL_OUTPUT = 8 * 1024 * 1024;

/**
 * The window a frame may ask for: enough for any frame a normal compressor makes of data this size
 * (2^23 is zstd's window up to level 19), never more than 2^27, so a hostile header cannot make
 * the decoder allocate far beyond the limit.
 */
function windowLogMax(maxBytes: number): number {
  const need = Math.ceil(Math.log2(Math.max(maxBytes, 1)));
  return Math.min(27, Math.max(23, need));
}

/** Largest frame expanded in one call (no turn given to the event loop meanwhile). */
const ONE_SHOT_MAX = 4 * 1024 * 1024;
let oneShot: InstanceType<typeof zstd.DCtx> | undefined;

export async function zstdDecompress(data: Buffer, maxBytes: number): Promise<Buffer> {
  if (data.length === 0) throw corrupt('empty zstd stream');
  const declared = safe(() => zstd.getFrameContentSize(data));
  if (declared !== null && declared !== undefined && declared > maxBytes) throw tooLarge(maxBytes);

  // A frame that says how big it is, within the limit: one call into a buffer of exactly that
  // size (measured: ~20 µs for a 27 KB run log, against ~80 µs through the streaming loop with a
  // new context and 128 KiB of output chunks). The decoder refuses a frame whose content does
  // not match its declared size; then, or for several frames, the streaming loop decides.
  if (typeof declared === 'number' && declared <= Math.min(maxBytes, ONE_SHOT_MAX)) {
    oneShot ??= new zstd.DCtx();
    const out = Buffer.allocUnsafe(declared);
    try {
      if (oneShot.decompress(out, data) === declared) return out;
    } catch {
      // not one well-formed frame of that size: the streaming loop says why
    }
  }
  const dctx = new zstd.DCtx();
  dctx.setParameter(zstd.DParameter.windowLogMax, windowLogMax(maxBytes));
  const hardCap = maxBytes + 1; // one byte of room past the limit tells "exactly at" from "over"
  // Output goes into chunks of growing size (no copying while growing, so a bomb costs at most
  // maxBytes + 1 before it is refused); the first is sized from the declared content size, capped
  // because headers can lie.
  const chunks: Buffer[] = [];
  let chunk = Buffer.allocUnsafe(Math.min(hardCap, Math.max(OUT_CHUNK, Math.min(declared ?? data.length * 4, INITIAL_MAX))));
  let used = 0;
  let total = 0;
  let src = data;
  let ret = 0;
  let sinceYield = 0;
  for (let calls = 1; ; calls++) {
    if (used === chunk.length) {
      chunks.push(chunk);
      chunk = Buffer.allocUnsafe(Math.min(hardCap - total, Math.max(OUT_CHUNK, total)));
      used = 0;
    }
    const room = Math.min(chunk.length - used, MAX_CALL_OUTPUT);
    let hint: number;
    let produced: number;
    let consumed: number;
    try {
      [hint, produced, consumed] = dctx.decompressStream(chunk.subarray(used, used + room), src);
    } catch (err) {
      throw corrupt('corrupt zstd stream', err);
    }
    // 0 means a frame just ended. A call that does nothing after that answers with the header size
    // of a next frame, which must not read as "truncated".
    if (produced > 0 || consumed > 0) ret = hint;
    used += produced;
    total += produced;
    if (total > maxBytes) throw tooLarge(maxBytes);
    src = src.subarray(consumed);
    // All input consumed and the output not filled: the decoder has flushed everything it can.
    if (src.length === 0 && (produced < room || ret === 0)) break;
    if (produced === 0 && consumed === 0) throw corrupt('zstd decoder made no progress');
    sinceYield += produced;
    if (sinceYield >= YIELD_BYTES || calls % YIELD_CALLS === 0) {
      sinceYield = 0;
      await yieldToLoop();
    }
  }
  if (ret !== 0) throw corrupt('truncated zstd stream');
  if (chunks.length === 0 && chunk.length - used <= 64 * 1024) return chunk.subarray(0, used);
  chunks.push(chunk.subarray(0, used));
  return Buffer.concat(chunks, total);
}

/**
 * One frame that declares its content size, expanded synchronously (for small values the server
 * stores itself, such as a run's packed outcomes): refused when corrupt, without a size, or larger
 * than `maxBytes`.
 */
export function zstdDecompressFrame(frame: Buffer, maxBytes: number): Buffer {
  return sizedFrame(frame, maxBytes, (out) => (oneShot ??= new zstd.DCtx()).decompress(out, frame));
}

/**
 * A frame that declares its content size, expanded by `expand` into a buffer of exactly that
 * size: refused (ERR_DECOMPRESS) when empty, without a size, corrupt or short, and
 * (ERR_DECOMPRESSED_TOO_LARGE) when it declares more than `maxBytes`.
 */
function sizedFrame(frame: Buffer, maxBytes: number, expand: (out: Buffer) => number): Buffer {
  if (frame.length === 0) throw corrupt('empty zstd stream');
  const size = safe(() => zstd.getFrameContentSize(frame));
  if (size === null || size === undefined) throw corrupt('zstd frame without a content size');
  if (size > maxBytes) throw tooLarge(maxBytes);
  const out = Buffer.allocUnsafe(size);
  let n: number;
  try {
    n = expand(out);
  } catch (err) {
    throw corrupt(`corrupt zstd frame: ${(err as Error).message}`);
  }
  if (n !== size) throw corrupt('zstd frame shorter than its declared size');
  return out;
}

/** Whether these bytes start like a zstd frame (its magic number). */
export function isZstdFrame(data: Buffer): boolean {
  return data.length >= 4 && data.readUInt32LE(0) === 0xfd2fb528;
}

function safe<T>(f: () => T): T | undefined {
  try {
    return f();
  } catch {
    return undefined; // not a frame header; the decoder will say why
  }
}

let compressor: Compressor | undefined;

/** One frame with the content size and a checksum (so corruption is detected on the way back). */
export function zstdCompress(data: Buffer, level = 3): Buffer {
  if (!Number.isInteger(level) || level < zstd.minCLevel() || level > zstd.maxCLevel()) {
    throw new RangeError(`zstd level must be an integer in ${zstd.minCLevel()}..${zstd.maxCLevel()}`);
  }
  compressor ??= new Compressor();
  compressor.setParameters({ compressionLevel: level, checksumFlag: true });
  return compressor.compress(data);
}

/**
 * zstd against a base: `data` compressed with `base` as a raw-content dictionary, so whatever it
 * shares with the base costs a few bytes. The server stores each run log of a node-day this way
 * against the day's first run (most runs repeat it but for times and a few outcomes): ~27 KB
 * compress to ~0.4–0.9 KB instead of ~3.8 KB alone. A byte is put before the base so it is never
 * taken for a trained dictionary (those start with a magic number).
 */
const BASE_PREFIX = Buffer.from([0x0a]);
let dictCCtx: InstanceType<typeof zstd.CCtx> | undefined;
let dictDCtx: InstanceType<typeof zstd.DCtx> | undefined;

export function zstdCompressWithBase(data: Buffer, base: Buffer, level = 3): Buffer {
  dictCCtx ??= new zstd.CCtx();
  const dst = Buffer.allocUnsafe(zstd.compressBound(data.length));
  const n = dictCCtx.compressUsingDict(dst, data, Buffer.concat([BASE_PREFIX, base]), level);
  return Buffer.from(dst.subarray(0, n));
}

/** The inverse of zstdCompressWithBase, refusing frames that would expand beyond `maxBytes`. */
export function zstdDecompressWithBase(frame: Buffer, base: Buffer, maxBytes: number): Buffer {
  return sizedFrame(frame, maxBytes, (out) => (dictDCtx ??= new zstd.DCtx()).decompressUsingDict(out, frame, Buffer.concat([BASE_PREFIX, base])));
}
