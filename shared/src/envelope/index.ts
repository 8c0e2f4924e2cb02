// Compression envelopes: decompression with a size limit, and compression for senders.
export { compress, compressSync, decompress } from './codec.js';
export { isZstdFrame, zstdCompress, zstdCompressWithBase, zstdDecompressFrame, zstdDecompressWithBase } from './zstd.js';
export type { EnvelopeCompression } from './codec.js';
export type { DecompressLimits } from './limits.js';
