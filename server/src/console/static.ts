/**
 * The console's files (built by scripts/build-console.mjs into server/dist/web/), read once at
 * start and kept in memory; each one's gzip and brotli forms are made the first time a browser
 * asks for them, then kept (brotli at quality 11 costs ~0.3 s for the bundle: a server whose
 * console nobody opens never pays it, and the test suite starts hundreds of servers). `index.html` is revalidated on each
 * load (ETag); the scripts and styles it names carry a content hash in their names and are
 * cached for a year. Every answer carries the Content-Security-Policy: scripts, styles and
 * requests from this origin only, no inline script or style, no framing.
 */
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { extname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, constants, gzipSync } from 'node:zlib';

export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self'", "connect-src 'self'",
  "font-src 'self'", "manifest-src 'self'", "base-uri 'none'", "form-action 'self'", "frame-ancestors 'none'",
].join('; ');

export const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy': CONTENT_SECURITY_POLICY,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cross-origin-opener-policy': 'same-origin',
};

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml', '.png': 'image/png', '.json': 'application/json', '.txt': 'text/plain; charset=utf-8',
};

export interface Asset {
  readonly type: string;
  readonly etag: string;
  /** Hashed names never change content: cached for a year. */
  readonly immutable: boolean;
  readonly identity: Buffer;
  readonly gzip: Buffer;
  readonly br: Buffer;
}

/** One file, its compressed forms made on first use. */
class LoadedAsset implements Asset {
  #gzip: Buffer | undefined;
  #br: Buffer | undefined;

  constructor(readonly type: string, readonly etag: string, readonly immutable: boolean, readonly identity: Buffer) {}

  get gzip(): Buffer {
    return (this.#gzip ??= gzipSync(this.identity, { level: 9 }));
  }

  get br(): Buffer {
    return (this.#br ??= brotliCompressSync(this.identity, {
      params: { [constants.BROTLI_PARAM_QUALITY]: 11, [constants.BROTLI_PARAM_SIZE_HINT]: this.identity.length },
    }));
  }
}

/** Every file under `dir`, by URL path (`/index.html`, `/assets/app-1a2b3c4d.js`); empty when `dir` is absent. */
export async function loadAssets(dir: string): Promise<Map<string, Asset>> {
  const out = new Map<string, Asset>();
  const walk = async (d: string): Promise<void> => {
    let entries;
    try {
      entries = await readdir(d, { withFileTypes: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw err;
    }
    for (const e of entries) {
      const p = join(d, e.name);
      if (e.isDirectory()) await walk(p);
      else if (e.isFile()) {
        const data = await readFile(p);
        out.set(`/${relative(dir, p).split('\\').join('/')}`, new LoadedAsset(
          TYPES[extname(e.name)] ?? 'application/octet-stream',
          `"${createHash('sha256').update(data).digest('base64url').slice(0, 22)}"`,
          /-[0-9A-Za-z_-]{8,}\.[a-z]+$/.test(e.name),
          data,
        ));
      }
    }
  };
  await walk(dir);
  return out;
}

/** The encoding to send for an Accept-Encoding header: brotli, then gzip, else none. */
export function pickEncoding(acceptEncoding: string | undefined): 'br' | 'gzip' | null {
  const accepted = new Map<string, number>();
  for (const part of (acceptEncoding ?? '').split(',')) {
    const [name, ...params] = part.trim().toLowerCase().split(';');
    const q = params.map((p) => /^\s*q=([0-9.]+)\s*$/.exec(p)).find(Boolean);
    if (name) accepted.set(name, q ? Number(q[1]) : 1);
  }
  const ok = (n: string) => (accepted.get(n) ?? accepted.get('*') ?? 0) > 0;
  if (ok('br')) return 'br';
  if (ok('gzip')) return 'gzip';
  return null;
}

/** Where the build puts the console: server/dist/web/ (this file is server/dist/console/static.js). */
export const CONSOLE_DIR = fileURLToPath(new URL('../web/', import.meta.url));
