/**
 * Remote-run, RUDDER's trigger API plus the agent side that replaces cf-serverd's inbound port:
 *
 *   POST /rudder/relay-api/1/remote-run/nodes/<id> | nodes (form `nodes=a,b`) | all
 *        form (≤ 1 MiB, Content-Length required): asynchronous, keep_output (true|false),
 *        conditions (comma list of ^[a-zA-Z0-9][a-zA-Z0-9_]*$, or the old alias `classes`).
 *        Loopback or admin token only. Answer: text lines `<node>: <output>` and
 *        `<node>: [started|done, exit N|busy|offline|error: …]`.
 *        async+keep → streamed as they come; async → at once, empty; sync+keep → all at the end;
 *        sync → status lines at the end.
 *   GET  /remote-run/listen/<node-id>[?relay=1]   an agent's (or sub-relay's) long-lived connection
 *   POST /remote-run/output/<channel>              its answer to one run event (JSON lines); a
 *        sub-relay's answer needs its relay token (identity.require_relay_token), like its link
 */
import type { IncomingMessage } from 'node:http';
import { PassThrough, type Duplex } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import { adminOnly } from '../access.js';
import type { RelayContext } from '../context.js';
import { readBody, rudderText, sendText } from '../rudder-text.js';
import type { Run, RunEvent } from '../../remote-run/dispatch.js';
import { eventLine, jsonLines } from '@capstan/shared/remote-run/protocol';
import { acceptStream, acceptUpgrade, listenRequest, refuseUpgrade } from '@capstan/toolkit/remote-run/conn-hub';
import { tokenDeadline, tokenIssuedAt } from '../../identity/routes.js';
import { RELAY_ROLE } from '@capstan/shared/identity/token';

export const CONDITION_RE = /^[a-zA-Z0-9][a-zA-Z0-9_]*$/;
const NODE_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$/;
const MAX_FORM = 1024 * 1024;
/** A synchronous answer with output is buffered; beyond this the output is cut (statuses are kept). */
const MAX_SYNC_OUTPUT = 16 * 1024 * 1024;

export interface RunForm {
  asynchronous: boolean;
  keepOutput: boolean;
  conditions: string[];
  nodes?: string[];
}

function parseBool(name: string, v: string | null): boolean {
  if (v === null) return false;
  if (v === 'true') return true;
  if (v === 'false') return false;
  throw capstanError('ERR_BAD_REQUEST', `invalid value for ${name}: ${v}, should be true or false`);
}

function parseIds(text: string): string[] {
  const ids = text.split(',').map((s) => s.trim()).filter((s) => s !== '');
  for (const id of ids) if (!NODE_ID_RE.test(id)) throw capstanError('ERR_BAD_REQUEST', `invalid node id: ${id}`);
  return ids;
}

/** The form RUDDER takes, with its validation (tests/remote_run.rs error texts). */
export function parseRunForm(body: string, needNodes: boolean): RunForm {
  const f = new URLSearchParams(body);
  const raw = f.get('conditions') ?? f.get('classes') ?? '';
  const conditions = raw.split(',').filter((c) => c !== '');
  for (const c of conditions) {
    if (c.length > 1024 || !CONDITION_RE.test(c)) {
      throw capstanError('ERR_BAD_REQUEST', `invalid condition: ${c}, should match ${CONDITION_RE.source}`);
    }
  }
  const form: RunForm = {
    asynchronous: parseBool('asynchronous', f.get('asynchronous')),
    keepOutput: parseBool('keep_output', f.get('keep_output')),
    conditions,
  };
  if (needNodes) {
    const nodes = f.get('nodes');
    if (nodes === null || nodes.trim() === '') throw capstanError('ERR_BAD_REQUEST', 'Missing nodes');
    form.nodes = parseIds(nodes);
  }
  return form;
}

export function formatEvent(ev: RunEvent): string {
  switch (ev.type) {
    case 'line':
      return `${ev.node}: ${ev.text ?? ''}\n`;
    case 'done':
      return `${ev.node}: [done, exit ${ev.code ?? 0}]\n`;
    case 'busy':
      return `${ev.node}: [busy: a run is already in progress]\n`;
    case 'error':
      return `${ev.node}: [error: ${ev.text ?? 'unknown'}]\n`;
    default:
      return `${ev.node}: [${ev.type}]\n`;
  }
}

function answer(run: Run, form: RunForm, reply: FastifyReply): FastifyReply {
  reply.code(200).type('text/plain; charset=utf-8').header('x-capstan-run', run.id);
  if (form.asynchronous && !form.keepOutput) return reply.send('');
  if (form.asynchronous) {
    const out = new PassThrough();
    run.on('event', (ev: RunEvent) => out.write(formatEvent(ev)));
    run.once('end', () => out.end());
    return reply.send(out);
  }
  return new Promise<string>((resolve) => {
    let text = '';
    let cut = false;
    run.on('event', (ev: RunEvent) => {
      if (ev.type === 'line' && !form.keepOutput) return;
      const line = formatEvent(ev);
      if (ev.type === 'line' && text.length + line.length > MAX_SYNC_OUTPUT) {
        if (!cut) text += `${ev.node}: [output cut at ${MAX_SYNC_OUTPUT} bytes]\n`;
        cut = true;
        return;
      }
      text += line;
    });
    run.once('end', () => resolve(text));
  }).then((text) => reply.send(text)) as unknown as FastifyReply;
}

export function remoteRunRoutes(app: FastifyInstance, ctx: RelayContext): void {
  const enabled = ctx.config.remote_run.enabled;
  const rr = ctx.remoteRun;
  const api = '/rudder/relay-api/1/remote-run';
  const preHandler = adminOnly(ctx.adminToken, ctx.loopbackIsAdmin ?? true);

  const trigger = (targets: (req: FastifyRequest<{ Params: { id?: string } }>, form: RunForm) => string[] | 'all', needNodes: boolean) =>
    rudderText(ctx.log, async (req: FastifyRequest<{ Params: { id?: string } }>, reply) => {
      if (!enabled) return sendText(reply, 404);
      const form = parseRunForm((await readBody(req, MAX_FORM)).toString('utf8'), needNodes);
      const run = rr.start({ targets: targets(req, form), conditions: form.conditions, keepOutput: form.keepOutput });
      ctx.log.info({ run: run.id, targets: run.req.targets, conditions: form.conditions }, 'remote run');
      return answer(run, form, reply);
    });

  app.post<{ Params: { id?: string } }>(`${api}/nodes/:id`, { preHandler }, trigger((req) => parseIds(req.params.id ?? ''), false));
  app.post<{ Params: { id?: string } }>(`${api}/nodes`, { preHandler }, trigger((_req, form) => form.nodes!, true));
  app.post<{ Params: { id?: string } }>(`${api}/all`, { preHandler }, trigger(() => 'all', false));

  const knows = async (node: string): Promise<boolean> => (ctx.knowsNode ? ctx.knowsNode(node) : ctx.nodes().accepts(node));

  app.get<{ Params: { node: string }; Querystring: { relay?: string } }>('/remote-run/listen/:node', async (req, reply) => {
    const node = req.params.node;
    if (!enabled) return sendText(reply, 404);
    if (!NODE_ID_RE.test(node)) return sendText(reply, 400, `invalid node id: ${node}`);
    if (!(await knows(node))) return sendText(reply, 404, `node ${node} is not in this relay's nodes list`);
    if (rr.hub.size >= rr.hub.maxPeers && !rr.hub.get(node)) {
      return sendText(reply.header('retry-after', '30'), 503, 'too many remote-run connections');
    }
    reply.hijack();
    const conn = acceptStream(req.raw, reply.raw);
    const until = tokenDeadline(req.raw);
    const iat = tokenIssuedAt(req.raw);
    const added = rr.hub.add({
      id: node, relay: req.query.relay === '1', since: Date.now(), conn, ...(until !== undefined && { until }), ...(iat !== undefined && { iat }),
    });
    if (!added) {
      conn.end(eventLine({ type: 'bye', reason: 'full' }));
      return;
    }
    conn.write(eventLine({ type: 'hello', node, relay: ctx.config.general.node_id, heartbeat_ms: ctx.config.remote_run.heartbeat }));
    ctx.log.debug({ node }, 'remote-run connection');
  });

  // The same connection over `Upgrade: capstan-remote-run`: answered 101 and kept as a bare socket.
  app.server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const fail = (status: number, text: string) => refuseUpgrade(socket, status, text);
    const want = listenRequest(req);
    if ('status' in want) return fail(want.status, want.text === 'invalid id' ? 'invalid node id' : want.text);
    if (!enabled) return fail(404, 'NOT FOUND');
    const node = want.id;
    if (!NODE_ID_RE.test(node)) return fail(400, `invalid node id: ${node}`);
    const accept = (): void => {
      if (rr.hub.size >= rr.hub.maxPeers && !rr.hub.get(node)) return fail(503, 'too many remote-run connections');
      const conn = acceptUpgrade(socket, head);
      // The node token it was let in with (identity/routes.ts) bounds its life.
      const until = tokenDeadline(req);
      const iat = tokenIssuedAt(req);
      if (!rr.hub.add({ id: node, relay: want.relay, since: Date.now(), conn, ...(until !== undefined && { until }), ...(iat !== undefined && { iat }) })) {
        conn.end(eventLine({ type: 'bye', reason: 'full' }));
        return;
      }
      conn.write(eventLine({ type: 'hello', node, relay: ctx.config.general.node_id, heartbeat_ms: ctx.config.remote_run.heartbeat }));
    };
    if (ctx.nodes().accepts(node)) return accept();
    // Unknown here: maybe accepted since the last sync. Hold the socket while the list refreshes.
    void knows(node).then((ok) => {
      if (socket.destroyed) return;
      if (!ok) return fail(404, `node ${node} is not in this relay's nodes list`);
      accept();
    });
  });

  app.post<{ Params: { channel: string } }>('/remote-run/output/:channel', async (req, reply) => {
    if (!enabled) return sendText(reply, 404);
    // A sub-relay answers for the nodes behind it: only with its own relay token (an agent's
    // channel is its own random id, sent on its own connection).
    const peer = rr.channelPeer(req.params.channel);
    if (peer?.relay && ctx.identity && ctx.identity.requireRelayToken !== false) {
      await ctx.identity.verifier.verify(req.headers.authorization, peer.id, RELAY_ROLE);
    }
    const known = await rr.output(req.params.channel, jsonLines(req.raw));
    if (!known) return sendText(reply, 404);
    return reply.code(200).send({ data: { channel: req.params.channel } });
  });
}
