/**
 * What one client may cost a listener, shared by relayd and server: the `[http]` configuration
 * section, the Node server options it becomes (header timeout, header size), the upload body's
 * pace (longest pause, lowest average rate) and the uploads in flight, in all and per client
 * address. Without them a body trickled at a byte every few seconds held a socket, a file
 * descriptor and a temporary file for as long as the client liked, and one address could open
 * any number of such uploads.
 */
import type { IncomingMessage } from 'node:http';
import { capstanError } from '@capstan/shared/errors';

export const HTTP_LIMITS_SCHEMA = {
  /** A request's headers must arrive whole within this (408 ERR_REQUEST_TIMEOUT, then the connection closes). */
  headers_timeout: { type: 'duration', default: '30s', min: 100 },
  /** Largest request head (request line and headers); larger → 431 ERR_HEADERS_TOO_LARGE. */
  max_header_size: { type: 'size', default: '16KiB', min: 1024 },
  /** Longest pause between two pieces of an upload's body (408 ERR_REQUEST_TIMEOUT, nothing kept). */
  body_timeout: { type: 'duration', default: '30s', min: 100 },
  /** Lowest average rate of an upload's body once upload_rate_grace has passed, in bytes per second; 0: none. */
  min_upload_rate: { type: 'size', default: '1KiB' },
  /** How long an upload may go below min_upload_rate at its start (slow start, a brief stall). */
  upload_rate_grace: { type: 'duration', default: '10s' },
  /**
   * Uploads in progress at once on this listener, all clients together (PUTs and batches); more →
   * 503 ERR_BUSY with Retry-After. What bounds the sockets, temporary files and memory uploads
   * hold, with body_timeout and min_upload_rate bounding how long each may. 0: no limit.
   */
  max_uploads: { type: 'integer', default: 1024, min: 0, max: 1000000 },
  /**
   * Once half of max_uploads are in progress (the listener is contended), each client address is
   * held to its fair share: max_uploads divided by the addresses with an upload in progress, and
   * never less than this; more → 429 ERR_TOO_MANY_UPLOADS with Retry-After. Until then one
   * address may take any number: a fleet behind one NAT or proxy address, or a relay below, is
   * not refused for sharing an address. With max_uploads = 0 this is a fixed limit per address,
   * contended or not. 0: no limit per address.
   */
  max_uploads_per_client: { type: 'integer', default: 32, min: 0, max: 100000 },
  /** Most files in one upload batch (`POST /batch/<kind>`, what relays send up); more → 413 ERR_BATCH_TOO_LARGE. */
  max_batch_files: { type: 'integer', default: 256, min: 1, max: 65535 },
  /** Largest upload batch body, held in memory while its files are taken; larger → 413 ERR_BATCH_TOO_LARGE. */
  max_batch_size: { type: 'size', default: '16MiB', min: 1024 },
  /**
   * Bytes of upload batches held in memory at once, all clients together; a batch that would go
   * past it → 503 ERR_BUSY with Retry-After (the relay sends it again later).
   */
  max_batch_memory: { type: 'size', default: '128MiB', min: 1024 },
} as const;

export interface HttpLimits {
  readonly headers_timeout: number;
  readonly max_header_size: number;
  readonly body_timeout: number;
  readonly min_upload_rate: number;
  readonly upload_rate_grace: number;
  readonly max_uploads: number;
  readonly max_uploads_per_client: number;
  readonly max_batch_files: number;
  readonly max_batch_size: number;
  readonly max_batch_memory: number;
}

/** Rules across the [http] keys: a batch the size limit lets in must fit in the memory for batches. */
export function checkHttpLimits(l: HttpLimits): void {
  if (l.max_batch_memory < l.max_batch_size) {
    throw capstanError('ERR_CONFIG', 'http.max_batch_memory must be at least http.max_batch_size');
  }
}

/**
 * Node server options from the limits: passed to http(s).createServer. The header timeout is
 * checked on a timer: every quarter of it (at most every second), so it fires within 25% late.
 */
export function serverOptions(l: HttpLimits): { headersTimeout: number; maxHeaderSize: number; connectionsCheckingInterval: number } {
  return {
    headersTimeout: l.headers_timeout,
    maxHeaderSize: l.max_header_size,
    connectionsCheckingInterval: Math.max(25, Math.min(1000, Math.floor(l.headers_timeout / 4))),
  };
}

export interface BodyPace {
  /** Longest pause between two chunks, ms. */
  idleMs: number;
  /** Lowest average rate after graceMs, bytes per second (0: none). */
  minRate: number;
  graceMs: number;
}

export function bodyPace(l: HttpLimits): BodyPace {
  return { idleMs: l.body_timeout, minRate: l.min_upload_rate, graceMs: l.upload_rate_grace };
}

/**
 * The request body, chunk by chunk, refused with ERR_REQUEST_TIMEOUT (408) as soon as it pauses
 * longer than `idleMs` or falls below `minRate` on average after `graceMs`. The socket is not
 * destroyed: the caller answers the coded error, with `Connection: close`.
 */
export async function* pacedBody(req: IncomingMessage, pace: BodyPace): AsyncGenerator<Buffer> {
  const it = req.iterator({ destroyOnReturn: false }) as AsyncIterator<Buffer>;
  const started = Date.now();
  let bytes = 0;
  let timer: NodeJS.Timeout | undefined;
  try {
    for (;;) {
      const now = Date.now();
      // When the average falls below the minimum if nothing more arrives.
      const rateDeadline = pace.minRate > 0 ? started + pace.graceMs + (bytes * 1000) / pace.minRate : Infinity;
      const wait = Math.max(0, Math.min(pace.idleMs, rateDeadline - now));
      const slow = new Promise<'slow'>((resolve) => {
        timer = setTimeout(() => resolve('slow'), wait);
      });
      const next = await Promise.race([it.next(), slow]);
      clearTimeout(timer);
      if (next === 'slow') {
        const idle = wait >= pace.idleMs;
        throw capstanError(
          'ERR_REQUEST_TIMEOUT',
          idle
            ? `upload body paused for more than ${pace.idleMs} ms (http.body_timeout)`
            : `upload body slower than ${pace.minRate} bytes/s on average (http.min_upload_rate)`,
        );
      }
      if (next.done) return;
      bytes += next.value.length;
      yield next.value;
    }
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Uploads in progress, all clients together and per client address (http.max_uploads,
 * max_uploads_per_client; see HTTP_LIMITS_SCHEMA for the rule). `enter` throws ERR_BUSY or
 * ERR_TOO_MANY_UPLOADS; otherwise the returned function must be called once the upload ends.
 */
export class PerClient {
  private readonly active = new Map<string, number>();
  private total = 0;

  /** `perClient`: the per-address floor (0: none); `maxTotal`: uploads in progress at most (0: none). */
  constructor(
    private readonly perClient: number,
    private readonly maxTotal = 0,
  ) {}

  enter(address: string | undefined): () => void {
    if (this.perClient <= 0 && this.maxTotal <= 0) return () => {};
    const key = address ?? '';
    const n = this.active.get(key) ?? 0;
    if (this.maxTotal > 0 && this.total >= this.maxTotal) {
      throw capstanError('ERR_BUSY', `${this.total} uploads are in progress on this listener, at most ${this.maxTotal} (http.max_uploads): send again later`);
    }
    const limit = this.limitFor(n);
    if (limit > 0 && n >= limit) {
      throw capstanError('ERR_TOO_MANY_UPLOADS', this.maxTotal > 0
        ? `this address has ${n} uploads in progress, its share while ${this.total} are (http.max_uploads ${this.maxTotal}, max_uploads_per_client ${this.perClient})`
        : `this address has ${n} uploads in progress, at most ${this.perClient} (http.max_uploads_per_client)`);
    }
    this.active.set(key, n + 1);
    this.total++;
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.total--;
      const m = (this.active.get(key) ?? 1) - 1;
      if (m <= 0) this.active.delete(key);
      else this.active.set(key, m);
    };
  }

  /** What an address holding `n` uploads may hold now (0: no limit). */
  private limitFor(n: number): number {
    if (this.perClient <= 0) return 0;
    if (this.maxTotal <= 0) return this.perClient;
    if (this.total * 2 < this.maxTotal) return 0;
    // Addresses that would share the listener, counting this one if it holds nothing yet.
    const sharing = this.active.size + (n === 0 ? 1 : 0);
    return Math.max(this.perClient, Math.floor(this.maxTotal / sharing));
  }

  /** Uploads in progress, all addresses together. */
  get inProgress(): number {
    return this.total;
  }

  /** Addresses with an upload in progress (for tests and metrics). */
  get size(): number {
    return this.active.size;
  }
}
