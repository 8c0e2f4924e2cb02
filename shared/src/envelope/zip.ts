/**
 * zip (older RUDDER agents' `.zip`): the content is the archive's first file entry, as relayd reads
 * it. yauzl parses the central directory and inflates; we bound the output, check the CRC (yauzl
 * does not) and skip directory entries.
 */
import zlib from 'node:zlib';
import yauzl from 'yauzl';
import { corrupt, tooLarge } from './limits.js';

const STORED = 0;
const DEFLATED = 8;

export function zipDecompress(data: Buffer, maxBytes: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    // decodeStrings: false keeps yauzl from rejecting entry names we never use as paths.
    yauzl.fromBuffer(data, { lazyEntries: true, validateEntrySizes: true, decodeStrings: false }, (openErr, zip) => {
      if (openErr || !zip) {
        reject(corrupt('corrupt zip archive', openErr));
        return;
      }
      let settled = false;
      const finish = (err: Error | null, out?: Buffer): void => {
        if (settled) return;
        settled = true;
        try {
          zip.close();
        } catch {
          // already closed by yauzl's autoClose
        }
        if (err) reject(err);
        else resolve(out!);
      };
      zip.on('error', (err: Error) => finish(corrupt('corrupt zip archive', err)));
      zip.on('end', () => finish(corrupt('zip archive holds no file')));
      zip.on('entry', (entry: yauzl.Entry) => {
        const name = entry.fileNameRaw;
        if (name.length > 0 && name[name.length - 1] === 0x2f) {
          zip.readEntry(); // a directory
          return;
        }
        if (entry.isEncrypted()) return finish(corrupt('encrypted zip entries are not supported'));
        if (entry.compressionMethod !== STORED && entry.compressionMethod !== DEFLATED) {
          return finish(corrupt(`zip compression method ${entry.compressionMethod} is not supported`));
        }
        if (entry.uncompressedSize > maxBytes) return finish(tooLarge(maxBytes));
        readEntry(zip, entry, maxBytes, finish);
      });
      zip.readEntry();
    });
  });
}

function readEntry(zip: yauzl.ZipFile, entry: yauzl.Entry, maxBytes: number, finish: (err: Error | null, out?: Buffer) => void): void {
  zip.openReadStream(entry, (err, stream) => {
    if (err || !stream) return finish(corrupt('corrupt zip entry', err));
    const chunks: Buffer[] = [];
    let total = 0;
    stream.on('data', (chunk: Buffer) => {
      total += chunk.length;
      if (total > maxBytes) {
        stream.destroy();
        finish(tooLarge(maxBytes));
        return;
      }
      chunks.push(chunk);
    });
    stream.on('error', (e: Error) => finish(corrupt('corrupt zip entry', e)));
    stream.on('end', () => {
      const out = Buffer.concat(chunks, total);
      if (zlib.crc32(out) >>> 0 !== entry.crc32 >>> 0) return finish(corrupt('zip entry fails its CRC-32 check'));
      finish(null, out);
    });
  });
}
