/**
 * The remote CLI's way to the server: the admin API over HTTP(S) with undici. Never the store,
 * so `capstan` works from any machine that can reach the API. Every failure becomes an
 * ApiFailure carrying what the exit code is chosen from: the API's coded error and status, or
 * `unreachable` when no answer came (connection refused, DNS, TLS, timeout).
 */
import { Agent, request, type Dispatcher } from 'undici';
import { answerOf, ApiFailure, BaseTransport, callHeaders, queryString, type ApiAnswer, type CallOptions } from './transport.js';

export { ApiFailure, queryString, type ApiAnswer, type ApiTransport, type QueryParams, type QueryValue } from './transport.js';

export interface ClientOptions {
  url: string;
  token: string | undefined;
  /** PEM of a private CA the server's certificate chains to (`--ca-file`). */
  ca?: string;
  timeoutMs: number;
}

export class ApiClient extends BaseTransport {
  private readonly base: string;
  private readonly dispatcher: Dispatcher;

  constructor(private readonly opts: ClientOptions) {
    super();
    this.base = opts.url.replace(/\/+$/, '');
    this.dispatcher = new Agent({
      connect: { ...(opts.ca !== undefined && { ca: opts.ca }), timeout: opts.timeoutMs },
      headersTimeout: opts.timeoutMs,
      bodyTimeout: opts.timeoutMs,
    });
  }

  async call<T = any>(method: string, path: string, opts: CallOptions = {}): Promise<ApiAnswer<T>> {
    let res: Dispatcher.ResponseData;
    try {
      res = await request(`${this.base}${path}${queryString(opts.query)}`, {
        method: method as Dispatcher.HttpMethod,
        headers: callHeaders(this.opts.token, opts),
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
    return answerOf<T>(method, path, res.statusCode, res.headers['content-type'], text);
  }

  close(): Promise<void> {
    return this.dispatcher.close();
  }
}
