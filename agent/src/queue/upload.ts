/** The agent's HTTP client to its relay: PUT uploads with a Content-Length, bounded by a timeout. */
import { readFile } from 'node:fs/promises';
import { httpRequest } from './http.js';
import { capstanError, HEADER_PROTOCOL, PROTOCOL_VERSION, userAgent, type SpoolKind } from '@capstan/shared/agent';

export class RelayClient {
  constructor(
    private readonly baseUrl: string,
    private readonly timeoutMs: number,
  ) {}

  async upload(kind: SpoolKind, name: string, path: string): Promise<void> {
    const body = await readFile(path);
    let res;
    try {
      res = await httpRequest({
        method: 'PUT',
        url: `${this.baseUrl}/${kind}/${encodeURIComponent(name)}`,
        body,
        headers: {
          'content-type': 'application/octet-stream',
          'user-agent': userAgent('capstan-agent'),
          [HEADER_PROTOCOL]: PROTOCOL_VERSION,
        },
        timeoutMs: this.timeoutMs,
        maxResponseBytes: 1024 * 1024,
      });
    } catch (err) {
      throw capstanError('ERR_UPSTREAM', `relay unreachable: ${(err as Error).message}`, { cause: err });
    }
    const text = res.body.toString('utf8');
    if (res.status >= 200 && res.status < 300) return;
    const transient = res.status === 408 || res.status === 429 || res.status >= 500;
    throw capstanError(transient ? 'ERR_UPSTREAM' : 'ERR_UPSTREAM_REJECTED', `relay answered ${res.status}: ${text.slice(0, 200)}`);
  }
}
