/** The decompressed-size limit every envelope enforces, and the two errors they raise. */
import { capstanError, type CapstanError } from '../errors.js';

export interface DecompressLimits {
  /** Largest decompressed size accepted, in bytes; one byte more is refused. */
  maxBytes: number;
}

export function checkLimits(limits: DecompressLimits): number {
  const max = limits?.maxBytes;
  if (!Number.isSafeInteger(max) || max < 0) throw new RangeError('limits.maxBytes must be a non-negative integer');
  return max;
}

export function tooLarge(maxBytes: number): CapstanError {
  return capstanError('ERR_DECOMPRESSED_TOO_LARGE', `decompressed data exceeds ${maxBytes} bytes`, { details: { maxBytes } });
}

export function corrupt(what: string, cause?: unknown): CapstanError {
  const reason = cause instanceof Error ? `: ${cause.message}` : '';
  return capstanError('ERR_DECOMPRESS', `${what}${reason}`, cause === undefined ? {} : { cause });
}
