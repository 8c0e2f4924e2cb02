/**
 * The remote CLI's way to the server: the admin API over HTTP(S) with Node's own http and https
 * clients. Never the store, so `capstan` works from any machine that can reach the API. Every
 * failure becomes an ApiFailure carrying what the exit code is chosen from: the API's coded error
 * and status, or `unreachable` when no answer came (connection refused, DNS, TLS, timeout).
 *
 * Node's built-in clients rather than undici: a CLI makes one or two calls and exits, and loading
 * undici's modules costs more CPU than the whole of most verbs (about 0.2 s of the 0.45 s a
 * `capstan nodes list` took).
 */
import http from 'node:http';
import https from 'node:https';
import { answerOf, ApiFailure, BaseTransport, callHeaders, queryString, type ApiAnswer, type CallOptions } from './transport.js';

export { ApiFailure, queryString, type ApiAnswer, type ApiTransport, type QueryParams, type QueryValue } from './transport.js';

export interface ClientOptions {
  url: string;
  token: string | undefined;
  /** PEM of a private CA the server's certificate chains to (`--ca-file`). */
  ca?: string;
  /** Bound on connecting, on waiting for the answer's headers, and on each wait for its body. */
  timeoutMs: number;
}

interface RawAnswer {
  status: number;
  contentType: string | undefined;
  text: string;
}

export class ApiClient extends BaseTransport {
  private readonly base: string;
  private readonly agent: http.Agent;

  constructor(private readonly opts: ClientOptions) {
    super();
    this.base = opts.url.replace(/\/+$/, '');
    this.agent = this.base.startsWith('https:')
      ? new https.Agent({ keepAlive: true, ...(opts.ca !== undefined && { ca: opts.ca }) })
      : new http.Agent({ keepAlive: true });
  }

  async call<T = any>(method: string, path: string, opts: CallOptions = {}): Promise<ApiAnswer<T>> {
    const body = opts.body === undefined ? undefined : JSON.stringify(opts.body);
    const answer = await this.send(method, `${this.base}${path}${queryString(opts.query)}`, callHeaders(this.opts.token, opts), body);
    return answerOf<T>(method, path, answer.status, answer.contentType, answer.text);
  }

  private send(method: string, url: string, headers: Record<string, string>, body: string | undefined): Promise<RawAnswer> {
    const unreachable = (err: Error & { code?: string }) =>
      new ApiFailure('ERR_UNREACHABLE', `cannot reach ${this.base}: ${err.code ? `${err.code} ` : ''}${err.message}`, 0);
    return new Promise((resolve, reject) => {
      let target: URL;
      try {
        target = new URL(url);
      } catch (err) {
        reject(unreachable(err as Error));
        return;
      }
      const lib = target.protocol === 'https:' ? https : http;
      const outgoing = { ...headers, ...(body !== undefined && { 'content-length': String(Buffer.byteLength(body)) }) };
      const req = lib.request(target, { method, headers: outgoing, agent: this.agent, timeout: this.opts.timeoutMs }, (res) => {
        const chunks: Buffer[] = [];
        res.setTimeout(this.opts.timeoutMs, () => res.destroy(Object.assign(new Error(`no data for ${this.opts.timeoutMs} ms`), { code: 'ETIMEDOUT' })));
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', (err) => reject(new ApiFailure('ERR_UNREACHABLE', `the answer from ${this.base} was cut off: ${err.message}`, 0)));
        res.on('aborted', () => reject(new ApiFailure('ERR_UNREACHABLE', `the answer from ${this.base} was cut off`, 0)));
        res.on('end', () => {
          const type = res.headers['content-type'];
          resolve({ status: res.statusCode ?? 0, contentType: type, text: Buffer.concat(chunks).toString('utf8') });
        });
      });
      // `timeout` covers connecting and every idle wait before the answer's headers.
      req.on('timeout', () => req.destroy(Object.assign(new Error(`no answer in ${this.opts.timeoutMs} ms`), { code: 'ETIMEDOUT' })));
      req.on('error', (err) => reject(unreachable(err)));
      req.end(body);
    });
  }

  close(): Promise<void> {
    this.agent.destroy();
    return Promise.resolve();
  }
}
