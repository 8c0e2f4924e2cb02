/**
 * Admin API: the event stream (docs/events.md). `GET /api/1/events?after=<id>` answers the events
 * after that id, oldest first; with `wait=<seconds>` it waits for the first one when there is none
 * yet (long-poll); with `Accept: text/event-stream` it is a Server-Sent Events stream that goes on
 * (resumed after `Last-Event-ID`). Nodes are chosen with the filter language (`q`) or by id.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import type { EventService } from '../../events/service.js';
import { isTypePattern } from '../../events/types.js';
import { EVENT_SEVERITIES, MAX_EVENTS_READ, type EventQuery, type EventRecord, type EventSeverity } from '../../reads.js';
import { intParam, single, type Query } from '../params.js';

const bad = (message: string): never => {
  throw capstanError('ERR_BAD_REQUEST', message);
};

const KNOWN = ['after', 'type', 'min_severity', 'node', 'q', 'limit', 'wait'];
/** A stream's comment line this often keeps proxies from closing a quiet connection. */
const HEARTBEAT_MS = 15_000;

const values = (q: Query, name: string): string[] | undefined => {
  const v = q[name];
  if (v === undefined) return undefined;
  return (Array.isArray(v) ? v : [v]).flatMap((s) => s.split(',')).filter((s) => s.length > 0);
};

/** An event query from the query string (`after` also from a stream's Last-Event-ID). */
export function eventQuery(q: Query, lastEventId?: string): EventQuery & { after: number } {
  const unknown = Object.keys(q).filter((k) => !KNOWN.includes(k));
  if (unknown.length) bad(`unknown parameter ${unknown[0]}`);
  const after = lastEventId ?? single(q, 'after') ?? '0';
  if (!/^\d{1,15}$/.test(after)) bad('after must be an event id (an integer ≥ 0)');
  const types = values(q, 'type');
  for (const t of types ?? []) if (!isTypePattern(t)) bad(`${JSON.stringify(t)} is not an event type (docs/events.md), nor a type prefix such as node.*`);
  const sev = single(q, 'min_severity');
  if (sev !== undefined && !EVENT_SEVERITIES.includes(sev as EventSeverity)) bad(`min_severity must be one of ${EVENT_SEVERITIES.join(', ')}`);
  const nodes = values(q, 'node');
  const expr = single(q, 'q');
  return {
    after: Number(after), ...(types && { types }), ...(sev !== undefined && { min_severity: sev as EventSeverity }),
    ...(nodes && { node_ids: nodes }), ...(expr !== undefined && { filters: [{ key: 'q', values: [expr] }] }),
  };
}

export function eventRoutes(app: FastifyInstance, events: EventService): void {
  app.get<{ Querystring: Query }>('/api/1/events', async (req, reply) => {
    const stream = /\btext\/event-stream\b/.test(req.headers.accept ?? '');
    const last = req.headers['last-event-id'];
    const q = eventQuery(req.query, stream && typeof last === 'string' && last !== '' ? last : undefined);
    const limit = intParam(req.query, 'limit', 100, MAX_EVENTS_READ);
    if (stream) {
      if (req.query.wait !== undefined) bad('wait is for long-polls: a stream waits as long as it is open');
      // Checked now, so a refused query or a full house answers with an error, not a broken stream.
      await events.read(q, 1);
      return streamEvents(req, reply, events, q, limit);
    }
    const wait = req.query.wait === undefined ? 0 : intParam(req.query, 'wait', 0, Math.ceil(events.maxWaitMs / 1000)) * 1000;
    const ac = new AbortController();
    req.raw.once('close', () => ac.abort());
    const data = await events.wait(q, limit, wait, ac.signal);
    // The cursor to send next: the last id answered, else the one asked with.
    return { data, total: data.length, next_after: data.at(-1)?.id ?? q.after };
  });
}

function streamEvents(req: FastifyRequest, reply: FastifyReply, events: EventService, q: EventQuery & { after: number }, limit: number): Promise<void> {
  return events.hold(async (waiter) => {
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store', connection: 'keep-alive', 'x-accel-buffering': 'no' });
    res.write(': capstan event stream\n\n');
    const ac = new AbortController();
    req.raw.once('close', () => ac.abort());
    const beat = setInterval(() => res.write(': keep-alive\n\n'), HEARTBEAT_MS);
    const send = (list: EventRecord[]) => {
      let out = '';
      for (const e of list) out += `id: ${e.id}\nevent: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`;
      res.write(out);
    };
    let after = q.after;
    try {
      while (!ac.signal.aborted) {
        const seen = events.latest;
        const got = await events.read({ ...q, after }, limit);
        if (got.length > 0) {
          send(got);
          after = got.at(-1)!.id;
          if (got.length === limit) continue;
        }
        // Events up to `seen` were all read (none or these were the stream's): sleep until newer ones.
        waiter.after = Math.max(after, seen);
        // Woken by a newer event (or a heartbeat's worth of time): then read again.
        await events.sleep(waiter, HEARTBEAT_MS, ac.signal);
        if (events.isClosed) break;
      }
    } catch (err) {
      res.write(`event: error\ndata: ${JSON.stringify({ code: (err as { code?: string }).code ?? 'ERR_INTERNAL' })}\n\n`);
    } finally {
      clearInterval(beat);
      res.end();
    }
  });
}
