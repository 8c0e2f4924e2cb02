/**
 * The node's identity token: kept 0600 in the state directory, renewed with a signed request when
 * less than a third of its life is left, and never a lockout — an expired or missing token is
 * renewed the same way, because the signed request works whatever the token's state.
 */
import { readFile, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { capstanError, HEADER_PROTOCOL, makeRenewRequest, PROTOCOL_VERSION, tokenNeedsRenewal, userAgent, type Logger } from '@capstan/shared/agent';
import { httpRequest } from '../queue/http.js';
import { writeAtomic, type AgentIdentity } from './state.js';

interface Stored {
  token: string;
  iat: number;
  exp: number;
}

function decodeTimes(token: string): { iat: number; exp: number } | null {
  try {
    const p = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8')) as { iat?: unknown; exp?: unknown };
    return typeof p.iat === 'number' && typeof p.exp === 'number' ? { iat: p.iat, exp: p.exp } : null;
  } catch {
    return null;
  }
}

export class TokenKeeper {
  private readonly path: string;

  constructor(
    private readonly o: { relay: string; stateDir: string; timeoutMs: number; id: AgentIdentity; log: Logger; clock: () => Date },
  ) {
    this.path = join(o.stateDir, 'identity.token');
  }

  private async load(): Promise<Stored | null> {
    const token = (await readFile(this.path, 'utf8').catch(() => '')).trim();
    const times = token ? decodeTimes(token) : null;
    return token && times ? { token, ...times } : null;
  }

  /** The current token, renewed first when due; null when the server will not issue one (yet). */
  async current(): Promise<string | null> {
    const stored = await this.load();
    if (stored && !tokenNeedsRenewal(stored, this.o.clock())) return stored.token;
    try {
      return await this.renew();
    } catch (err) {
      this.o.log.warn({ err }, 'identity token not renewed');
      // A token with life left still works; an expired one is useless and is dropped.
      if (stored && stored.exp * 1000 > this.o.clock().getTime()) return stored.token;
      return null;
    }
  }

  /** Whether a token is due: none kept, or less than a third of its life left. */
  async due(): Promise<boolean> {
    const stored = await this.load();
    return !stored || tokenNeedsRenewal(stored, this.o.clock());
  }

  /**
   * Keep a token the server handed over otherwise than by renewal (the answer to the inventory):
   * it must be this node's and not expired.
   */
  async accept(token: string): Promise<void> {
    let node: unknown;
    try {
      node = (JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8')) as { capstan_node_id?: unknown }).capstan_node_id;
    } catch {
      node = undefined;
    }
    const times = decodeTimes(token);
    if (node !== this.o.id.nodeId || !times || times.exp * 1000 <= this.o.clock().getTime()) {
      throw capstanError('ERR_TOKEN_INVALID', 'the token handed over is not a valid token of this node');
    }
    await writeAtomic(this.path, `${token}\n`, 0o600);
  }

  /** Ask for a new token with a request signed by the node key. */
  async renew(): Promise<string> {
    const body = makeRenewRequest(this.o.id, this.o.id.nodeId, this.o.clock());
    let res;
    try {
      res = await httpRequest({
        method: 'POST',
        url: `${this.o.relay}/identity/renew`,
        body,
        headers: { 'content-type': 'application/pkcs7-mime', 'user-agent': userAgent('capstan-agent'), [HEADER_PROTOCOL]: PROTOCOL_VERSION },
        timeoutMs: this.o.timeoutMs,
        maxResponseBytes: 64 * 1024,
      });
    } catch (err) {
      throw capstanError('ERR_UPSTREAM', `relay unreachable: ${(err as Error).message}`, { cause: err });
    }
    if (res.status !== 200) {
      throw capstanError(res.status >= 500 ? 'ERR_UPSTREAM' : 'ERR_UPSTREAM_REJECTED', `renewal answered ${res.status}: ${res.body.toString('utf8').slice(0, 200)}`);
    }
    const token = (JSON.parse(res.body.toString('utf8')) as { data?: { token?: unknown } }).data?.token;
    if (typeof token !== 'string' || decodeTimes(token) === null) throw capstanError('ERR_TOKEN_INVALID', 'renewal answer carries no token');
    await writeAtomic(this.path, `${token}\n`, 0o600);
    return token;
  }

  /**
   * When `token` is due for renewal (epoch ms): just past the point where a third of its life is
   * left, so that `current()` then renews it. Null for a token that does not decode.
   */
  renewalDue(token: string): number | null {
    const t = decodeTimes(token);
    return t ? Math.floor((t.exp - (t.exp - t.iat) / 3) * 1000) + 1 : null;
  }

  /** Forget the token (the relay said it is no good): the next use renews. */
  async drop(): Promise<void> {
    await unlink(this.path).catch(() => {});
  }
}
