/**
 * Compression envelopes around signed run logs and inventories: none, gzip and zip (RUDDER agents)
 * and zstd (Capstan agents). Decompression always enforces a decompressed-size limit, because the
 * input crossed a trust boundary; corrupt or truncated data is ERR_DECOMPRESS, too much output is
 * ERR_DECOMPRESSED_TOO_LARGE.
 */
import { gzipCompress, gzipCompressSync, gzipDecompress } from './gzip.js';
import { checkLimits, corrupt, tooLarge, type DecompressLimits } from './limits.js';
import { zstdCompress, zstdDecompress } from './zstd.js';

/** Same values as the run-log file name suffixes (runlog/name.ts `Compression`). */
export type EnvelopeCompression = 'none' | 'gzip' | 'zip' | 'zstd';

export async function decompress(data: Buffer, c: EnvelopeCompression, limits: DecompressLimits): Promise<Buffer> {
  const maxBytes = checkLimits(limits);
  switch (c) {
    case 'none':
      if (data.length > maxBytes) throw tooLarge(maxBytes);
      return data;
    case 'gzip':
      return gzipDecompress(data, maxBytes);
    case 'zip':
      // Only RUDDER agents' run logs come zipped, and only the server opens them: the agent,
      // which compresses with zstd, does not load the zip reader (yauzl).
      return (await import('./zip.js')).zipDecompress(data, maxBytes);
    case 'zstd':
      return zstdDecompress(data, maxBytes);
    default:
      throw corrupt(`unknown compression ${String(c)}`);
  }
}

/** Compress; `level` is zstd's (default 3) or gzip's (default 6). */
export async function compress(data: Buffer, c: 'none' | 'gzip' | 'zstd', level?: number): Promise<Buffer> {
  switch (c) {
    case 'none':
      return data;
    case 'gzip':
      return gzipCompress(data, level);
    case 'zstd':
      return zstdCompress(data, level);
    default:
      throw new RangeError(`cannot compress with ${String(c)}`);
  }
}

export function compressSync(data: Buffer, c: 'none' | 'gzip' | 'zstd'): Buffer {
  switch (c) {
    case 'none':
      return data;
    case 'gzip':
      return gzipCompressSync(data);
    case 'zstd':
      return zstdCompress(data);
    default:
      throw new RangeError(`cannot compress with ${String(c)}`);
  }
}
