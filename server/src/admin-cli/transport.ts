/**
 * How a verb reaches the admin API, whichever program runs it: `capstan` over HTTP(S) with undici
 * (client.ts), `capstan-server`'s aliases in process with fastify's inject (cli/in-process.ts).
 * Both answer alike, through `answerOf`: the same body parsing, the same ApiFailure for a coded
 * error, so a verb prints the same lines and exits with the same code either way.
 */

export type QueryValue = string | number | boolean | undefined | ReadonlyArray<string>;
export type QueryParams = Record<string, QueryValue>;

export class ApiFailure extends Error {
  constructor(
    readonly code: string,
    message: string,
    /** HTTP status; 0 when the server could not be reached (or, in process, opened). */
    readonly status: number,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

export interface ApiAnswer<T = any> {
  status: number;
  body: T;
  /** The raw text (CSV answers). */
  text: string;
}

export interface CallOptions {
  query?: QueryParams;
  body?: unknown;
  accept?: string;
}

/** What every verb is given: one admin API, its calls and their answers. */
export interface ApiTransport {
  call<T = any>(method: string, path: string, opts?: CallOptions): Promise<ApiAnswer<T>>;
  get<T = any>(path: string, query?: QueryParams): Promise<ApiAnswer<T>>;
  /** Every page of a list (`page`, `per_page`), up to `limit` rows. */
  all<T = any>(path: string, query?: QueryParams, limit?: number): Promise<{ data: T[]; total: number }>;
  close(): Promise<void>;
}

export function queryString(q: QueryParams = {}): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) {
    if (v === undefined) continue;
    for (const one of Array.isArray(v) ? v : [v]) p.append(k, String(one));
  }
  const s = p.toString();
  return s ? `?${s}` : '';
}

/** The request headers of a call: JSON unless asked otherwise, the bearer token. */
export function callHeaders(token: string | undefined, opts: CallOptions): Record<string, string> {
  const headers: Record<string, string> = { accept: opts.accept ?? 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  if (opts.body !== undefined) headers['content-type'] = 'application/json';
  return headers;
}

/** An answer as a verb sees it; a 4xx or 5xx becomes an ApiFailure with the API's code. */
export function answerOf<T>(method: string, path: string, status: number, contentType: unknown, text: string): ApiAnswer<T> {
  let body: any = null;
  if (text && /json/.test(String(contentType ?? ''))) {
    try {
      body = JSON.parse(text);
    } catch {
      throw new ApiFailure('ERR_BAD_ANSWER', `${method} ${path}: the server answered ${status} with invalid JSON`, status);
    }
  }
  if (status >= 400) {
    const e = body?.error;
    if (e && typeof e.code === 'string') {
      const { code, message, ...details } = e as Record<string, unknown>;
      throw new ApiFailure(code as string, String(message ?? ''), status, details);
    }
    throw new ApiFailure('ERR_BAD_ANSWER', `${method} ${path}: ${text.slice(0, 200) || 'no body'}`, status);
  }
  return { status, body, text };
}

/** `get` and `all` on top of a transport's one `call`. */
export abstract class BaseTransport implements ApiTransport {
  abstract call<T = any>(method: string, path: string, opts?: CallOptions): Promise<ApiAnswer<T>>;
  abstract close(): Promise<void>;

  get<T = any>(path: string, query?: QueryParams) {
    return this.call<T>('GET', path, { ...(query && { query }) });
  }

  async all<T = any>(path: string, query: QueryParams = {}, limit = Infinity): Promise<{ data: T[]; total: number }> {
    const rows: T[] = [];
    let total = 0;
    for (let page = 1; rows.length < limit; page++) {
      const per_page = Math.min(1000, limit - rows.length);
      const ans = (await this.get(path, { ...query, page, per_page })).body as { data: T[]; total: number };
      total = ans.total;
      rows.push(...ans.data);
      if (ans.data.length < per_page || rows.length >= total) break;
    }
    return { data: rows, total };
  }
}
