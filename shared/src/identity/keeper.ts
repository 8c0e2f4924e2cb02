/**
 * A node's identity token on its own disk, for agents and relays alike: kept 0600, renewed with
 * a request signed by the node key when less than a third of its life is left, and never a
 * lockout — an expired or missing token is renewed the same way, because the signed request works
 * whatever the token's state. How the request travels (the agent's HTTP client, the relay's
 * upstream client with its TLS pinning) is the caller's `post`.
 */
import { readFile, unlink } from 'node:fs/promises';
import { capstanError, type ErrorCode } from '../errors.js';
import type { Logger } from '../log.js';
import { makeRenewRequest } from './renew.js';
import { tokenNeedsRenewal, type NodeRole } from './claims.js';
import { writeAtomic } from './state.js';

/** Largest renewal answer read (a token is well under 2 kB). */
export const MAX_RENEW_ANSWER_BYTES = 64 * 1024;

/** What a token says of itself, read without verifying it (the holder's own bookkeeping only). */
export interface TokenTimes {
  iat: number;
  exp: number;
  nodeId?: string;
  role?: NodeRole;
}

export function decodeTokenTimes(token: string): TokenTimes | null {
  try {
    const p = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8')) as Record<string, unknown>;
    if (typeof p.iat !== 'number' || typeof p.exp !== 'number') return null;
    return {
      iat: p.iat,
      exp: p.exp,
      ...(typeof p.capstan_node_id === 'string' && { nodeId: p.capstan_node_id }),
      ...(p.capstan_role === 'relay' && { role: 'relay' as const }),
    };
  } catch {
    return null;
  }
}

export interface RenewAnswer {
  status: number;
  body: Buffer;
}

export interface TokenKeeperOptions {
  /** Where the token is kept (0600). */
  file: string;
  nodeId: string;
  id: { keyPem: string; certPem: string };
  /** POST the signed renewal request to `/identity/renew` upstream; throws when unreachable. */
  post: (body: Buffer) => Promise<RenewAnswer>;
  log: Logger;
  clock: () => Date;
  /** Who answers renewals, for messages ("relay", "upstream"). */
  peer?: string;
}

/** What the server says of a node it will not issue a token to: registration, not failure. */
export type Enrollment = 'unknown' | 'pending' | 'refused';
const ENROLLMENT_CODES: Readonly<Partial<Record<ErrorCode, Enrollment>>> = {
  ERR_NODE_UNKNOWN: 'unknown', ERR_NODE_PENDING: 'pending', ERR_NODE_REFUSED: 'refused',
};

/** The coded error in an API answer's body, if it carries one. */
function answerError(body: Buffer): { code: string; message: string } | null {
  try {
    const e = (JSON.parse(body.toString('utf8')) as { error?: { code?: unknown; message?: unknown } }).error;
    return typeof e?.code === 'string' ? { code: e.code, message: typeof e.message === 'string' ? e.message : '' } : null;
  } catch {
    return null;
  }
}

export class NodeTokenKeeper {
  /** Set when the last renewal was refused because the node is not (yet) accepted. */
  enrollment: Enrollment | null = null;

  constructor(protected readonly k: TokenKeeperOptions) {}

  private async load(): Promise<{ token: string } & TokenTimes | null> {
    const token = (await readFile(this.k.file, 'utf8').catch(() => '')).trim();
    const times = token ? decodeTokenTimes(token) : null;
    return token && times ? { token, ...times } : null;
  }

  /** The kept token, whatever its age; null when none (or unreadable). */
  async stored(): Promise<({ token: string } & TokenTimes) | null> {
    return this.load();
  }

  /** The current token, renewed first when due; null when the server will not issue one (yet). */
  async current(): Promise<string | null> {
    const stored = await this.load();
    if (stored && !tokenNeedsRenewal(stored, this.k.clock())) return stored.token;
    try {
      return await this.renew();
    } catch (err) {
      // A node waiting for acceptance is the normal first state: said once, plainly, with no stack.
      if (this.enrollment === 'refused') this.k.log.warn({ code: (err as { code?: string }).code, reason: (err as Error).message }, 'identity token refused: the server refused this node');
      else if (this.enrollment) this.k.log.info({ code: (err as { code?: string }).code, reason: (err as Error).message }, 'no identity token yet: waiting for acceptance');
      else this.k.log.warn({ err }, 'identity token not renewed');
      // A token with life left still works; an expired one is useless and is dropped.
      if (stored && stored.exp * 1000 > this.k.clock().getTime()) return stored.token;
      return null;
    }
  }

  /** Whether a token is due: none kept, or less than a third of its life left. */
  async due(): Promise<boolean> {
    const stored = await this.load();
    return !stored || tokenNeedsRenewal(stored, this.k.clock());
  }

  /**
   * Keep a token handed over otherwise than by renewal (the answer to an inventory): it must be
   * this node's and not expired.
   */
  async accept(token: string): Promise<void> {
    const times = decodeTokenTimes(token);
    if (!times || times.nodeId !== this.k.nodeId || times.exp * 1000 <= this.k.clock().getTime()) {
      throw capstanError('ERR_TOKEN_INVALID', 'the token handed over is not a valid token of this node');
    }
    await writeAtomic(this.k.file, `${token}\n`, 0o600);
  }

  /** Ask for a new token with a request signed by the node key. */
  async renew(): Promise<string> {
    const peer = this.k.peer ?? 'upstream';
    const body = makeRenewRequest(this.k.id, this.k.nodeId, this.k.clock());
    let res: RenewAnswer;
    try {
      res = await this.k.post(body);
    } catch (err) {
      throw capstanError('ERR_UPSTREAM', `${peer} unreachable: ${(err as Error).message}`, { cause: err });
    }
    this.enrollment = null;
    if (res.status !== 200) {
      const answer = res.status < 500 ? answerError(res.body) : null;
      const enrollment = answer ? ENROLLMENT_CODES[answer.code as ErrorCode] : undefined;
      if (answer && enrollment) {
        this.enrollment = enrollment;
        throw capstanError(answer.code as ErrorCode, answer.message || `${peer} answered ${answer.code}`);
      }
      throw capstanError(res.status >= 500 ? 'ERR_UPSTREAM' : 'ERR_UPSTREAM_REJECTED', `renewal answered ${res.status}: ${res.body.toString('utf8').slice(0, 200)}`);
    }
    let token: unknown;
    try {
      token = (JSON.parse(res.body.toString('utf8')) as { data?: { token?: unknown } }).data?.token;
    } catch {
      token = undefined;
    }
    const times = typeof token === 'string' ? decodeTokenTimes(token) : null;
    if (typeof token !== 'string' || times === null) throw capstanError('ERR_TOKEN_INVALID', 'renewal answer carries no token');
    if (times.nodeId !== this.k.nodeId) throw capstanError('ERR_TOKEN_INVALID', `renewal answer carries a token of node ${String(times.nodeId)}`);
    await writeAtomic(this.k.file, `${token}\n`, 0o600);
    return token;
  }

  /**
   * When `token` is due for renewal (epoch ms): just past the point where a third of its life is
   * left, so that `current()` then renews it. Null for a token that does not decode.
   */
  renewalDue(token: string): number | null {
    const t = decodeTokenTimes(token);
    return t ? Math.floor((t.exp - (t.exp - t.iat) / 3) * 1000) + 1 : null;
  }

  /** Forget the token (the other side said it is no good): the next use renews. */
  async drop(): Promise<void> {
    await unlink(this.k.file).catch(() => {});
  }
}
