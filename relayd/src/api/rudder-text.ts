/**
 * Answers of the relay API routes whose successes are not JSON (shared-files, shared-folder,
 * remote-run). Their statuses are RUDDER's (R/src/api.rs `customize_error`): 400 with the
 * reason, 404, 411 without a Content-Length, 413, 500 with details only in the log. Their error
 * bodies are Capstan's coded JSON, `{"error":{"code","message"}}`, like every other answer, where
 * RUDDER sends plain text (`NOT FOUND`, `LENGTH REQUIRED`): scripts match on the code.
 */
import { STATUS_CODES } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { CapstanError, capstanError, errorBody, isCapstanError, type ErrorCode } from '@capstan/shared/errors';
import { type Logger } from '@capstan/shared/log';
import { requestBody } from '@capstan/toolkit/http/app';

/** The code an error status is answered with when the refusal has none of its own. */
const CODE_FOR: Record<number, ErrorCode> = {
  400: 'ERR_BAD_REQUEST',
  401: 'ERR_UNAUTHORIZED',
  403: 'ERR_FORBIDDEN',
  404: 'ERR_NOT_FOUND',
  411: 'ERR_LENGTH_REQUIRED',
  413: 'ERR_BODY_TOO_LARGE',
  502: 'ERR_UPSTREAM',
  503: 'ERR_BUSY',
};

/** A success as plain text, or an error status as the coded JSON error (message `text` or the status's name). */
export function sendText(reply: FastifyReply, status: number, text?: string): FastifyReply {
  if (status >= 400) {
    const code = CODE_FOR[status] ?? 'ERR_INTERNAL';
    const message = status >= 500 && code === 'ERR_INTERNAL' ? 'internal error' : text || (STATUS_CODES[status] ?? 'error').toLowerCase();
    return reply.code(status).type('application/json; charset=utf-8').send(errorBody(new CapstanError(code, message, { statusCode: status })));
  }
  return reply.code(status).type('text/plain; charset=utf-8').send(text ?? '');
}

/** Wrap a handler so that a thrown error becomes its coded answer with RUDDER's status. */
export function rudderText<R extends FastifyRequest>(log: Logger, handler: (req: R, reply: FastifyReply) => Promise<unknown>) {
  return async (req: R, reply: FastifyReply): Promise<unknown> => {
    try {
      return await handler(req, reply);
    } catch (err) {
      const status = isCapstanError(err) ? err.statusCode : 500;
      if (!req.raw.complete) reply.header('connection', 'close');
      if (isCapstanError(err) && status < 500) return reply.code(status).type('application/json; charset=utf-8').send(errorBody(err));
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
  for await (const chunk of requestBody(req)) {
    size += chunk.length;
    if (size > length) throw capstanError('ERR_BODY_TOO_LARGE', 'body is longer than its Content-Length');
    chunks.push(chunk);
  }
  if (size !== length) throw capstanError('ERR_BAD_REQUEST', `body has ${size} bytes, Content-Length said ${length}`);
  return Buffer.concat(chunks, size);
}
