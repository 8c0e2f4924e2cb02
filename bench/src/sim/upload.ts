/**
 * PUTs for many simulated agents over a bounded set of keep-alive connections (node:http, like
 * the agent). Real agents open one connection per run; a simulator on one machine cannot open
 * hundreds per second for long without exhausting ephemeral ports in TIME_WAIT, so it reuses
 * `sockets` connections per relay and says so in its report.
 */
import http from 'node:http';
import { CAPSTAN_VERSION, HEADER_PROTOCOL, PROTOCOL_VERSION, type SpoolKind } from '@capstan/shared/protocol';

export interface PutResult {
  status: number;
  /** Milliseconds from the request's start to the end of the answer. */
  ms: number;
  /** The coded error of a refused upload, or the network error's code. */
  code?: string;
}

export const SIM_USER_AGENT = `capstan-sim/${CAPSTAN_VERSION}`;

export class Uploader {
  private readonly agent: http.Agent;
  private readonly base: URL;

  constructor(baseUrl: string, private readonly opts: { sockets: number; timeoutMs: number }) {
    this.base = new URL(baseUrl);
    if (this.base.protocol !== 'http:') throw new RangeError(`only http:// relays are supported by the simulator (got ${this.base.protocol})`);
    this.agent = new http.Agent({ keepAlive: true, maxSockets: opts.sockets, maxFreeSockets: opts.sockets });
  }

  /** Never throws: a network failure is status 0 with its code. */
  put(kind: SpoolKind, name: string, body: Buffer): Promise<PutResult> {
    const started = performance.now();
    const path = `${this.base.pathname.replace(/\/+$/, '')}/${kind}/${encodeURIComponent(name)}`;
    return new Promise((resolve) => {
      let settled = false;
      const done = (r: Omit<PutResult, 'ms'>) => {
        if (settled) return;
        settled = true;
        resolve({ ...r, ms: performance.now() - started });
      };
      const req = http.request(
        {
          host: this.base.hostname,
          port: this.base.port || 80,
          path,
          method: 'PUT',
          agent: this.agent,
          timeout: this.opts.timeoutMs,
          headers: {
            'content-type': 'application/octet-stream',
            'content-length': String(body.length),
            'user-agent': SIM_USER_AGENT,
            [HEADER_PROTOCOL]: PROTOCOL_VERSION,
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => {
            if (chunks.length < 16) chunks.push(c); // error bodies are small; never hold a flood
          });
          res.on('error', (err: NodeJS.ErrnoException) => done({ status: 0, code: err.code ?? 'ERR_NETWORK' }));
          res.on('end', () => {
            const status = res.statusCode ?? 0;
            if (status >= 200 && status < 300) return done({ status });
            let code = `HTTP_${status}`;
            try {
              code = (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { error?: { code?: string } }).error?.code ?? code;
            } catch {
              /* not a coded error body */
            }
            done({ status, code });
          });
        },
      );
      req.on('timeout', () => req.destroy(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' })));
      req.on('error', (err: NodeJS.ErrnoException) => done({ status: 0, code: err.code ?? 'ERR_NETWORK' }));
      req.end(body);
    });
  }

  close(): void {
    this.agent.destroy();
  }
}
