/**
 * The server's public keys, as the relay knows them: fetched from the upstream's
 * `GET /.well-known/jwks.json`, kept on disk so tokens still verify when the upstream is down or
 * the relay restarts without it, and fetched again when a token names a key not known yet (a
 * rotation). Refetches are rate-limited: a flood of tokens with made-up key ids costs the upstream
 * one request per `minRefreshMs`, not one per request.
 */
import { readFile, rename, writeFile } from 'node:fs/promises';
import type { verifyNodeToken } from '@capstan/shared/identity/token';
import { capstanError } from '@capstan/shared/errors';
import { type Logger } from '@capstan/shared/log';

export type JSONWebKeySet = Parameters<typeof verifyNodeToken>[1];

/** Largest JWKS accepted from the upstream (a handful of keys is a few kB). */
export const MAX_JWKS_BYTES = 256 * 1024;
/** Keys accepted in one JWKS: rotation keeps a few, never thousands. */
export const MAX_JWKS_KEYS = 100;

export interface JwksCacheOptions {
  /** GET the upstream's JWKS document (raw bytes); throws when unreachable. */
  fetch: () => Promise<Buffer>;
  file: string;
  minRefreshMs: number;
  /** Refetch in the background when the copy is older than this. */
  maxAgeMs: number;
  log: Logger;
  clock?: () => number;
}

export function parseJwks(raw: Buffer): JSONWebKeySet {
  if (raw.length > MAX_JWKS_BYTES) throw capstanError('ERR_BODY_TOO_LARGE', `JWKS is larger than ${MAX_JWKS_BYTES} bytes`);
  let doc: unknown;
  try {
    doc = JSON.parse(raw.toString('utf8'));
  } catch {
    throw capstanError('ERR_UPSTREAM_REJECTED', 'JWKS is not JSON');
  }
  const keys = (doc as { keys?: unknown }).keys;
  if (!Array.isArray(keys) || keys.length > MAX_JWKS_KEYS || !keys.every((k) => typeof k === 'object' && k !== null && typeof (k as { kid?: unknown }).kid === 'string')) {
    throw capstanError('ERR_UPSTREAM_REJECTED', `JWKS must be {"keys": [...]} with at most ${MAX_JWKS_KEYS} keys, each with a kid`);
  }
  // Public keys only: a document with private parts is a server bug, and is not kept on disk.
  if (keys.some((k) => 'd' in (k as object))) throw capstanError('ERR_UPSTREAM_REJECTED', 'JWKS carries private key material');
  return { keys } as JSONWebKeySet;
}

export class JwksCache {
  private current: JSONWebKeySet = { keys: [] };
  private fetchedAt = 0;
  private lastAttempt = -Infinity;
  private inFlight: Promise<boolean> | null = null;
  private readonly clock: () => number;

  constructor(private readonly o: JwksCacheOptions) {
    this.clock = o.clock ?? Date.now;
  }

  /**
   * The disk copy, and a fetch started in the background: an unreachable upstream neither fails
   * nor delays the start (a token with a kid not known yet waits for a fetch of its own).
   */
  async init(): Promise<void> {
    try {
      this.current = parseJwks(await readFile(this.o.file));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.o.log.warn({ err, file: this.o.file }, 'cached JWKS ignored');
    }
    void this.refresh(true);
  }

  get keys(): JSONWebKeySet {
    if (this.stale) void this.refresh();
    return this.current;
  }

  /** Older than maxAgeMs: a deleted key may still be in it. */
  get stale(): boolean {
    return this.clock() - this.fetchedAt > this.o.maxAgeMs;
  }

  has(kid: string | undefined): boolean {
    return kid !== undefined && this.current.keys.some((k) => k.kid === kid);
  }

  /**
   * The upstream lists the key ids it publishes (the synced nodes list): keys it no longer lists
   * (deleted by an admin) leave this copy now, instead of when the copy ages out, so their tokens
   * get ERR_TOKEN_UNKNOWN_KEY and renew; a listed key not held yet is fetched.
   */
  async retain(kids: readonly string[]): Promise<void> {
    const listed = new Set(kids);
    const kept = this.current.keys.filter((k) => listed.has(k.kid as string));
    if (kept.length !== this.current.keys.length) {
      const dropped = this.current.keys.filter((k) => !listed.has(k.kid as string)).map((k) => k.kid);
      this.current = { keys: kept } as JSONWebKeySet;
      this.o.log.info({ kids: dropped }, 'signing keys the upstream no longer publishes dropped from the JWKS copy');
      try {
        const tmp = `${this.o.file}.tmp`;
        await writeFile(tmp, JSON.stringify(this.current), { mode: 0o644 });
        await rename(tmp, this.o.file);
      } catch (err) {
        this.o.log.warn({ err, file: this.o.file }, 'cannot write the JWKS copy');
      }
    }
    // Forced: the list changed (one fetch per change), unlike unknown kids in tokens, which anyone can make up.
    if (kids.some((kid) => !this.has(kid))) await this.refresh(true);
  }

  /** Fetch now unless one was tried less than minRefreshMs ago; true when new keys were stored. */
  refresh(force = false): Promise<boolean> {
    if (this.inFlight) return this.inFlight;
    if (!force && this.clock() - this.lastAttempt < this.o.minRefreshMs) return Promise.resolve(false);
    this.lastAttempt = this.clock();
    this.inFlight = (async () => {
      try {
        const raw = await this.o.fetch();
        const jwks = parseJwks(raw);
        this.current = jwks;
        this.fetchedAt = this.clock();
        const tmp = `${this.o.file}.tmp`;
        await writeFile(tmp, JSON.stringify(jwks), { mode: 0o644 });
        await rename(tmp, this.o.file);
        return true;
      } catch (err) {
        this.o.log.warn({ err }, 'JWKS not refreshed from upstream, keeping the cached keys');
        return false;
      } finally {
        this.inFlight = null;
      }
    })();
    return this.inFlight;
  }
}
