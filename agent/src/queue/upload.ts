/** The agent's HTTP client to its relay: PUT uploads with a Content-Length, bounded by a timeout. */
import { readFile } from 'node:fs/promises';
import { httpRequest } from './http.js';
import { capstanError } from '@capstan/shared/errors';
import { HEADER_TOKEN_REQUEST } from '@capstan/shared/identity/renew';
import { HEADER_PROTOCOL, PROTOCOL_VERSION, userAgent, type SpoolKind } from '@capstan/shared/protocol';

/**
 * The one inventory of this run that carries a token request: sent with HEADER_TOKEN_REQUEST, and
 * a token in the answer (a server answering the agent itself) goes to `onToken`.
 */
export interface InventoryTokenRequest {
  file: string;
  onToken: (token: string) => Promise<void>;
}

export class RelayClient {
  constructor(
    private readonly baseUrl: string,
    private readonly timeoutMs: number,
    private readonly tokenRequest?: InventoryTokenRequest,
  ) {}

  async upload(kind: SpoolKind, name: string, path: string): Promise<void> {
    const asks = kind === 'inventories' && this.tokenRequest?.file === name;
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
          ...(asks && { [HEADER_TOKEN_REQUEST]: '1' }),
        },
        timeoutMs: this.timeoutMs,
        maxResponseBytes: 1024 * 1024,
      });
    } catch (err) {
      throw capstanError('ERR_UPSTREAM', `relay unreachable: ${(err as Error).message}`, { cause: err });
    }
    const text = res.body.toString('utf8');
    if (res.status >= 200 && res.status < 300) {
      if (asks) await this.takeToken(text);
      return;
    }
    // 409: the relay holds other bytes under this file's name (someone raced ahead with it); the
    // file stays queued and goes once that one has been delivered.
    const transient = res.status === 408 || res.status === 409 || res.status === 429 || res.status >= 500;
    throw capstanError(transient ? 'ERR_UPSTREAM' : 'ERR_UPSTREAM_REJECTED', `relay answered ${res.status}: ${text.slice(0, 200)}`);
  }

  /** A token in the answer is kept; none (a relay answered, or the server would not) is no error. */
  private async takeToken(answer: string): Promise<void> {
    let token: unknown;
    try {
      token = (JSON.parse(answer) as { data?: { token?: unknown } }).data?.token;
    } catch {
      return;
    }
    // A token that does not fit (another node's, expired) is refused there; the run renews by request.
    if (typeof token === 'string') await this.tokenRequest!.onToken(token).catch(() => undefined);
  }
}
