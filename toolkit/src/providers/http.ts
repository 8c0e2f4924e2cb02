/**
 * A small JSON-over-HTTPS client for the REST drivers: bearer token, pagination left to the
 * caller, and throttling handled here — 429 and 503 (and other 5xx) retried with exponential
 * backoff and jitter, honouring Retry-After (capped), at most `attempts` tries.
 */
import { capstanError } from '@capstan/shared/errors';
import { providerError } from './common.js';

export interface JsonGetOptions {
  token: () => Promise<string>;
  attempts?: number;
  /** Base of the backoff (doubled per retry); tests use a small one. */
  baseDelayMs?: number;
  signal?: AbortSignal;
  where: string;
}

const MAX_RETRY_AFTER_MS = 30_000;
const sleep = (ms: number, signal?: AbortSignal) => new Promise<void>((res, rej) => {
  const t = setTimeout(res, ms);
  signal?.addEventListener('abort', () => {
    clearTimeout(t);
    rej(signal.reason as Error);
  }, { once: true });
});

export async function getJson(url: string, o: JsonGetOptions): Promise<Record<string, unknown>> {
  const attempts = o.attempts ?? 5;
  const base = o.baseDelayMs ?? 200;
  for (let i = 1; ; i++) {
    // A token that cannot be had is the credentials' failure (already ERR_PROVIDER), not the API's: no retry here.
    const bearer = await o.token();
    let res: Response;
    try {
      res = await fetch(url, { headers: { authorization: `Bearer ${bearer}`, accept: 'application/json' }, signal: o.signal });
    } catch (err) {
      if (i >= attempts || o.signal?.aborted) throw providerError(o.where, err);
      await sleep(base * 2 ** (i - 1) * (0.5 + Math.random() / 2), o.signal);
      continue;
    }
    const text = await res.text();
    if (res.ok) {
      try {
        return JSON.parse(text) as Record<string, unknown>;
      } catch {
        throw capstanError('ERR_PROVIDER', `${o.where}: answer is not JSON (HTTP ${res.status})`);
      }
    }
    if ((res.status === 429 || res.status >= 500) && i < attempts) {
      const after = Number(res.headers.get('retry-after'));
      const wait = Number.isFinite(after) && after >= 0 ? Math.min(after * 1000, MAX_RETRY_AFTER_MS) : base * 2 ** (i - 1) * (0.5 + Math.random() / 2);
      await sleep(wait, o.signal);
      continue;
    }
    // The cloud's error body: ARM {"error":{"code","message"}}, Google {"error":{"code","message","status"}}.
    let detail = text.slice(0, 500);
    try {
      const e = (JSON.parse(text) as { error?: { code?: unknown; message?: unknown; status?: unknown } }).error;
      if (e) detail = `${String(e.status ?? e.code)}: ${String(e.message)}`;
    } catch {
      // not JSON: keep the text
    }
    throw capstanError('ERR_PROVIDER', `${o.where}: HTTP ${res.status}: ${detail.replace(/\s+/g, ' ')}`);
  }
}
