/**
 * RUDDER's plain-text answers for the relay API routes that are not JSON (shared-files,
 * shared-folder, remote-run), as R/src/api.rs `customize_error` maps them: 404 `NOT FOUND`,
 * 400 with the reason, 411 `LENGTH REQUIRED`, 413 `PAYLOAD TOO LARGE`, anything else 500
 * `INTERNAL SERVER ERROR` (details only in the log). Existing curl runbooks compare these bodies.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { capstanError, isCapstanError, type Logger } from '../shared.js';

const TEXT: Record<number, string> = {
  404: 'NOT FOUND',
  411: 'LENGTH REQUIRED',
  413: 'PAYLOAD TOO LARGE',
  500: 'INTERNAL SERVER ERROR',
};

export function sendText(reply: FastifyReply, status: number, text = TEXT[status] ?? ''): FastifyReply {
  return reply.code(status).type('text/plain; charset=utf-8').send(text);
}

/** Wrap a handler so that a thrown error becomes RUDDER's text answer. */
export function rudderText<R extends FastifyRequest>(log: Logger, handler: (req: R, reply: FastifyReply) => Promise<unknown>) {
  return async (req: R, reply: FastifyReply): Promise<unknown> => {
    try {
      return await handler(req, reply);
    } catch (err) {
      const status = isCapstanError(err) ? err.statusCode : 500;
      if (status === 400 || status === 403) return sendText(reply, status, (err as Error).message);
      if (status === 404 || status === 411 || status === 413) return sendText(reply, status);
      log.error({ err, url: req.url }, 'relay api request failed');
      return sendText(reply, 500);
    }
  };
}

/**
 * Read a whole request body (installRawBodies leaves it unread), demanding a Content-Length
 * (411 without one) and refusing one over `max` before reading a byte (413).
 */
export async function readBody(req: FastifyRequest, max: number): Promise<Buffer> {
  const header = req.headers['content-length'];
  if (header === undefined) throw capstanError('ERR_LENGTH_REQUIRED', 'Content-Length is required');
  if (!/^\d{1,15}$/.test(header)) throw capstanError('ERR_BAD_REQUEST', 'Content-Length is not a number');
  const length = Number(header);
  if (length > max) throw capstanError('ERR_BODY_TOO_LARGE', `body of ${length} bytes exceeds the limit of ${max}`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req.raw as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > length) throw capstanError('ERR_BODY_TOO_LARGE', 'body is longer than its Content-Length');
    chunks.push(chunk);
  }
  if (size !== length) throw capstanError('ERR_BAD_REQUEST', `body has ${size} bytes, Content-Length said ${length}`);
  return Buffer.concat(chunks, size);
}
