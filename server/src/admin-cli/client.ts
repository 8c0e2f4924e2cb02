/**
 * The remote CLI's only way to the server: the admin API over HTTP(S) with undici. Never the
 * store, so `capstan` works from any machine that can reach the API. Every failure becomes an
 * ApiFailure carrying what the exit code is chosen from: the API's coded error and status, or
 * `unreachable` when no answer came (connection refused, DNS, TLS, timeout).
 */
import { Agent, request, type Dispatcher } from 'undici';

export interface ClientOptions {
  url: string;
  token: string | undefined;
  /** PEM of a private CA the server's certificate chains to (`--ca-file`). */
  ca?: string;
  timeoutMs: number;
}

export type QueryValue = string | number | boolean | undefined | ReadonlyArray<string>;
export type QueryParams = Record<string, QueryValue>;

export class ApiFailure extends Error {
  constructor(
    readonly code: string,
    message: string,
    /** HTTP status; 0 when the server could not be reached. */
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

export function queryString(q: QueryParams = {}): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) {
    if (v === undefined) continue;
    for (const one of Array.isArray(v) ? v : [v]) p.append(k, String(one));
  }
  const s = p.toString();
  return s ? `?${s}` : '';
}

export class ApiClient {
  private readonly base: string;
  private readonly dispatcher: Dispatcher;

  constructor(private readonly opts: ClientOptions) {
    this.base = opts.url.replace(/\/+$/, '');
    this.dispatcher = new Agent({
      connect: { ...(opts.ca !== undefined && { ca: opts.ca }), timeout: opts.timeoutMs },
      headersTimeout: opts.timeoutMs,
      bodyTimeout: opts.timeoutMs,
    });
  }

  async call<T = any>(method: string, path: string, opts: { query?: QueryParams; body?: unknown; accept?: string } = {}): Promise<ApiAnswer<T>> {
    const headers: Record<string, string> = { accept: opts.accept ?? 'application/json' };
    if (this.opts.token) headers.authorization = `Bearer ${this.opts.token}`;
    if (opts.body !== undefined) headers['content-type'] = 'application/json';
    let res: Dispatcher.ResponseData;
    try {
      res = await request(`${this.base}${path}${queryString(opts.query)}`, {
        method: method as Dispatcher.HttpMethod,
        headers,
        body: opts.body === undefined ? null : JSON.stringify(opts.body),
        dispatcher: this.dispatcher,
      });
    } catch (err) {
      const e = err as Error & { code?: string };
      throw new ApiFailure('ERR_UNREACHABLE', `cannot reach ${this.base}: ${e.code ? `${e.code} ` : ''}${e.message}`, 0);
    }
    let text: string;
    try {
      text = await res.body.text();
    } catch (err) {
      throw new ApiFailure('ERR_UNREACHABLE', `the answer from ${this.base} was cut off: ${(err as Error).message}`, 0);
    }
    let body: any = null;
    if (text && /json/.test(String(res.headers['content-type'] ?? ''))) {
      try {
        body = JSON.parse(text);
      } catch {
        throw new ApiFailure('ERR_BAD_ANSWER', `${method} ${path}: the server answered ${res.statusCode} with invalid JSON`, res.statusCode);
      }
    }
    if (res.statusCode >= 400) {
      const e = body?.error;
      if (e && typeof e.code === 'string') {
        const { code, message, ...details } = e as Record<string, unknown>;
        throw new ApiFailure(code as string, String(message ?? ''), res.statusCode, details);
      }
      throw new ApiFailure('ERR_BAD_ANSWER', `${method} ${path}: ${text.slice(0, 200) || 'no body'}`, res.statusCode);
    }
    return { status: res.statusCode, body, text };
  }

  get<T = any>(path: string, query?: QueryParams) {
    return this.call<T>('GET', path, { ...(query && { query }) });
  }

  /** Every page of a list (`page`, `per_page`), up to `limit` rows. */
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

  close(): Promise<void> {
    return this.dispatcher.close();
  }
}
