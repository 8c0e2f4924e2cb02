/**
 * The server's side of the remote-run link, the endpoints relayd's UpstreamLink speaks to its
 * upstream (relayd/src/remote-run/link.ts), so a top-level relay links to the server exactly as
 * a sub-relay links to its relay:
 *   GET  /remote-run/listen/<relay-id>?relay=1   long-lived; `Upgrade: capstan-remote-run` (101,
 *        a bare socket) or a streamed 200 answer of JSON lines: hello, pings, run events
 *   POST /remote-run/output/<channel>            the relay's answer to one run (JSON lines)
 * Only relays link here (`relay=1`): agents hold their connection to a relay, which checks
 * their identity. Both endpoints need the relay's own token (identity/relay-auth.ts): on the link,
 * a relay token naming the relay in the path, and the link ends when that token does; on an
 * output post, the token of the relay the channel was handed to (a channel id is a random UUID
 * sent on that relay's connection only). `[identity] require_relay_token = false` lifts both
 * checks, for relays too old to send a token.
 *
 * A relay holding its link is heard from (registry/relay-contacts.ts): a contact when the
 * authorizer lets the link in, and one per beat while it lasts, so a linked relay stays
 * reachable. Links let in without a token record nothing.
 */
import { STATUS_CODES, type IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { capstanError, errorBody, isCapstanError } from '@capstan/shared/errors';
import type { Logger } from '@capstan/shared/log';
import type { RelayAuthorizer } from '../../identity/relay-auth.js';
import type { JobRunner } from '../../jobs/runner.js';
import type { RelayConn, RelayHub } from '../../remote-run/relay-links.js';
import { acceptStream, acceptUpgrade, listenRequest, refuseUpgrade } from '@capstan/toolkit/remote-run/conn-hub';
import { eventLine, jsonLines } from '@capstan/shared/remote-run/protocol';

const RELAY_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$/;

export interface RemoteRunDeps {
  hub: RelayHub;
  runner: JobRunner;
  log: Logger;
  nodeId: string;
  heartbeatMs: number;
  /** Relay tokens required (identity.require_relay_token); absent: any caller may link and answer. */
  authorizeRelay?: RelayAuthorizer;
}

/** Refuse an upgrade with the coded JSON error an HTTP request would get. */
function refuseWithError(socket: Duplex, err: unknown, log: Logger): void {
  const status = isCapstanError(err) ? err.statusCode : 500;
  if (!isCapstanError(err)) log.error({ err }, 'relay token check failed');
  const text = JSON.stringify(errorBody(err));
  socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`);
}

export function remoteRunRoutes(app: FastifyInstance, deps: RemoteRunDeps): void {
  const { hub } = deps;
  const hello = (relay: string) => eventLine({ type: 'hello', node: relay, relay: deps.nodeId, heartbeat_ms: deps.heartbeatMs });
  const authorize = deps.authorizeRelay;
  const link = (id: string, conn: RelayConn, until?: number): void => {
    if (!hub.add({ id, since: Date.now(), conn, ...(until !== undefined && { until }) })) {
      conn.end(eventLine({ type: 'bye', reason: 'full' }));
      return;
    }
    conn.write(hello(id));
    deps.log.info({ relay: id }, 'relay linked for remote runs');
    conn.onClose(() => deps.log.info({ relay: id }, 'relay link closed'));
  };

  app.get<{ Params: { id: string }; Querystring: { relay?: string } }>('/remote-run/listen/:id', async (req, reply) => {
    const id = req.params.id;
    if (!RELAY_ID_RE.test(id)) throw capstanError('ERR_BAD_REQUEST', `invalid relay id: ${id}`);
    if (req.query.relay !== '1') throw capstanError('ERR_NOT_FOUND', 'agents hold their remote-run connection to a relay');
    const grant = authorize ? await authorize(req.headers.authorization, id) : undefined;
    reply.hijack();
    link(id, acceptStream(req.raw, reply.raw), grant?.until);
  });

  app.server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const want = listenRequest(req);
    if ('status' in want) return refuseUpgrade(socket, want.status, want.text);
    if (!RELAY_ID_RE.test(want.id)) return refuseUpgrade(socket, 400, `invalid relay id: ${want.id}`);
    if (!want.relay) return refuseUpgrade(socket, 404, 'agents hold their remote-run connection to a relay');
    if (!authorize) return link(want.id, acceptUpgrade(socket, head));
    authorize(req.headers.authorization, want.id).then((grant) => {
      if (!socket.destroyed) link(want.id, acceptUpgrade(socket, head), grant.until);
    }, (err: unknown) => refuseWithError(socket, err, deps.log));
  });

  app.post<{ Params: { channel: string } }>('/remote-run/output/:channel', async (req, reply) => {
    if (authorize) {
      // Any relay's token first (401 before anything is said about channels), then the channel's.
      const grant = await authorize(req.headers.authorization);
      const owner = deps.runner.channelRelay(req.params.channel);
      if (owner !== undefined && owner !== grant.relay) {
        throw capstanError('ERR_TOKEN_WRONG_NODE', `this run was handed to relay ${owner}, not to ${grant.relay}`);
      }
    }
    const known = await deps.runner.output(req.params.channel, jsonLines(req.raw), () => req.raw.destroy());
    if (!known) throw capstanError('ERR_NOT_FOUND', 'no such remote-run channel');
    return reply.code(200).send({ data: { channel: req.params.channel } });
  });
}
