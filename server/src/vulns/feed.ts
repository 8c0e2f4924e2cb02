/**
 * Importing an OSV feed: one `.json` advisory, a directory of them (and of `.zip`s), or a `.zip`
 * such as osv.dev's per-ecosystem `all.zip`. Entries are read one at a time (a zip member is
 * inflated as a stream, bounded), so memory holds one entry, not the feed.
 *
 * One bad entry never fails the import: it is skipped with its code (ERR_OSV_INVALID,
 * ERR_OSV_TOO_LARGE, ERR_DECOMPRESS) and counted, and the rest goes on. Only the feed's own
 * bounds stop it (ERR_FEED_TOO_LARGE: total bytes or entries), and what was read before stays.
 *
 * Incremental updates: the caller says what it has (`known(id)` → the stored `modified`), and
 * only entries newer than that reach `onAdvisory`; withdrawn entries do too (so the caller can
 * drop them). An id met twice in one import keeps its newest entry.
 */
import { createReadStream } from 'node:fs';
import { lstat, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import zlib from 'node:zlib';
import yauzl from 'yauzl';
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import { modifiedKey, parseAdvisory, type Advisory } from './osv.js';

export interface FeedLimits {
  /** One advisory's JSON (a file or a zip member, uncompressed). */
  maxEntryBytes: number;
  /** Every entry's bytes together, uncompressed. */
  maxTotalBytes: number;
  /** Entries read (good or bad). */
  maxEntries: number;
  /** Directory levels below the one given. */
  maxDepth: number;
}

/** Real feeds: Debian's all.zip holds ~100,000 entries of a few kB, the largest a few hundred kB. */
export const FEED_LIMITS: FeedLimits = { maxEntryBytes: 4 * 1024 * 1024, maxTotalBytes: 8 * 1024 ** 3, maxEntries: 2_000_000, maxDepth: 4 };

export interface ImportOptions {
  /** The stored `modified` of an id, if any: only newer entries are passed on. */
  known?: (id: string) => string | undefined;
  onAdvisory: (a: Advisory) => void | Promise<void>;
  limits?: Partial<FeedLimits>;
}

export interface ImportReport {
  /** Entries read, good or bad. */
  entries: number;
  bytes: number;
  /** Passed to onAdvisory (withdrawn ones included). */
  accepted: number;
  withdrawn: number;
  /** Not newer than the stored copy, or than the same id earlier in this import. */
  unchanged: number;
  /** Bad entries, by code. */
  skipped: Record<string, number>;
  /** The first bad entries, with where and why (at most ERROR_SAMPLES). */
  errors: Array<{ entry: string; code: string; message: string }>;
  /** Set when a feed limit stopped the import. */
  stopped?: { code: string; message: string };
}

const ERROR_SAMPLES = 100;

class Importer {
  readonly report: ImportReport = { entries: 0, bytes: 0, accepted: 0, withdrawn: 0, unchanged: 0, skipped: {}, errors: [] };
  private seen = new Map<string, string>();
  constructor(readonly limits: FeedLimits, readonly opts: ImportOptions) {}

  skip(entry: string, err: unknown): void {
    const code = isCapstanError(err) ? err.code : 'ERR_INTERNAL';
    this.report.skipped[code] = (this.report.skipped[code] ?? 0) + 1;
    if (this.report.errors.length < ERROR_SAMPLES) this.report.errors.push({ entry, code, message: (err as Error).message });
  }

  /** Count an entry about to be read; throws ERR_FEED_TOO_LARGE when the feed's bounds are reached. */
  admit(size: number): void {
    if (this.report.entries >= this.limits.maxEntries) throw capstanError('ERR_FEED_TOO_LARGE', `feed has more than ${this.limits.maxEntries} entries`);
    if (this.report.bytes + size > this.limits.maxTotalBytes) throw capstanError('ERR_FEED_TOO_LARGE', `feed is larger than ${this.limits.maxTotalBytes} bytes`);
    this.report.entries++;
    this.report.bytes += size;
  }

  async entry(name: string, bytes: Buffer): Promise<void> {
    let a: Advisory;
    try {
      a = parseAdvisory(bytes.toString('utf8'));
    } catch (err) {
      return this.skip(name, err);
    }
    const key = modifiedKey(a.modified)!;
    const stored = this.opts.known?.(a.id);
    const storedKey = stored === undefined ? null : modifiedKey(stored);
    const earlier = this.seen.get(a.id);
    if ((storedKey !== null && key <= storedKey) || (earlier !== undefined && key <= earlier)) {
      this.report.unchanged++;
      return;
    }
    this.seen.set(a.id, key);
    this.report.accepted++;
    if (a.withdrawn !== undefined) this.report.withdrawn++;
    await this.opts.onAdvisory(a);
  }
}

/** Import every advisory at `path` (a .json, a .zip or a directory). */
export async function importOsvFeed(path: string, opts: ImportOptions): Promise<ImportReport> {
  const imp = new Importer({ ...FEED_LIMITS, ...opts.limits }, opts);
  try {
    const st = await lstat(path);
    if (st.isDirectory()) await readDirectory(imp, path, 0);
    else if (st.isFile() && path.endsWith('.zip')) await readZip(imp, path);
    else if (st.isFile() && path.endsWith('.json')) await readJsonFile(imp, path, st.size);
    else throw capstanError('ERR_FEED_SOURCE', `${path} is not a .json file, a .zip or a directory`);
  } catch (err) {
    if (isCapstanError(err) && err.code === 'ERR_FEED_TOO_LARGE') imp.report.stopped = { code: err.code, message: err.message };
    else throw err;
  }
  return imp.report;
}

async function readDirectory(imp: Importer, dir: string, depth: number): Promise<void> {
  // Sorted, so two imports of the same tree meet its entries in the same order.
  const names = (await readdir(dir, { withFileTypes: true })).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const d of names) {
    const p = join(dir, d.name);
    // Symbolic links are not followed: the tree is what was copied, nothing it points at.
    if (d.isDirectory() && depth < imp.limits.maxDepth) await readDirectory(imp, p, depth + 1);
    else if (d.isFile() && d.name.endsWith('.json')) await readJsonFile(imp, p, (await lstat(p)).size);
    else if (d.isFile() && d.name.endsWith('.zip')) await readZip(imp, p);
  }
}

async function readJsonFile(imp: Importer, path: string, size: number): Promise<void> {
  if (size > imp.limits.maxEntryBytes) {
    imp.admit(0);
    return imp.skip(path, capstanError('ERR_OSV_TOO_LARGE', `${size} bytes, over the ${imp.limits.maxEntryBytes}-byte entry limit`));
  }
  imp.admit(size);
  const chunks: Buffer[] = [];
  for await (const c of createReadStream(path)) chunks.push(c as Buffer);
  await imp.entry(path, Buffer.concat(chunks));
}

function openZip(path: string): Promise<yauzl.ZipFile> {
  return new Promise((resolve, reject) => {
    yauzl.open(path, { lazyEntries: true, autoClose: true, validateEntrySizes: true, decodeStrings: true, strictFileNames: false }, (err, zip) => {
      if (err || !zip) reject(capstanError('ERR_DECOMPRESS', `${path}: not a readable zip archive (${err?.message ?? 'no archive'})`));
      else resolve(zip);
    });
  });
}

/** One member's bytes, inflated as a stream and cut off past the entry limit. */
function readMember(zip: yauzl.ZipFile, e: yauzl.Entry, max: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    zip.openReadStream(e, (err, stream) => {
      if (err || !stream) return reject(capstanError('ERR_DECOMPRESS', `corrupt zip entry (${err?.message ?? 'no stream'})`));
      const chunks: Buffer[] = [];
      let total = 0;
      stream.on('data', (c: Buffer) => {
        total += c.length;
        if (total > max) {
          stream.destroy();
          reject(capstanError('ERR_OSV_TOO_LARGE', `over the ${max}-byte entry limit`));
        } else chunks.push(c);
      });
      stream.on('error', (x: Error) => reject(capstanError('ERR_DECOMPRESS', `corrupt zip entry (${x.message})`)));
      stream.on('end', () => {
        const out = Buffer.concat(chunks, total);
        // yauzl does not check the CRC; a damaged member must not pass as a shorter advisory.
        if (zlib.crc32(out) >>> 0 !== e.crc32 >>> 0) reject(capstanError('ERR_DECOMPRESS', 'zip entry fails its CRC-32 check'));
        else resolve(out);
      });
    });
  });
}

async function readZip(imp: Importer, path: string): Promise<void> {
  const zip = await openZip(path);
  try {
    await new Promise<void>((resolve, reject) => {
      zip.on('error', (err: Error) => reject(capstanError('ERR_DECOMPRESS', `${path}: ${err.message}`)));
      zip.on('end', () => resolve());
      zip.on('entry', (e: yauzl.Entry) => {
        const name = `${path}:${e.fileName}`;
        const next = () => zip.readEntry();
        if (e.fileName.endsWith('/') || !e.fileName.endsWith('.json')) return next();
        void (async () => {
          if (e.uncompressedSize > imp.limits.maxEntryBytes) {
            imp.admit(0);
            imp.skip(name, capstanError('ERR_OSV_TOO_LARGE', `${e.uncompressedSize} bytes, over the ${imp.limits.maxEntryBytes}-byte entry limit`));
            return;
          }
          imp.admit(e.uncompressedSize);
          if (e.isEncrypted()) return imp.skip(name, capstanError('ERR_DECOMPRESS', 'encrypted zip entries are not supported'));
          let bytes: Buffer;
          try {
            bytes = await readMember(zip, e, imp.limits.maxEntryBytes);
          } catch (err) {
            return imp.skip(name, err);
          }
          await imp.entry(name, bytes);
        })().then(next, reject);
      });
      zip.readEntry();
    });
  } finally {
    try {
      zip.close();
    } catch {
      // already closed by autoClose at its end
    }
  }
}
