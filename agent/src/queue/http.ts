/**
 * The agent's HTTP client: node:http/https with a timeout and a response-size bound.
 *
 * Why not undici like relayd and server: undici parses HTTP with llhttp compiled to WebAssembly,
 * which costs a one-shot agent ~20 MB of peak RSS on every run (measured with `npm run bench`:
 * 110 MB → see the closing figures); node:http uses the native parser already in the binary. The
 * daemons keep undici for its connection pools.
 */
import http from 'node:http';
import https from 'node:https';

export interface HttpResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

export interface HttpRequest {
  method: 'GET' | 'PUT' | 'POST' | 'HEAD';
  url: string;
  headers?: Record<string, string>;
  body?: Buffer;
  timeoutMs: number;
  /** Largest response body read; a longer one fails the request. */
  maxResponseBytes?: number;
}

export class HttpError extends Error {
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
  }
}

export function httpRequest(req: HttpRequest): Promise<HttpResponse> {
  const url = new URL(req.url);
  const mod = url.protocol === 'https:' ? https : http;
  const max = req.maxResponseBytes ?? 64 * 1024 * 1024;
  return new Promise((resolve, reject) => {
    const r = mod.request(
      url,
      {
        method: req.method,
        headers: { ...(req.headers ?? {}), ...(req.body ? { 'content-length': String(req.body.length) } : {}) },
        timeout: req.timeoutMs,
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size > max) {
            res.destroy(new HttpError(`response larger than ${max} bytes`, 'ERR_BODY_TOO_LARGE'));
            return;
          }
          chunks.push(c);
        });
        res.on('error', reject);
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      },
    );
    // `timeout` is idle time on the socket; this bounds the whole exchange too.
    const overall = setTimeout(() => r.destroy(new HttpError(`no answer in ${req.timeoutMs} ms`, 'ETIMEDOUT')), req.timeoutMs);
    r.on('timeout', () => r.destroy(new HttpError(`socket idle for ${req.timeoutMs} ms`, 'ETIMEDOUT')));
    r.on('error', (err) => {
      clearTimeout(overall);
      reject(err);
    });
    r.on('close', () => clearTimeout(overall));
    r.end(req.body);
  });
}
