/**
 * Where a configured feed's bytes come from: a URL fetched with undici into the server's data
 * directory (bounded in size and time), or a file or directory an admin copied in place (a site
 * without Internet access). Either way the result is a local path for the importers, the feed's
 * own date (the answer's Last-Modified, or the file's modification time), and, when a checksum
 * source is configured, the SHA-256 checked against its line for the file (ERR_FEED_CHECKSUM).
 */
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, readFile, rename, rm, stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Transform } from 'node:stream';
// undici is loaded when a feed is first fetched: most servers never fetch one.
import type { request as UndiciRequest } from 'undici';
import { capstanError, isCapstanError } from '@capstan/shared/errors';

export interface FetchLimits {
  /** Bytes one download may have (compressed as sent). */
  maxBytes: number;
  /** A request taking longer (headers, then the body) fails with ERR_FEED_FETCH. */
  timeoutMs: number;
  /** A checksum file's size. */
  maxChecksumBytes: number;
}

export interface LocalFeed {
  path: string;
  /** The server answered 304: the copy kept from the last download is current (not imported again). */
  notModified?: true;
  /** The answer's ETag, sent back as If-None-Match next time. */
  etag?: string;
  /** ISO time: Last-Modified of the answer, or the file's modification time; the fetch time when neither. */
  feedDate: string;
  sha256: string | null;
}

const isUrl = (s: string) => /^https?:\/\//i.test(s);

/** The file name a URL's bytes are kept under, keeping its extension (.zip, .json, .csv, .gz). */
function localName(name: string, source: string): string {
  const tail = basename(new URL(source).pathname) || 'feed';
  const ext = /(\.csv\.gz|\.json\.gz|\.zip|\.json|\.csv|\.gz)$/i.exec(tail)?.[1]?.toLowerCase() ?? '.json';
  return `${name.replace(/[^A-Za-z0-9._-]/g, '_')}${ext}`;
}

/** What the last download answered, for a conditional request (the copy must still be there). */
export interface Validators {
  etag?: string | null;
  lastModified?: string | null;
}

async function download(url: string, to: string, limits: FetchLimits, since: Validators = {}): Promise<{ lastModified: string | null; etag: string | null; notModified?: true }> {
  let res: Awaited<ReturnType<typeof UndiciRequest>>;
  const { request } = await import('undici');
  const headers: Record<string, string> = {};
  if (since.etag) headers['if-none-match'] = since.etag;
  if (since.lastModified) headers['if-modified-since'] = new Date(since.lastModified).toUTCString();
  try {
    res = await request(url, { method: 'GET', headers, headersTimeout: limits.timeoutMs, bodyTimeout: limits.timeoutMs, maxRedirections: 0 } as Parameters<typeof UndiciRequest>[1]);
  } catch (err) {
    throw capstanError('ERR_FEED_FETCH', `${url}: ${(err as Error).message}`);
  }
  if (res.statusCode === 304 && Object.keys(headers).length > 0) {
    res.body.resume();
    return { lastModified: since.lastModified ?? null, etag: since.etag ?? null, notModified: true };
  }
  if (res.statusCode !== 200) {
    res.body.resume();
    throw capstanError('ERR_FEED_FETCH', `${url} answered HTTP ${res.statusCode}`);
  }
  const length = Number(res.headers['content-length']);
  if (Number.isFinite(length) && length > limits.maxBytes) {
    res.body.destroy();
    throw capstanError('ERR_FEED_FETCH', `${url} is ${length} bytes, over the ${limits.maxBytes}-byte download limit`);
  }
  let total = 0;
  const bound = new Transform({
    transform(chunk: Buffer, _enc, done) {
      total += chunk.length;
      if (total > limits.maxBytes) done(capstanError('ERR_FEED_FETCH', `${url} is over the ${limits.maxBytes}-byte download limit`));
      else done(null, chunk);
    },
  });
  const part = `${to}.part`;
  try {
    await pipeline(res.body, bound, createWriteStream(part, { mode: 0o640 }));
    await rename(part, to);
  } catch (err) {
    await rm(part, { force: true });
    throw isCapstanError(err) ? err : capstanError('ERR_FEED_FETCH', `${url}: ${(err as Error).message}`);
  }
  const lm = res.headers['last-modified'];
  const t = typeof lm === 'string' ? Date.parse(lm) : NaN;
  const etag = res.headers.etag;
  return { lastModified: Number.isFinite(t) ? new Date(t).toISOString() : null, etag: typeof etag === 'string' && etag.length <= 1024 ? etag : null };
}

async function sha256File(path: string): Promise<string> {
  const h = createHash('sha256');
  await pipeline(createReadStream(path), h);
  return h.digest('hex');
}

/** A checksum file's line for `file` (sha256sum's `<hex>  <name>`), or its only hash. */
export function checksumFor(text: string, file: string): string | null {
  const lines = text.split('\n').map((l) => l.trim()).filter((l) => l !== '');
  const parsed = lines.map((l) => /^([0-9a-fA-F]{64})(?:\s+\*?(.+))?$/.exec(l)).filter((m): m is RegExpExecArray => m !== null);
  const named = parsed.find((m) => m[2] !== undefined && basename(m[2]) === file);
  if (named) return named[1]!.toLowerCase();
  return parsed.length === 1 && parsed[0]![2] === undefined ? parsed[0]![1]!.toLowerCase() : null;
}

async function readChecksum(source: string, dir: string, limits: FetchLimits): Promise<string> {
  if (isUrl(source)) {
    const to = join(dir, `checksum-${createHash('sha256').update(source).digest('hex').slice(0, 16)}`);
    await download(source, to, { ...limits, maxBytes: limits.maxChecksumBytes });
    return readFile(to, 'utf8');
  }
  const st = await stat(source).catch(() => null);
  if (!st?.isFile()) throw capstanError('ERR_FEED_SOURCE', `checksum file ${source} is not a readable file`);
  if (st.size > limits.maxChecksumBytes) throw capstanError('ERR_FEED_TOO_LARGE', `checksum file ${source} is over ${limits.maxChecksumBytes} bytes`);
  return readFile(source, 'utf8');
}

/**
 * Bring one feed's source to a local path. `dir` is where downloads are kept (one file per feed,
 * replaced whole on success). A checksum source, when given, must have a line for the file.
 */
export async function localFeed(name: string, source: string, opts: { dir: string; checksum?: string; limits: FetchLimits; now: Date; since?: Validators }): Promise<LocalFeed> {
  let path = source;
  let feedDate: string;
  if (isUrl(source)) {
    await mkdir(opts.dir, { recursive: true, mode: 0o750 });
    path = join(opts.dir, localName(name, source));
    // Asked conditionally only when the last download's copy is still there to stand for it.
    const kept = opts.since && (await stat(path).catch(() => null))?.isFile() ? opts.since : {};
    const got = await download(source, path, opts.limits, kept);
    feedDate = got.lastModified ?? opts.now.toISOString();
    if (got.notModified) return { path, feedDate, sha256: null, notModified: true, ...(got.etag && { etag: got.etag }) };
    if (got.etag) {
      const checked = await checkedFeed(name, source, path, feedDate, opts);
      return { ...checked, etag: got.etag };
    }
  } else {
    const st = await stat(source).catch(() => null);
    if (!st) throw capstanError('ERR_FEED_SOURCE', `feed ${name}: ${source} does not exist`);
    feedDate = st.mtime.toISOString();
  }
  return checkedFeed(name, source, path, feedDate, opts);
}

async function checkedFeed(name: string, source: string, path: string, feedDate: string, opts: { dir: string; checksum?: string; limits: FetchLimits }): Promise<LocalFeed> {
  let sha256: string | null = null;
  if (opts.checksum) {
    const st = await stat(path);
    if (!st.isFile()) throw capstanError('ERR_FEED_SOURCE', `feed ${name}: a checksum is configured, so ${source} must be one file`);
    const file = isUrl(source) ? basename(new URL(source).pathname) : basename(source);
    const want = checksumFor(await readChecksum(opts.checksum, opts.dir, opts.limits), file);
    if (!want) throw capstanError('ERR_FEED_CHECKSUM', `feed ${name}: the checksum file has no SHA-256 line for ${file}`);
    sha256 = await sha256File(path);
    if (sha256 !== want) throw capstanError('ERR_FEED_CHECKSUM', `feed ${name}: SHA-256 ${sha256} is not the checksum file's ${want}`);
  }
  return { path, feedDate, sha256 };
}
