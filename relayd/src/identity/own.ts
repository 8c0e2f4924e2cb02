/**
 * The relay's own identity: a relay is a node, with its own key and `UID=<general.node_id>`
 * certificate (made once, kept 0600 like an agent's; shared/identity/state.ts) and, once an admin
 * registered it at the server as a relay, a token with `capstan_role: "relay"`, which it gets and
 * renews with the signed request agents use (shared/identity/keeper.ts), passed up through its
 * upstream client (TLS pinning, CA). The token goes on what only a relay may do: its remote-run
 * link and output posts, and the providers endpoints.
 *
 * Loaded only by relays that need it (remote_run.link_upstream, providers.enabled, --identity):
 * S/MIME signing brings node-forge, which a relay that only forwards bytes does not load.
 */
import { EventEmitter } from 'node:events';
import { dirname, join } from 'node:path';
import type { decodeTokenTimes, NodeTokenKeeper } from '@capstan/shared/identity/keeper';
import type { NodeKeyPair } from '@capstan/shared/identity/state';
import { makeDir } from '@capstan/shared/dir';
import { capstanError } from '@capstan/shared/errors';
import { type Logger } from '@capstan/shared/log';
import { HEADER_PROTOCOL, PROTOCOL_VERSION } from '@capstan/shared/protocol';
import type { RelaydConfig } from '../config.js';
import type { Upstream } from '../forward/upstream.js';

/** After a refusal (401), the token is renewed at once, but not more often than this. */
export const MIN_FORCED_RENEWAL_MS = 5_000;
/** A renewal that failed is tried again this often (the link and posts also renew when they need it). */
export const RENEWAL_RETRY_MS = 30_000;

export interface RelayKeyFiles {
  keyPath: string;
  certPath: string;
  tokenPath: string;
}

export function relayKeyFiles(config: Pick<RelaydConfig, 'identity' | 'spool'>): RelayKeyFiles {
  const dir = config.spool.directory;
  return {
    keyPath: config.identity.key_file || join(dir, 'relay.key'),
    certPath: config.identity.cert_file || join(dir, 'relay.cert'),
    tokenPath: config.identity.token_file || join(dir, 'relay.token'),
  };
}

/** Whether this relay calls what only a relay may do, and so needs its own token. */
export function needsRelayToken(config: Pick<RelaydConfig, 'remote_run' | 'providers' | 'bootstrap'>): boolean {
  return (config.remote_run.enabled && config.remote_run.link_upstream) || config.providers.enabled || config.bootstrap.enabled;
}

/** The relay's key and certificate: read, or made (key 0600) when absent. */
export async function ensureRelayKey(config: Pick<RelaydConfig, 'general' | 'identity' | 'spool'>): Promise<NodeKeyPair> {
  const { ensureNodeKeyPair } = await import('@capstan/shared/identity/state');
  const files = relayKeyFiles(config);
  // `--identity` may run before the relay's first start made its spool directory.
  for (const p of [files.keyPath, files.certPath]) await makeDir(dirname(p), 0o750);
  return ensureNodeKeyPair(config.general.node_id, { keyPath: files.keyPath, certPath: files.certPath }, config.identity.key_bits);
}

export interface RelayTokenOptions {
  config: RelaydConfig;
  upstream: Upstream;
  log: Logger;
  clock?: () => Date;
}

/**
 * The relay's token: `authorization()` gives the header to send (renewing first when due),
 * `refused()` says the upstream answered 401 to it (renew at once, rate-limited). Emits
 * 'renewed' (token) when a new token is kept, so the link reconnects with it.
 */
export class RelayToken extends EventEmitter {
  private timer: NodeJS.Timeout | null = null;
  private suspect = false;
  private lastForced = -Infinity;
  private warnedRole = false;
  private stopped = false;
  private held: string | null = null;
  private inFlight: Promise<string | null> | null = null;

  private constructor(
    private readonly keeper: NodeTokenKeeper,
    private readonly decode: typeof decodeTokenTimes,
    private readonly o: RelayTokenOptions & { clock: () => Date },
  ) {
    super();
  }

  static async open(o: RelayTokenOptions): Promise<RelayToken> {
    const clock = o.clock ?? (() => new Date());
    const pair = await ensureRelayKey(o.config);
    const { NodeTokenKeeper: Keeper, MAX_RENEW_ANSWER_BYTES, decodeTokenTimes: decode } = await import('@capstan/shared/identity/keeper');
    const timeoutMs = Math.min(o.config.upstream.timeout, 30_000);
    const keeper = new Keeper({
      file: relayKeyFiles(o.config).tokenPath,
      nodeId: o.config.general.node_id,
      id: pair,
      log: o.log,
      clock,
      peer: 'upstream',
      post: async (body) => {
        const res = await o.upstream.request({
          method: 'POST', path: '/identity/renew', body, timeoutMs,
          headers: { 'content-type': 'application/pkcs7-mime', [HEADER_PROTOCOL]: PROTOCOL_VERSION },
        });
        const answer = Buffer.from(await res.body.arrayBuffer());
        if (answer.length > MAX_RENEW_ANSWER_BYTES) throw capstanError('ERR_BODY_TOO_LARGE', `renewal answer is larger than ${MAX_RENEW_ANSWER_BYTES} bytes`);
        return { status: res.statusCode, body: answer };
      },
    });
    return new RelayToken(keeper, decode, { ...o, clock });
  }

  /** `{authorization: 'Bearer …'}`, or `{}` while the server issues this relay no token. */
  async authorization(): Promise<Record<string, string>> {
    const token = await this.token();
    return token ? { authorization: `Bearer ${token}` } : {};
  }

  /** The upstream refused the token (401): the next use renews it first. */
  refused(): void {
    this.suspect = true;
  }

  private async token(): Promise<string | null> {
    // One renewal at a time: the link, the providers and the timer may all ask at once.
    this.inFlight ??= this.fetch().finally(() => {
      this.inFlight = null;
    });
    return this.inFlight;
  }

  private async fetch(): Promise<string | null> {
    let token: string | null;
    const now = this.o.clock().getTime();
    if (this.suspect && now - this.lastForced >= MIN_FORCED_RENEWAL_MS) {
      this.suspect = false;
      this.lastForced = now;
      token = await this.keeper.renew().catch(async (err: unknown) => {
        this.o.log.warn({ err }, 'relay token not renewed');
        // A token with life left is still worth showing: the refusal may have been the upstream's mistake.
        const kept = await this.keeper.stored();
        return kept && kept.exp * 1000 > this.o.clock().getTime() ? kept.token : null;
      });
    } else {
      token = await this.keeper.current();
    }
    this.kept(token);
    return token;
  }

  /** Book-keeping for a token in hand: the role check, the 'renewed' event, the next renewal. */
  private kept(token: string | null): void {
    if (token === this.held) return;
    const previous = this.held;
    this.held = token;
    if (!token) return;
    const role = this.decode(token)?.role;
    if (role !== 'relay' && !this.warnedRole) {
      this.warnedRole = true;
      this.o.log.warn({ nodeId: this.o.config.general.node_id },
        'the server issued this relay a token without the relay role: register it as a relay (capstan-server nodes set-relay <id> on, or PATCH /api/1/nodes/<id> {"relay": true})');
    } else if (role === 'relay') {
      this.warnedRole = false;
    }
    this.schedule(token);
    if (previous !== null) this.emit('renewed', token);
  }

  /** Renew when a third of the token's life is left, even when nothing uses it meanwhile. */
  private schedule(token: string): void {
    if (this.stopped) return;
    if (this.timer) clearTimeout(this.timer);
    const due = this.keeper.renewalDue(token);
    const wait = due === null ? RENEWAL_RETRY_MS : Math.min(Math.max(due - this.o.clock().getTime(), 1000), 0x7fffffff);
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.token().then((t) => {
        // Still the same token (the renewal failed): try again later.
        if (t === token || t === null) this.retryLater();
      });
    }, wait);
    this.timer.unref();
  }

  private retryLater(): void {
    if (this.stopped || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.token().then((t) => {
        if (t === null || this.keeper.renewalDue(t)! <= this.o.clock().getTime()) this.retryLater();
      });
    }, RENEWAL_RETRY_MS);
    this.timer.unref();
  }

  /** Get a token now (at start: the link and the providers need one) and keep it renewed. */
  async start(): Promise<void> {
    const t = await this.token();
    if (t === null) this.retryLater();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }
}
