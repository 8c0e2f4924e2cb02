/** The agent's HTTP client to its relay: PUT uploads with a Content-Length, bounded by a timeout. */
import { readFile } from 'node:fs/promises';
import { request } from 'undici';
import { capstanError, HEADER_PROTOCOL, PROTOCOL_VERSION, userAgent, type SpoolKind } from '@capstan/shared';

export class RelayClient {
  constructor(
    private readonly baseUrl: string,
    private readonly timeoutMs: number,
  ) {}

  async upload(kind: SpoolKind, name: string, path: string): Promise<void> {
    const body = await readFile(path);
    let res;
    try {
      res = await request(`${this.baseUrl}/${kind}/${encodeURIComponent(name)}`, {
        method: 'PUT',
        body,
        headers: {
          'content-type': 'application/octet-stream',
          'content-length': String(body.length),
          'user-agent': userAgent('capstan-agent'),
          [HEADER_PROTOCOL]: PROTOCOL_VERSION,
        },
        headersTimeout: this.timeoutMs,
        bodyTimeout: this.timeoutMs,
      });
    } catch (err) {
      throw capstanError('ERR_UPSTREAM', `relay unreachable: ${(err as Error).message}`, { cause: err });
    }
    const text = await res.body.text().catch(() => '');
    if (res.statusCode >= 200 && res.statusCode < 300) return;
    const transient = res.statusCode === 408 || res.statusCode === 429 || res.statusCode >= 500;
    throw capstanError(transient ? 'ERR_UPSTREAM' : 'ERR_UPSTREAM_REJECTED', `relay answered ${res.statusCode}: ${text.slice(0, 200)}`);
  }
}
