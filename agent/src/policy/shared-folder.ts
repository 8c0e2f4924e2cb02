/**
 * Download a file of the server's shared folder through the relay (RUDDER's relay API path).
 *
 * The expected sha256 (from the signed directive) goes along as `?hash=`, so a relay that caches
 * the folder can answer from its cache without asking its upstream. A relay whose download queue
 * is full answers 503 (or 429) with Retry-After; a relay that cannot reach its upstream answers
 * 502/504; an overloaded relay may also refuse or drop the connection. Those are retried a few
 * times with exponential backoff and full jitter (each agent waits a random share of the delay),
 * so a new artifact assigned to thousands of nodes spreads their retries out instead of
 * synchronising them.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { httpRequest } from '../queue/http.js';
import type { NodeAuth } from './fetch.js';
import { capstanError } from '@capstan/shared/errors';
import { userAgent } from '@capstan/shared/protocol';

/** Largest shared-folder file the agent downloads into memory before checking its hash. */
export const MAX_SHARED_FILE = 512 * 1024 * 1024;

const RETRY_STATUS = new Set([429, 502, 503, 504]);

export interface FetchSharedOptions {
  /** The sha256 the signed directive names (lets a caching relay skip its upstream). */
  sha256?: string;
  /** Tries in all (first one included). */
  attempts?: number;
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** For tests: how to wait, and the random source of the jitter. */
  wait?: (ms: number) => Promise<unknown>;
  random?: () => number;
}

/** How long to wait before try `attempt` (1-based retries): Retry-After if given, else exponential; full jitter, capped. */
export function retryDelay(attempt: number, retryAfter: string | string[] | undefined, o: { baseDelayMs: number; maxDelayMs: number; random: () => number }): number {
  const ra = typeof retryAfter === 'string' && /^\d{1,6}$/.test(retryAfter) ? Number(retryAfter) * 1000 : null;
  const ceiling = Math.min(o.maxDelayMs, ra ?? o.baseDelayMs * 2 ** (attempt - 1));
  // Never less than half the ceiling (the relay asked for a pause), never the same for two agents.
  return Math.round(ceiling / 2 + o.random() * (ceiling / 2));
}

export async function fetchShared(relay: string, path: string, timeoutMs: number, auth?: NodeAuth, opts: FetchSharedOptions = {}): Promise<Buffer> {
  const query = opts.sha256 ? `?hash=${opts.sha256}` : '';
  const url = `${relay}/rudder/relay-api/1/shared-folder/${path.split('/').map(encodeURIComponent).join('/')}${query}`;
  const attempts = opts.attempts ?? 5;
  const delays = { baseDelayMs: opts.baseDelayMs ?? 1000, maxDelayMs: opts.maxDelayMs ?? 15_000, random: opts.random ?? Math.random };
  const wait = opts.wait ?? sleep;
  const get = (token: string | null) =>
    httpRequest({
      method: 'GET',
      url,
      headers: { 'user-agent': userAgent('capstan-agent'), ...(token ? { authorization: `Bearer ${token}` } : {}) },
      timeoutMs,
      maxResponseBytes: MAX_SHARED_FILE,
    });
  let res;
  for (let attempt = 1; ; attempt++) {
    try {
      res = await get((await auth?.current()) ?? null);
      if (res.status === 401 && auth) {
        const fresh = await auth.renew().catch(() => null);
        if (fresh) res = await get(fresh);
      }
    } catch (err) {
      if ((err as { code?: string }).code === 'ERR_BODY_TOO_LARGE') {
        throw capstanError('ERR_BODY_TOO_LARGE', `shared-folder ${path} is larger than ${MAX_SHARED_FILE} bytes`);
      }
      // Refused, reset or timed out: the relay may be swamped; back off like for a 503.
      if (attempt >= attempts) throw capstanError('ERR_UPSTREAM', `relay unreachable: ${(err as Error).message}`, { cause: err });
      await wait(retryDelay(attempt, undefined, delays));
      continue;
    }
    if (!RETRY_STATUS.has(res.status) || attempt >= attempts) break;
    await wait(retryDelay(attempt, res.headers['retry-after'], delays));
  }
  if (res.status !== 200) {
    throw capstanError(res.status === 404 ? 'ERR_NOT_FOUND' : 'ERR_UPSTREAM', `shared-folder ${path}: relay answered ${res.status}`);
  }
  return res.body;
}
