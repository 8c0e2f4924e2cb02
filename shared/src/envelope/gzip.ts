/** gzip (RUDDER agents' `.gz`) through node:zlib, whose maxOutputLength stops inflating at the limit. */
import { constants as bufferConstants } from 'node:buffer';
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import { corrupt, tooLarge } from './limits.js';

const gunzip = promisify(zlib.gunzip);
const gzip = promisify(zlib.gzip);

export async function gzipDecompress(data: Buffer, maxBytes: number): Promise<Buffer> {
  let out: Buffer;
  try {
    // zlib rejects 0, and only errors once output is *greater* than the limit.
    out = await gunzip(data, { maxOutputLength: Math.max(1, Math.min(maxBytes, bufferConstants.MAX_LENGTH)) });
  } catch (err) {
    if ((err as { code?: unknown }).code === 'ERR_BUFFER_TOO_LARGE') throw tooLarge(maxBytes);
    throw corrupt('corrupt gzip stream', err);
  }
  if (out.length > maxBytes) throw tooLarge(maxBytes);
  return out;
}

function checkLevel(level: number): void {
  if (!Number.isInteger(level) || level < -1 || level > 9) throw new RangeError('gzip level must be an integer in -1..9');
}

export async function gzipCompress(data: Buffer, level = 6): Promise<Buffer> {
  checkLevel(level);
  return gzip(data, { level });
}

export function gzipCompressSync(data: Buffer, level = 6): Buffer {
  checkLevel(level);
  return zlib.gzipSync(data, { level });
}
