/**
 * The upstream client: forwards spooled files, bytes unchanged, to the next relay or the server
 * with `PUT /<kind>/<name>`. An undici Pool keeps connections alive and bounds concurrency.
 *
 * Fate mapping (RUDDER forwards everything as retryable; that keeps files that can never succeed
 * spinning forever): 2xx → done; 408/429/5xx/network → transient; other 4xx → permanent, the file
 * goes to failed/ with the upstream's coded error.
 */
import { readFile } from 'node:fs/promises';
import { Pool } from 'undici';
import { capstanError, userAgent, HEADER_PROTOCOL, PROTOCOL_VERSION, type SpoolKind } from '@capstan/shared';

export interface UpstreamOptions {
  url: string;
  timeoutMs: number;
  connections: number;
}

export class Upstream {
  private readonly pool: Pool;
  private readonly basePath: string;

  constructor(opts: UpstreamOptions) {
    const u = new URL(opts.url);
    this.basePath = u.pathname.replace(/\/+$/, '');
    this.pool = new Pool(u.origin, {
      connections: opts.connections,
      headersTimeout: opts.timeoutMs,
      bodyTimeout: opts.timeoutMs,
      connectTimeout: Math.min(opts.timeoutMs, 10_000),
      keepAliveTimeout: 4_000,
    });
  }

  async forward(kind: SpoolKind, name: string, path: string): Promise<void> {
    const body = await readFile(path);
    let res;
    try {
      res = await this.pool.request({
        method: 'PUT',
        path: `${this.basePath}/${kind}/${encodeURIComponent(name)}`,
        headers: {
          'content-type': 'application/octet-stream',
          'content-length': String(body.length),
          'user-agent': userAgent('capstan-relayd'),
          [HEADER_PROTOCOL]: PROTOCOL_VERSION,
        },
        body,
      });
    } catch (err) {
      throw capstanError('ERR_UPSTREAM', `upstream unreachable: ${(err as Error).message}`, { cause: err });
    }
    const text = await res.body.text().catch(() => '');
    if (res.statusCode >= 200 && res.statusCode < 300) return;
    const detail = upstreamErrorCode(text);
    if (res.statusCode === 408 || res.statusCode === 429 || res.statusCode >= 500) {
      throw capstanError('ERR_UPSTREAM', `upstream answered ${res.statusCode}${detail}`);
    }
    throw capstanError('ERR_UPSTREAM_REJECTED', `upstream refused the file with ${res.statusCode}${detail}`);
  }

  async close(): Promise<void> {
    await this.pool.close();
  }
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
