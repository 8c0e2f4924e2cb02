/**
 * Node identities for the simulator and the benchmarks: thousands of node ids, each with its own
 * certificate (subject UID=<node id>), as the root requires to pin one per node.
 *
 * An RSA key costs ~100 ms to generate, so a small pool of keys is made in worker threads and each
 * key is certified for many node ids (a certificate costs ~0.5 ms, made from a template by
 * cert-template.ts). Node ids are UUID-shaped and derived from (seed, index), so a cache directory
 * can hand the same fleet back on the next run instead of paying for it again.
 */
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { createReadStream, createWriteStream } from 'node:fs';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { finished } from 'node:stream/promises';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { makeDir } from '@capstan/shared/dir';
import { capstanError } from '@capstan/shared/errors';
import { runInWorkers } from './workers.js';

export interface SimIdentity {
  index: number;
  nodeId: string;
  hostname: string;
  keyPem: string;
  certPem: string;
}

export interface IdentityOptions {
  count: number;
  /** Distinct RSA keys; node i uses key i % keys. Default min(count, 16). */
  keys?: number;
  bits?: number;
  /** Node ids are derived from this; another seed is another fleet. */
  seed?: string;
  /** Keep keys and certificates here between runs; null: no cache. */
  cacheDir?: string | null;
  /** Worker threads for key and certificate generation; default: available cores. */
  workers?: number;
  onProgress?: (done: number, total: number) => void;
}

/**
 * Upper bound on one fleet (bench:fleet's own): the certificate cache is JSON Lines, one node per
 * line (~1.2 KB), streamed both ways, so no string holds the whole fleet.
 */
export const MAX_IDENTITIES = 1_000_000;

/** A UUID-shaped node id (version nibble 4, variant 8..b) derived from the seed and the index. */
export function simNodeId(seed: string, index: number): string {
  const h = createHash('sha256').update(`${seed}\0${index}`).digest('hex');
  const variant = ((parseInt(h[16]!, 16) & 0x3) | 0x8).toString(16);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-${variant}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

export function simHostname(seed: string, index: number): string {
  return `sim${String(index).padStart(6, '0')}.${seed.replace(/[^a-z0-9-]/gi, '-').toLowerCase()}.test`;
}

interface CertLine {
  i: number;
  nodeId: string;
  key: number;
  cert: string;
}

type Job = { kind: 'key'; bits: number } | { kind: 'cert'; nodeId: string; keyPem: string };
const WORKER = new URL('./identity-worker.js', import.meta.url);

async function readJson<T>(path: string): Promise<T | null> {
  try {
    return JSON.parse(await readFile(path, 'utf8')) as T;
  } catch {
    return null; // absent or damaged: the cache is rebuilt
  }
}

async function writeAtomic(path: string, data: string): Promise<void> {
  const tmp = `${path}.${process.pid}.tmp`;
  await writeFile(tmp, data, { mode: 0o600 });
  await rename(tmp, path);
}

/** The certificate lines of a cache file; none when it is absent, and none past a damaged line (the rest is made again). */
async function readCertLines(path: string): Promise<CertLine[]> {
  const out: CertLine[] = [];
  const input = createReadStream(path, { encoding: 'utf8' });
  try {
    for await (const line of createInterface({ input, crlfDelay: Infinity })) {
      if (line.length === 0) continue;
      const c = JSON.parse(line) as CertLine;
      if (!Number.isInteger(c.i) || !Number.isInteger(c.key) || typeof c.nodeId !== 'string' || typeof c.cert !== 'string') break;
      out.push(c);
    }
  } catch {
    // absent, or a line that does not parse: keep what was read
  } finally {
    input.destroy();
  }
  return out;
}

/** Certificate lines written to a temporary file a line at a time, then renamed into place. */
async function writeCertLines(path: string, lines: Iterable<CertLine>): Promise<void> {
  const tmp = `${path}.${process.pid}.tmp`;
  const out = createWriteStream(tmp, { mode: 0o600 });
  for (const c of lines) {
    // once() rejects on 'error': a failed write (a full disk) ends the wait instead of hanging it.
    if (!out.write(`${JSON.stringify(c)}\n`)) await once(out, 'drain');
  }
  out.end();
  await finished(out);
  await rename(tmp, path);
}

/**
 * The first `count` identities of the fleet named by `seed`: from the cache when it holds them,
 * generated (and added to the cache) otherwise.
 */
export async function loadIdentities(opts: IdentityOptions): Promise<SimIdentity[]> {
  const count = opts.count;
  if (!Number.isInteger(count) || count < 1 || count > MAX_IDENTITIES) {
    throw capstanError('ERR_CONFIG', `identity count must be an integer in 1..${MAX_IDENTITIES}`);
  }
  const bits = opts.bits ?? 2048;
  const keyCount = Math.min(count, opts.keys ?? 16);
  const seed = opts.seed ?? 'capstan-sim';
  const workers = opts.workers ?? availableParallelism();
  const cache = opts.cacheDir ?? null;
  const progress = opts.onProgress ?? (() => undefined);
  const total = keyCount + count;
  if (cache) await makeDir(cache, 0o700);

  // Keys: a pool shared by every seed, grown when a run asks for more.
  const keysPath = cache ? join(cache, `keys-rsa${bits}.json`) : null;
  const keys = (keysPath ? await readJson<string[]>(keysPath) : null) ?? [];
  const missingKeys = Math.max(0, keyCount - keys.length);
  keys.push(...(await runInWorkers<Job, string>(WORKER, Array.from({ length: missingKeys }, () => ({ kind: 'key' as const, bits })), workers, (d) => progress(d, total))));
  if (keysPath && missingKeys > 0) await writeAtomic(keysPath, JSON.stringify(keys));
  progress(keyCount, total);

  // Certificates: one per node id, kept with the index of the key they certify.
  const certsPath = cache ? join(cache, `certs-${createHash('sha256').update(seed).digest('hex').slice(0, 16)}-rsa${bits}.jsonl`) : null;
  const cached = certsPath ? await readCertLines(certsPath) : [];
  const usable = new Map<number, CertLine>();
  for (const c of cached) {
    // A line whose key is no longer the pool's (the pool file was replaced) is made again.
    if (c.key < keys.length && c.nodeId === simNodeId(seed, c.i)) usable.set(c.i, c);
  }
  const wanted: { i: number; key: number; nodeId: string }[] = [];
  for (let i = 0; i < count; i++) if (!usable.has(i)) wanted.push({ i, key: i % keyCount, nodeId: simNodeId(seed, i) });
  const made = await runInWorkers<Job, string>(
    WORKER,
    wanted.map((w) => ({ kind: 'cert' as const, nodeId: w.nodeId, keyPem: keys[w.key]! })),
    workers,
    (d) => progress(keyCount + (count - wanted.length) + d, total),
  );
  wanted.forEach((w, k) => usable.set(w.i, { i: w.i, nodeId: w.nodeId, key: w.key, cert: made[k]! }));
  if (certsPath && wanted.length > 0) await writeCertLines(certsPath, [...usable.values()].sort((a, b) => a.i - b.i));
  progress(total, total);

  return Array.from({ length: count }, (_, i) => {
    const c = usable.get(i)!;
    return { index: i, nodeId: c.nodeId, hostname: simHostname(seed, i), keyPem: keys[c.key]!, certPem: c.cert };
  });
}
