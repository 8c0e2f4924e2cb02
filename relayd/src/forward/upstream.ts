/**
 * The upstream client: forwards spooled files, bytes unchanged, to the next relay or the server
 * with `PUT /<kind>/<name>`. An undici Pool keeps connections alive and bounds concurrency.
 *
 * Fate mapping (RUDDER forwards everything as retryable; that keeps files that can never succeed
 * spinning forever): 2xx → done; 408/429/5xx/network → transient; other 4xx → permanent, the file
 * goes to failed/ with the upstream's coded error.
 *
 * An https upstream is authenticated by a pinned certificate (RUDDER's cert_pinning: that
 * certificate is the only trust anchor and the host name is not checked) or by a CA bundle
 * (host name checked), or by the system CAs when neither is given.
 *
 * Several upstreams (`upstream.url` then `upstream.fallback_urls`: several roots sharing one
 * database, or relays side by side): one is in use at a time. When it does not answer (no
 * connection, a timeout, or 502/503/504), the next one in the list is used for what follows; a
 * probe while the upstream is down tries each in turn and keeps the first that answers. The one in
 * use stays in use while it answers (no flapping back). What the one that failed had not answered
 * is sent again to the next: the upstreams' own deduplication keeps each file stored once.
 */
import { X509Certificate } from 'node:crypto';
import { open, type FileHandle } from 'node:fs/promises';
import type { TLSSocket } from 'node:tls';
import { buildConnector, Pool } from 'undici';
import { BATCH_CONTENT_TYPE, BATCH_PATH, readBatchAnswer, type BatchResult } from '@capstan/shared/batch';
import { capstanError, type CapstanError } from '@capstan/shared/errors';
import { userAgent, HEADER_PROTOCOL, PROTOCOL_VERSION, type SpoolKind } from '@capstan/shared/protocol';

export interface UpstreamTls {
  /** PEM of the one certificate the upstream must present. */
  pinnedCertPem?: string;
  /** PEM CA bundle. */
  caPem?: string;
}

export interface UpstreamOptions {
  url: string;
  /** More upstreams, in order, for when the one in use does not answer. */
  fallbackUrls?: readonly string[];
  timeoutMs: number;
  connections: number;
  tls?: UpstreamTls;
  /** Told when another upstream takes over (for the log). */
  onSwitch?: (from: string, to: string, reason: string) => void;
}

/** What every forward sends besides its length (built once, not per file). */
const FORWARD_HEADERS: Readonly<Record<string, string>> = {
  'content-type': 'application/octet-stream',
  'user-agent': userAgent('capstan-relayd'),
  [HEADER_PROTOCOL]: PROTOCOL_VERSION,
};

/** Files up to this size are read whole (faster); larger ones are streamed from disk. */
const READ_WHOLE_BYTES = 1024 * 1024;

/** One upstream of the list: its address and its pool of kept-alive connections. */
interface Target {
  url: string;
  origin: string;
  basePath: string;
  pool: Pool;
}

/** Statuses that say this upstream cannot take anything now (a proxy without a backend, a busy or stopping server). */
const FAILOVER_STATUSES = new Set([502, 503, 504]);

export class Upstream {
  private targets: Target[];
  private active = 0;
  private tls: UpstreamTls | undefined;

  constructor(private readonly opts: UpstreamOptions) {
    this.tls = opts.tls;
    this.targets = [opts.url, ...(opts.fallbackUrls ?? [])].map((url) => this.makeTarget(url, opts.tls));
  }

  /** TLS connect options for other clients of the same upstream (the remote-run link). */
  connectOptions(): ConnectOption {
    return connectOptionsFor(this.tls);
  }

  private makeTarget(url: string, tls: UpstreamTls | undefined): Target {
    const u = new URL(url);
    return {
      url,
      origin: u.origin,
      basePath: u.pathname.replace(/\/+$/, ''),
      pool: new Pool(u.origin, {
        connections: this.opts.connections,
        headersTimeout: this.opts.timeoutMs,
        bodyTimeout: this.opts.timeoutMs,
        keepAliveTimeout: 4_000,
        connect: connectOptionsFor(tls, Math.min(this.opts.timeoutMs, 10_000)),
      }),
    };
  }

  /**
   * Swap in a new trust configuration (reload): new requests use the new pools; the old ones
   * finish what they have in flight and close.
   */
  reconfigure(tls: UpstreamTls | undefined): void {
    const old = this.targets;
    this.tls = tls;
    this.targets = old.map((t) => this.makeTarget(t.url, tls));
    for (const t of old) void t.pool.close().catch(() => {});
  }

  /** The upstream in use. */
  get url(): string {
    return this.targets[this.active]!.url;
  }

  /** Every upstream, in order (the first is upstream.url). */
  get urls(): string[] {
    return this.targets.map((t) => t.url);
  }

  private get current(): Target {
    return this.targets[this.active]!;
  }

  /** `t` did not answer: the next upstream takes over, unless another already did. */
  private failed(t: Target, reason: string): void {
    if (this.targets.length < 2 || this.targets[this.active] !== t) return;
    this.use((this.active + 1) % this.targets.length, reason);
  }

  private use(i: number, reason: string): void {
    if (i === this.active) return;
    const from = this.url;
    this.active = i;
    this.opts.onSwitch?.(from, this.url, reason);
  }

  /**
   * PUT one spooled file upstream. `cached` is its body when the API just received it (the file
   * on disk has the same bytes); otherwise the file is read.
   */
  async forward(kind: SpoolKind, name: string, path: string, signal?: AbortSignal, cached?: Buffer): Promise<void> {
    let body: Buffer | NodeJS.ReadableStream;
    let size: number;
    let fh: FileHandle | null = null;
    if (cached) {
      body = cached;
      size = cached.length;
    } else {
      // Open first: a file gone meanwhile (taken by another pass) fails here with ENOENT, before
      // anything is sent, so it is never forwarded twice.
      fh = await open(path, 'r');
      try {
        size = (await fh.stat()).size;
        body = size <= READ_WHOLE_BYTES ? await fh.readFile() : fh.createReadStream({ autoClose: true });
      } catch (err) {
        await fh.close();
        throw err;
      }
      if (Buffer.isBuffer(body)) {
        await fh.close();
        fh = null;
      }
    }
    let res;
    const t = this.current;
    try {
      res = await t.pool.request({
        method: 'PUT',
        path: `${t.basePath}/${kind}/${encodeURIComponent(name)}`,
        headers: { ...FORWARD_HEADERS, 'content-length': String(size) },
        body: body as Buffer,
        signal,
      });
    } catch (err) {
      if (fh) await fh.close().catch(() => {});
      throw this.unreachable(t, err);
    }
    if (res.statusCode >= 200 && res.statusCode < 300) {
      // The answer's body is not needed: drained without decoding it (the connection is reused).
      await res.body.dump().catch(() => {});
      return;
    }
    const text = await res.body.text().catch(() => '');
    if (FAILOVER_STATUSES.has(res.statusCode)) this.failed(t, `it answered ${res.statusCode}`);
    throw fateOf(res.statusCode, upstreamErrorCode(text));
  }

  /**
   * POST files as one batch (shared/src/batch.ts): one result per file, in order, or a throw for
   * the whole batch: ERR_UPSTREAM when it is worth sending again as it is (unreachable, 408, 429,
   * 5xx but 501), else `BatchesUnsupported`: the upstream does not know the route (404, 405: an older
   * relay or server; 501: a server that implements no such method), or takes no such batch (another 4xx: smaller limits than this relay's), or
   * answered something that is no batch answer. Its files then go up one PUT each.
   */
  async sendBatch(kind: SpoolKind, body: Buffer, names: readonly string[], signal?: AbortSignal): Promise<BatchResult[]> {
    let res;
    const t = this.current;
    try {
      res = await t.pool.request({
        method: 'POST',
        path: `${t.basePath}${BATCH_PATH}/${kind}`,
        headers: { ...FORWARD_HEADERS, 'content-type': BATCH_CONTENT_TYPE, 'content-length': String(body.length) },
        body,
        signal,
      });
    } catch (err) {
      throw this.unreachable(t, err);
    }
    const text = await res.body.text().catch(() => '');
    const status = res.statusCode;
    if (FAILOVER_STATUSES.has(status)) this.failed(t, `it answered ${status}`);
    // 501 is "method not implemented" (a plain HTTP or WebDAV server): no batches there, as a 404
    // or 405 says, not an outage. Retried as a 5xx, nothing at all reached such an upstream.
    if (status === 501) throw new BatchesUnsupported(status, 'the upstream does not implement the batch request');
    if (status === 408 || status === 429 || status >= 500) throw fateOf(status, upstreamErrorCode(text));
    if (status === 200) {
      try {
        return readBatchAnswer(JSON.parse(text), names);
      } catch (err) {
        throw new BatchesUnsupported(status, `its answer is not a batch answer (${(err as Error).message})`);
      }
    }
    throw new BatchesUnsupported(status, upstreamErrorCode(text).trim() || 'no batch route');
  }

  /**
   * Is an upstream answering at all? `GET /uuid` (every relay and the server answer it): the one
   * in use first, then each other in turn; the first that answers is the one in use after.
   */
  async probe(): Promise<boolean> {
    for (let k = 0; k < this.targets.length; k++) {
      const i = (this.active + k) % this.targets.length;
      if (await this.answers(this.targets[i]!)) {
        this.use(i, `${this.targets[this.active]!.url} does not answer`);
        return true;
      }
    }
    return false;
  }

  private async answers(t: Target): Promise<boolean> {
    try {
      const res = await t.pool.request({ method: 'GET', path: `${t.basePath}/uuid`, headersTimeout: 5_000, bodyTimeout: 5_000 });
      await res.body.text().catch(() => '');
      return res.statusCode < 500;
    } catch {
      return false;
    }
  }

  /** A request of the caller's own (shared-files forwarding), through the same pools and trust. */
  async request(opts: { method: 'HEAD' | 'PUT' | 'GET' | 'POST'; path: string; headers?: Record<string, string>; body?: Buffer | NodeJS.ReadableStream; signal?: AbortSignal; timeoutMs?: number }) {
    const t = this.current;
    try {
      return await t.pool.request({
        method: opts.method,
        path: `${t.basePath}${opts.path}`,
        headers: { 'user-agent': userAgent('capstan-relayd'), ...opts.headers },
        body: opts.body as Buffer | undefined,
        signal: opts.signal,
        ...(opts.timeoutMs !== undefined ? { headersTimeout: opts.timeoutMs, bodyTimeout: opts.timeoutMs } : {}),
      });
    } catch (err) {
      if (!opts.signal?.aborted) this.failed(t, (err as Error).message);
      throw err;
    }
  }

  /** A request to `t` failed without an answer: the next upstream takes over; the coded error. */
  private unreachable(t: Target, err: unknown): CapstanError {
    if (!(err as { name?: string }).name?.includes('Abort')) this.failed(t, (err as Error).message);
    return unreachable(err);
  }

  async close(): Promise<void> {
    await Promise.all(this.targets.map((t) => t.pool.close()));
  }
}

export type ConnectOption = buildConnector.BuildOptions | buildConnector.connector;

/**
 * Pinned certificate → the peer must present exactly that certificate (compared by SHA-256
 * fingerprint after the handshake; chain and host name are not checked, as RUDDER's cert_pinning).
 * A CA → the usual chain and host-name checks against it. Neither → the system CAs.
 *
 * Pinning cannot be done with `ca: <pinned>` alone: OpenSSL does not accept a leaf that is not
 * self-signed as a trust anchor, and with `rejectUnauthorized: false` Node skips
 * checkServerIdentity, so the fingerprint is checked here, on every new connection.
 */
export function connectOptionsFor(tls: UpstreamTls | undefined, timeoutMs = 10_000): ConnectOption {
  if (tls?.pinnedCertPem) {
    const pinned = new X509Certificate(tls.pinnedCertPem).fingerprint256;
    const base = buildConnector({ rejectUnauthorized: false, timeout: timeoutMs, maxCachedSessions: 0 });
    return (opts, cb) => {
      base(opts, (err, socket) => {
        if (err || !socket) return cb(err ?? new Error('no socket'), null);
        if (!('getPeerCertificate' in socket)) return cb(null, socket); // plain http: nothing to pin
        const got = (socket as TLSSocket).getPeerCertificate().fingerprint256;
        if (got !== pinned) {
          socket.destroy();
          return cb(Object.assign(new Error(`upstream certificate ${got} is not the pinned one`), { code: 'ERR_PINNED_CERT' }), null);
        }
        cb(null, socket);
      });
    };
  }
  if (tls?.caPem) return { ca: tls.caPem, timeout: timeoutMs };
  return { timeout: timeoutMs };
}

/** The upstream does not take this batch (it answered the batch route with this status): PUTs then. */
export class BatchesUnsupported extends Error {
  constructor(readonly status: number, readonly why: string) {
    super(`upstream answered ${status} to a batch (${why}): sending one PUT per file`);
  }
}

function unreachable(err: unknown): CapstanError {
  return capstanError('ERR_UPSTREAM', `upstream unreachable: ${(err as Error).message}`, {
    cause: err,
    details: { unreachable: true, cause: (err as { code?: string }).code ?? (err as Error).name },
  });
}

/**
 * A file's fate from the upstream's status (RUDDER forwards everything as retryable, which keeps
 * files that can never succeed spinning): 408, 409, 429 and 5xx are worth a retry; any other 4xx is
 * the file's own fault. `detail` is the upstream's ` <code>: <message>`, or empty.
 */
export function fateOf(status: number, detail: string): CapstanError {
  // 409: the upstream holds other bytes under this name for now (ERR_SPOOL_CONFLICT): kept, sent again later.
  if (status === 408 || status === 409 || status === 429 || status >= 500) {
    return capstanError('ERR_UPSTREAM', `upstream answered ${status}${detail}`, { details: { status } });
  }
  return capstanError('ERR_UPSTREAM_REJECTED', `upstream refused the file with ${status}${detail}`, { details: { status } });
}

function upstreamErrorCode(text: string): string {
  try {
    const e = (JSON.parse(text) as { error?: { code?: string; message?: string } }).error;
    if (e?.code) return ` ${e.code}: ${e.message ?? ''}`;
  } catch {
    /* not JSON */
  }
  return '';
}
