/**
 * A stand-in upstream for relay tests: a real HTTP server on loopback that records the sha256 of
 * every PUT body by path, answers with a status the test chooses (per request, so a test can
 * make a file fail permanently or transiently), and can be stopped and restarted on the same port
 * to play an outage. It also answers GET /uuid, the relay's probe, and takes upload batches
 * (`POST /batch/<kind>`) as the server does, each file answered as its PUT would be, unless told
 * to play an upstream that knows none (`batches: false`: 404).
 */
import { createHash } from 'node:crypto';
import { decodeBatch } from '@capstan/shared';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { listenOn } from '../../helpers/ports.js';

export interface Received {
  path: string;
  sha256: string;
  bytes: number;
}

export type Answer = (req: IncomingMessage, path: string) => number | Promise<number>;

export class CountingUpstream {
  readonly received: Received[] = [];
  /** sha256 → how many times a body with it arrived. */
  readonly counts = new Map<string, number>();
  inFlight = 0;
  maxInFlight = 0;
  /** Batch requests received, and the files in each. */
  readonly batches: number[] = [];
  /** Batch requests refused (`batches: false` or a status). */
  refusedBatches = 0;
  private server: Server | null = null;
  port = 0;

  /** `batches`: false answers every batch 404; a number answers it with that status (e.g. 501). */
  constructor(private answer: Answer = () => 201, private readonly opts: { batches?: boolean | number } = {}) {}

  setAnswer(a: Answer): void {
    this.answer = a;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = decodeURIComponent((req.url ?? '/').split('?')[0]!);
    if (req.method === 'GET' && path === '/uuid') {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('upstream\n');
      return;
    }
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    try {
      if (req.method === 'POST' && path.startsWith('/batch/')) return await this.batch(req, res, path.slice('/batch/'.length));
      const h = createHash('sha256');
      let bytes = 0;
      for await (const c of req as AsyncIterable<Buffer>) {
        h.update(c);
        bytes += c.length;
      }
      const status = await this.answer(req, path);
      if (req.method === 'PUT' && status >= 200 && status < 300) {
        const sha256 = h.digest('hex');
        this.received.push({ path, sha256, bytes });
        this.counts.set(sha256, (this.counts.get(sha256) ?? 0) + 1);
      }
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(status >= 400 ? JSON.stringify({ error: { code: status === 400 ? 'ERR_BAD_REQUEST' : 'ERR_UPSTREAM', message: 'as the test asked' } }) : '{}');
    } finally {
      this.inFlight--;
    }
  }

  private async batch(req: IncomingMessage, res: ServerResponse, kind: string): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req as AsyncIterable<Buffer>) chunks.push(c);
    if (this.opts.batches === false || typeof this.opts.batches === 'number') {
      const status = typeof this.opts.batches === 'number' ? this.opts.batches : 404;
      this.refusedBatches++;
      // A plain web server's answer: no JSON error envelope.
      res.writeHead(status, { 'content-type': 'text/html' }).end(`<html><body>${status}</body></html>`);
      return;
    }
    const files = decodeBatch(Buffer.concat(chunks), 10_000);
    this.batches.push(files.length);
    const results = [];
    for (const f of files) {
      const path = `/${kind}/${f.name}`;
      const status = await this.answer(req, path);
      if (status >= 200 && status < 300) {
        const sha256 = createHash('sha256').update(f.body).digest('hex');
        this.received.push({ path, sha256, bytes: f.body.byteLength });
        this.counts.set(sha256, (this.counts.get(sha256) ?? 0) + 1);
        results.push({ file: f.name, status });
      } else {
        results.push({ file: f.name, status, error: { code: status === 400 ? 'ERR_BAD_REQUEST' : 'ERR_UPSTREAM', message: 'as the test asked' } });
      }
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ data: { files: results } }));
  }

  /** Listen on `port` (0 = any free port; a restart reuses the previous one). */
  async start(port = this.port): Promise<this> {
    this.server = createServer((req, res) => {
      this.handle(req, res).catch(() => res.destroy());
    });
    this.server.keepAliveTimeout = 5_000;
    this.port = await listenOn(this.server, port);
    return this;
  }

  async stop(): Promise<void> {
    const s = this.server;
    this.server = null;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  }
}

/** A free port no other test can take meanwhile (helpers/ports.ts), for an upstream that starts after its relay. */
export { freePort } from '../../helpers/ports.js';

export const sha256 = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

/** A valid RUDDER run-log file name for a node, unique per `i`. */
export function runName(node: string, i: number): string {
  const d = new Date(Date.UTC(2026, 0, 1) + i * 1000);
  return `${d.toISOString().replace(/\.\d{3}Z$/, '+00:00')}@${node}.log`;
}

/** Poll until `fn` returns a value other than undefined, or fail after `ms`. */
export async function until<T>(fn: () => T | undefined | Promise<T | undefined>, what: string, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
