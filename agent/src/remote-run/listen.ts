/**
 * The agent's side of remote-run: one long-lived outbound request to the relay,
 * `GET /remote-run/listen/<node-id>`, whose answer is a stream of JSON lines (hello, heartbeats,
 * `run` events). The managed host opens no port; a trigger is one line on this connection. For
 * each run the agent streams its answer on `POST /remote-run/output/<channel>`: `started`, output
 * lines, `done` with the exit code, or `busy` when a run is already going.
 *
 * The connection is re-opened with exponential backoff and jitter when it drops, and declared
 * dead when no line (heartbeats included) arrived for three heartbeat periods.
 *
 * Relays require the node's identity token on this connection (Authorization: Bearer). The token
 * comes from `auth` (renewed by signed request when missing or due); a 401 from the relay (expired
 * by its clock, a key deleted at the server) renews it at once and reconnects without backoff.
 * A connection lives no longer than its token at the relay (which ends it with `bye`, reason
 * `token_expired`), so while connected the listener renews when the token is due (a third of its
 * life left) and reconnects with the new one; a renewal that fails is tried again later, and the
 * connection is kept meanwhile.
 *
 * node:http rather than undici, for the same reason as queue/http.ts (the agent's RSS).
 */
import http from 'node:http';
import https from 'node:https';
import { PassThrough } from 'node:stream';
import { capstanError } from '@capstan/shared/errors';
import { type Logger } from '@capstan/shared/log';
import { userAgent } from '@capstan/shared/protocol';
import { LineReader, parseEventLine, REMOTE_RUN_PROTOCOL } from '@capstan/shared/remote-run/protocol';
import { parseUpgradeRequest, type UpgradeRequest } from '@capstan/shared/upgrade';

export interface RunRequest {
  channel: string;
  conditions: string[];
  keepOutput: boolean;
  /** An upgrade job's request (patch campaigns), checked here again. */
  upgrade?: UpgradeRequest;
}

export interface RunOutput {
  line(text: string): void;
}

/** The node's token: the current one (renewed first when due; null when none can be had), or a new one now. */
export interface ListenAuth {
  current(): Promise<string | null>;
  renew(): Promise<string>;
  /** When this token is due for renewal (epoch ms); absent or null: never renewed while connected. */
  renewalDue?(token: string): number | null;
}

/** A failed renewal while connected is tried again after this long (the token still has life). */
export const RENEW_RETRY_MS = 60_000;
/** setTimeout's limit (about 24.8 days); a later due time is waited for in steps. */
const MAX_TIMER_MS = 2 ** 31 - 1;

export interface ListenOptions {
  relay: string;
  nodeId: string;
  log: Logger;
  /** Where the token comes from; absent: none is sent (a relay with require_token = false). */
  auth?: ListenAuth;
  /** Do the run; resolve with its exit code; throw ERR_CONFLICT when a run is already going. */
  run: (req: RunRequest, out: RunOutput) => Promise<number>;
  signal?: AbortSignal;
  /** Called each time the connection is (re)established (tests, logs). */
  onConnected?: () => void;
}

const CONDITION_RE = /^[a-zA-Z0-9][a-zA-Z0-9_]*$/;

function transport(url: URL): typeof http | typeof https {
  return url.protocol === 'https:' ? https : http;
}

/** Keep listening until `signal` aborts. */
export async function listen(opts: ListenOptions): Promise<void> {
  let delay = 1000;
  // Set after a renewal forced by a 401, cleared once a connection is accepted (its hello).
  let renewed = false;
  const once: ListenOptions = {
    ...opts,
    onConnected: () => {
      renewed = false;
      opts.onConnected?.();
    },
  };
  // Why the last connection ended, when it was about its token.
  let ended: Ended = undefined;
  while (!opts.signal?.aborted) {
    const connectedAt = Date.now();
    try {
      // The relay ended the connection because its token expired: renew now rather than reuse it
      // (by the agent's clock it may still look fresh).
      const token = ended === 'token_expired' && opts.auth
        ? await opts.auth.renew().catch((e: unknown) => {
          opts.log.warn({ err: (e as Error).message }, 'identity token not renewed');
          return null;
        })
        : null;
      ended = await listenOnce(once, token ?? (await opts.auth?.current().catch(() => null)) ?? null);
      // Renewed while connected: come back at once with the new token.
      if (ended === 'renewed') continue;
      if (ended === 'token_expired' && !renewed) {
        renewed = true;
        continue;
      }
    } catch (err) {
      ended = undefined;
      if (opts.signal?.aborted) return;
      // Refused token: renew by signed request and come back at once — once; a relay that still
      // refuses the fresh token gets the normal backoff.
      if ((err as { status?: number }).status === 401 && opts.auth && !renewed) {
        renewed = true;
        const fresh = await opts.auth.renew().then(() => true, (e: unknown) => {
          opts.log.warn({ err: (e as Error).message }, 'identity token not renewed');
          return false;
        });
        if (fresh) {
          opts.log.info({ relay: opts.relay }, 'relay refused the identity token; renewed it');
          continue;
        }
      }
      opts.log.warn({ err: (err as Error).message }, 'remote-run connection to the relay failed');
    }
    if (opts.signal?.aborted) return;
    // A connection that lived a while was fine: come back quickly. Otherwise back off.
    if (Date.now() - connectedAt > 60_000) delay = 1000;
    const wait = Math.round(delay / 2 + Math.random() * (delay / 2));
    delay = Math.min(delay * 2, 60_000);
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, wait);
      opts.signal?.addEventListener('abort', () => {
        clearTimeout(timer);
        resolve();
      }, { once: true });
    });
  }
}

/**
 * One connection. The agent asks for `Upgrade: capstan-remote-run`: the relay then keeps only a
 * bare socket for it (an idle agent costs the relay a few kB). A relay that answers 200 instead
 * streams the same lines in the response body; both are read the same way.
 */
type Ended = 'renewed' | 'token_expired' | undefined;

function listenOnce(opts: ListenOptions, token: string | null): Promise<Ended> {
  const url = new URL(`${opts.relay.replace(/\/+$/, '')}/remote-run/listen/${encodeURIComponent(opts.nodeId)}`);
  return new Promise((resolve, reject) => {
    const req = transport(url).request(url, {
      method: 'GET',
      headers: {
        'user-agent': userAgent('capstan-agent'),
        connection: 'Upgrade',
        upgrade: REMOTE_RUN_PROTOCOL,
        ...(token ? { authorization: `Bearer ${token}` } : {}),
      },
      signal: opts.signal,
    });
    const consume = (stream: NodeJS.ReadableStream & { destroy(err?: Error): void; readonly destroyed: boolean }, head?: Buffer) => {
      let heartbeatMs = 30_000;
      let deadline: NodeJS.Timeout | null = null;
      let renewal: NodeJS.Timeout | null = null;
      let why: Ended;
      const alive = () => {
        if (deadline) clearTimeout(deadline);
        deadline = setTimeout(() => stream.destroy(new Error('no heartbeat from the relay')), heartbeatMs * 3 + 5_000);
      };
      // Renew when due, while this connection goes on; reconnect only once a new token is held.
      const scheduleRenewal = (at: number) => {
        renewal = setTimeout(() => {
          renewal = null;
          if (Date.now() < at) return scheduleRenewal(at);
          void opts.auth!.current().catch(() => null).then((fresh) => {
            if (why !== undefined || stream.destroyed) return;
            if (fresh && fresh !== token) {
              why = 'renewed';
              opts.log.info({ relay: opts.relay }, 'identity token renewed; reconnecting with it');
              stream.destroy();
            } else {
              scheduleRenewal(Date.now() + RENEW_RETRY_MS);
            }
          });
        }, Math.min(Math.max(0, at - Date.now()), MAX_TIMER_MS));
        renewal.unref?.();
      };
      const onConnected = () => {
        const due = token && opts.auth?.renewalDue ? opts.auth.renewalDue(token) : null;
        if (due !== null && due !== undefined && !renewal) scheduleRenewal(due);
      };
      const onBye = (reason: unknown) => {
        if (reason === 'token_expired' && why === undefined) why = 'token_expired';
      };
      const lines = new LineReader();
      const onData = (chunk: Buffer) => {
        alive();
        for (const line of lines.push(chunk)) handleLine(opts, line, (ms) => (heartbeatMs = ms), onConnected, onBye);
      };
      const done = (err?: Error) => {
        if (deadline) clearTimeout(deadline);
        if (renewal) clearTimeout(renewal);
        // Our own close after a renewal is no failure, whatever the socket says.
        if (err && why !== 'renewed') reject(err);
        else resolve(why);
      };
      alive();
      if (head && head.length > 0) onData(head);
      stream.on('data', onData);
      stream.on('end', () => done());
      stream.on('error', (err: Error) => done(err));
      stream.on('close', () => done());
      opts.signal?.addEventListener('abort', () => stream.destroy(), { once: true });
    };
    req.on('upgrade', (_res, socket, head) => consume(socket, head));
    req.on('response', (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        const status = res.statusCode ?? 0;
        const code = status === 401 ? 'ERR_TOKEN_INVALID' : status === 403 ? 'ERR_TOKEN_WRONG_NODE' : 'ERR_UPSTREAM';
        reject(Object.assign(capstanError(code, `relay answered ${status}`), { status }));
        return;
      }
      consume(res);
    });
    req.on('error', reject);
    req.end();
  });
}

let running = false;

function handleLine(
  opts: ListenOptions, line: string, setHeartbeat: (ms: number) => void, connected: () => void, bye: (reason: unknown) => void,
): void {
  const ev = parseEventLine(line);
  if (!ev) return;
  if (ev.type === 'hello') {
    if (typeof ev.heartbeat_ms === 'number' && ev.heartbeat_ms > 0) setHeartbeat(ev.heartbeat_ms);
    opts.log.info({ relay: opts.relay }, 'listening for remote runs');
    connected();
    opts.onConnected?.();
    return;
  }
  if (ev.type === 'bye') {
    bye(ev.reason);
    return;
  }
  if (ev.type !== 'run' || typeof ev.id !== 'string') return;
  // The relay validated them; check again, a relay is not trusted to shape our command line.
  const conditions = Array.isArray(ev.conditions) ? ev.conditions.filter((c): c is string => typeof c === 'string' && CONDITION_RE.test(c)) : [];
  let upgrade: UpgradeRequest | undefined;
  try {
    if (ev.upgrade !== undefined) upgrade = parseUpgradeRequest(ev.upgrade);
  } catch (err) {
    void answer(opts, { channel: ev.id, conditions, keepOutput: false }, `upgrade refused: ${(err as Error).message}`);
    return;
  }
  void answer(opts, { channel: ev.id, conditions, keepOutput: ev.keep_output === true, ...(upgrade && { upgrade }) });
}

async function answer(opts: ListenOptions, req: RunRequest, refused?: string): Promise<void> {
  const url = new URL(`${opts.relay.replace(/\/+$/, '')}/remote-run/output/${encodeURIComponent(req.channel)}`);
  const body = new PassThrough();
  const send = (ev: object) => body.write(`${JSON.stringify({ node: opts.nodeId, ...ev })}\n`);
  const post = transport(url).request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/x-ndjson', 'user-agent': userAgent('capstan-agent'), 'transfer-encoding': 'chunked' },
  });
  post.on('response', (res) => res.resume());
  post.on('error', (err) => opts.log.warn({ err: err.message }, 'cannot send remote-run output'));
  body.pipe(post);
  if (refused !== undefined) {
    send({ type: 'error', text: refused });
    body.end();
    return;
  }
  if (running) {
    send({ type: 'busy' });
    body.end();
    return;
  }
  running = true;
  opts.log.info({ conditions: req.conditions }, 'remote run');
  send({ type: 'started' });
  try {
    const code = await opts.run(req, { line: (text) => send({ type: 'line', text }) });
    send({ type: 'done', code });
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === 'ERR_CONFLICT') send({ type: 'busy' });
    else send({ type: 'error', text: (err as Error).message });
  } finally {
    running = false;
    body.end();
  }
}
