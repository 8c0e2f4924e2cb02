/**
 * Pieces of HTTP plumbing both relayd and server build their fastify apps from: the coded error
 * answer, raw (unparsed) request bodies for uploads, and the agent-facing upload routes.
 */
import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { CapstanError, capstanError, errorBody, isCapstanError } from '@capstan/shared/errors';
import type { Logger } from '@capstan/shared/log';
import { UPLOAD_PATHS, type SpoolKind } from '@capstan/shared/protocol';
import type { Accepted, Spool } from '../spool/spool.js';
import { receiveUpload } from '../spool/upload.js';
import { pacedBody, PerClient, serverOptions, type BodyPace, type HttpLimits } from './limits.js';
import { installBatchRoute, type BatchRouteOptions } from './batch.js';
import type { ListenerTls } from './tls.js';

/** The coded error Node's HTTP parser's refusals become (they never reach a route). */
function clientErrorCode(code: string | undefined): { status: number; code: 'ERR_REQUEST_TIMEOUT' | 'ERR_HEADERS_TOO_LARGE' | 'ERR_URI_TOO_LONG' | 'ERR_BAD_REQUEST'; message: string } {
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') return { status: 408, code: 'ERR_REQUEST_TIMEOUT', message: 'request headers not received in time (http.headers_timeout)' };
  if (code === 'HPE_HEADER_OVERFLOW') return { status: 431, code: 'ERR_HEADERS_TOO_LARGE', message: 'request head larger than http.max_header_size' };
  return { status: 400, code: 'ERR_BAD_REQUEST', message: `malformed HTTP request (${code ?? 'parse error'})` };
}

/**
 * Answer what Node's parser refuses (bad request line, Content-Length or chunk, oversized head,
 * headers too slow) with the coded JSON error instead of Node's bare "Client Error", then close.
 */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  // A response already started on this connection cannot be followed by another: just close.
  const inFlight = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (socket.writable && !inFlight?.headersSent) {
    const e = clientErrorCode(err.code);
    const body = JSON.stringify(errorBody(new CapstanError(e.code, e.message, { statusCode: e.status })));
    socket.end(
      `HTTP/1.1 ${e.status} ${STATUS_CODES[e.status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
    // Ended, not destroyed: the answer is flushed first; a client that never reads it is cut off.
    setTimeout(() => socket.destroy(), 1000).unref();
    return;
  }
  socket.destroy();
}

/** Longest path parameter the router takes (an upload's file name, percent-encoded); longer → 414. */
export const MAX_PARAM_LENGTH = 1024;

/**
 * The Fastify options every Capstan listener is built with, beyond its own: Node's header timeout
 * and size from [http], TLS when configured, coded answers for the parser's and the router's
 * refusals (bad percent-encoding, an overlong path segment).
 */
/** The schema compilers of an app whose routes carry none: a route that does is a programming error. */
function noSchemas(): () => never {
  return () => {
    throw new Error('routes here carry no JSON schema: bodies are checked by their own parsers');
  };
}

export function listenerOptions(limits: HttpLimits, tls?: ListenerTls | null): Record<string, unknown> {
  const node = serverOptions(limits);
  return {
    ...(tls ? { https: { ...tls, ...node } } : { http: node }),
    clientErrorHandler,
    routerOptions: { ignoreDuplicateSlashes: true, maxParamLength: MAX_PARAM_LENGTH },
    // No route carries a JSON schema (bodies are checked by the domain's own parsers): fastify's
    // default compilers would load ajv and fast-json-stringify at every start for nothing.
    schemaController: { compilersFactory: { buildValidator: noSchemas, buildSerializer: noSchemas } },
    frameworkErrors: (err: Error & { code?: string }, _req: FastifyRequest, reply: FastifyReply) => {
      const tooLong = err.code === 'FST_ERR_MAX_PARAM_LENGTH';
      const e = tooLong
        ? capstanError('ERR_URI_TOO_LONG', `a path segment is longer than ${MAX_PARAM_LENGTH} characters`)
        : capstanError(err.code === 'FST_ERR_BAD_URL' ? 'ERR_BAD_PATH' : 'ERR_BAD_REQUEST', err.code === 'FST_ERR_BAD_URL' ? 'the path is not valid percent-encoding' : err.message);
      return reply.code(e.statusCode).header('content-type', 'application/json; charset=utf-8').send(errorBody(e));
    },
  };
}

/**
 * Every error leaves as `{"error":{"code","message"}}` with the code's status. Fastify's own
 * errors (bad JSON, unsupported media type) keep their 4xx status under ERR_BAD_REQUEST; anything
 * unexpected is a 500 whose details stay in the log, never in the body.
 */
export function installErrorHandler(app: FastifyInstance, log: Logger): void {
  app.setErrorHandler((err: unknown, req: FastifyRequest, reply: FastifyReply) => {
    // A body left unread (refused before or while reading it) would be parsed as the next
    // request on this connection: close it after the answer.
    if (!req.raw.complete) reply.header('connection', 'close');
    if (isCapstanError(err)) {
      if (err.code === 'ERR_TOO_MANY_UPLOADS' && !reply.hasHeader('retry-after')) reply.header('retry-after', '5');
      if (err.code === 'ERR_BUSY' && !reply.hasHeader('retry-after')) reply.header('retry-after', '5');
      if (err.code === 'ERR_SPOOL_FULL' && !reply.hasHeader('retry-after')) reply.header('retry-after', '60');
      // A transient refusal (busy, full) is an expected condition: a line without a stack.
      if (err.statusCode >= 500 && err.transient) log.warn({ code: err.code, url: req.url, reason: err.message }, 'request refused for now');
      else if (err.statusCode >= 500) log.error({ err, url: req.url }, 'request failed');
      return reply.code(err.statusCode).send(errorBody(err));
    }
    const status = (err as { statusCode?: number }).statusCode;
    if (typeof status === 'number' && status >= 400 && status < 500) {
      const code = status === 413 ? 'ERR_BODY_TOO_LARGE' : status === 415 ? 'ERR_UNSUPPORTED_MEDIA' : 'ERR_BAD_REQUEST';
      return reply.code(status).send(errorBody(new CapstanError(code, (err as Error).message, { statusCode: status })));
    }
    log.error({ err, url: req.url }, 'unexpected error');
    return reply.code(500).send(errorBody(err));
  });
  // An Expect other than 100-continue: Node's own answer is a bare 417.
  app.server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    const body = JSON.stringify(errorBody(capstanError('ERR_BAD_REQUEST', `unsupported Expect: ${String(req.headers.expect).slice(0, 100)}`, { statusCode: 417 })));
    res.writeHead(417, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body), connection: 'close' }).end(body);
  });
  app.setNotFoundHandler((req, reply) => {
    reply.code(404).send(errorBody(capstanError('ERR_NOT_FOUND', `no route for ${req.method} ${req.url.split('?')[0]}`)));
  });
}

/**
 * Once the app is closing, every answer still going out closes its connection. Node's close
 * ends the keep-alive connections idle at that moment; one busy then (a relay's batch in flight)
 * would otherwise stay open after its answer and hold the close until the peer let it go.
 * Draining begins at the app's close, or earlier with the function returned (a program that
 * answers its long polls before it closes the app).
 */
export function installCloseDrain(app: FastifyInstance): () => void {
  let closing = false;
  const drain = () => {
    closing = true;
  };
  app.addHook('preClose', async () => drain());
  app.addHook('onSend', async (_req, reply, payload) => {
    if (closing) reply.header('connection', 'close');
    return payload;
  });
  return drain;
}

/**
 * Leave request bodies unread so upload routes can stream them to disk; JSON bodies are parsed
 * by routes that ask for them with `readJson`. Registered for every content type, including none.
 */
export function installRawBodies(app: FastifyInstance): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined));
}

/** The body pace of each listener (keyed by its Node server), for bodies read whole. */
const PACES = new WeakMap<object, BodyPace>();

/** Bodies read whole by readBody/readJson on this app follow `pace` (http.body_timeout, min_upload_rate). */
export function installBodyPace(app: FastifyInstance, pace: BodyPace): void {
  PACES.set(app.server, pace);
}

/** A request's body as read under its listener's pace (the bare request when none is set). */
export function requestBody(req: FastifyRequest): AsyncIterable<Buffer> {
  const pace = PACES.get(req.server.server);
  return pace ? pacedBody(req.raw, pace) : (req.raw as AsyncIterable<Buffer>);
}

/** Read a raw request body into memory, refusing (413) anything over `maxBytes`. */
export async function readBody(req: FastifyRequest, maxBytes: number, what = 'body'): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of requestBody(req)) {
    size += chunk.length;
    if (size > maxBytes) throw capstanError('ERR_BODY_TOO_LARGE', `${what} exceeds ${maxBytes} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** Whether an If-None-Match header (a list, weak `W/` tags, or `*`) names this ETag. */
export function etagMatches(header: string | string[] | undefined, etag: string): boolean {
  if (!header) return false;
  const text = Array.isArray(header) ? header.join(',') : header;
  return text.split(',').some((t) => {
    const v = t.trim().replace(/^W\//, '');
    return v === '*' || v === etag;
  });
}

/** Nesting allowed in a JSON body unless the app sets its own (`installJsonDepth`). */
export const DEFAULT_MAX_JSON_DEPTH = 64;

/**
 * Set the deepest nesting of the JSON bodies this app's routes read with `readJson`. Parsing
 * copes with any depth, but what walks the value afterwards (validation, JSON.stringify) recurses
 * and would overflow the stack: a deep body is refused before it is parsed.
 */
export function installJsonDepth(app: FastifyInstance, maxDepth: number): void {
  app.decorateRequest('jsonMaxDepth', maxDepth);
}

/** The deepest nesting of arrays and objects in JSON text (strings skipped), stopping past `limit`. */
export function jsonDepth(text: string, limit = Infinity): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > deepest && (deepest = depth) > limit) return deepest;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return deepest;
}

/** Bodies read by readJson, so a hook (a role check) and the route may both read one request's body. */
const JSON_BODIES = new WeakMap<FastifyRequest, unknown>();

/** Read and parse a JSON body: ERR_BODY_TOO_LARGE over `maxBytes`, ERR_BAD_REQUEST if invalid or too deep. */

export async function readJson(req: FastifyRequest, maxBytes = 1024 * 1024): Promise<unknown> {
  if (JSON_BODIES.has(req)) return JSON_BODIES.get(req);
  const value = await parseJsonBody(req, maxBytes);
  JSON_BODIES.set(req, value);
  return value;
}

async function parseJsonBody(req: FastifyRequest, maxBytes: number): Promise<unknown> {
  const body = await readBody(req, maxBytes, 'JSON body');
  if (body.length === 0) return undefined;
  const text = body.toString('utf8');
  const maxDepth = (req as { jsonMaxDepth?: number }).jsonMaxDepth ?? DEFAULT_MAX_JSON_DEPTH;
  if (jsonDepth(text, maxDepth) > maxDepth) {
    throw capstanError('ERR_BAD_REQUEST', `body is nested deeper than ${maxDepth} levels (limits.max_json_depth)`);
  }
  try {
    return JSON.parse(text);
  } catch {
    throw capstanError('ERR_BAD_REQUEST', 'body is not valid JSON');
  }
}

export interface UploadRouteOptions {
  spool: Spool;
  maxBytes: number;
  /** The body's pace (http.body_timeout, min_upload_rate); absent: none. */
  pace?: BodyPace;
  /** Uploads in progress per client address, its floor under contention (http.max_uploads_per_client); 0 or absent: none. */
  maxPerClient?: number;
  /** Uploads in progress in all (http.max_uploads); 0 or absent: none. */
  maxUploads?: number;
  /** Called once the file is durably spooled, before the 2xx (for metrics and logs). */
  onAccepted?: (kind: SpoolKind, name: string, accepted: Accepted & { nodeId: string }) => void;
  /** Per-upload check (e.g. the node is known), run before the body is read. */
  authorize?: (kind: SpoolKind, name: string, req: FastifyRequest) => Promise<void>;
  /** Hand bodies up to this size to onAccepted in `accepted.data` and to onWritten (default 0: none); or decide per upload. */
  keepBytes?: number | ((kind: SpoolKind, req: FastifyRequest) => number);
  /**
   * More fields for the 2xx answer's `data`, once the upload is on disk (the server hands a node
   * its token in the answer to its inventory). Its failure never fails the upload.
   */
  answer?: (kind: SpoolKind, name: string, accepted: Accepted, req: FastifyRequest) => Promise<Record<string, unknown> | undefined>;
  /** A kept body is durable in tmp/ and about to appear in incoming/ (see AcceptOptions.onWritten). */
  onWritten?: (kind: SpoolKind, name: string, data: Buffer) => void;
  /**
   * `POST /batch/<kind>` too (http/batch.ts), with the same per-file limit, pace and per-client
   * count as a PUT: how this program takes a batch's files, and the batch's own limits.
   */
  batch?: Omit<BatchRouteOptions, 'maxFileBytes' | 'pace' | 'perClient'>;
}

/** `PUT /reports/<file>`, `PUT /inventories/<file>` (and `/inventory-updates/<file>`): 2xx means the bytes are on disk. */
export function installUploadRoutes(app: FastifyInstance, opts: UploadRouteOptions): void {
  const perClient = new PerClient(opts.maxPerClient ?? 0, opts.maxUploads ?? 0);
  const pace = opts.pace;
  for (const [path, kind] of UPLOAD_PATHS) {
    app.put<{ Params: { file: string } }>(`/${path}/:file`, async (req, reply) => {
      const name = req.params.file;
      const leave = perClient.enter(req.socket.remoteAddress);
      let accepted: Accepted & { nodeId: string };
      try {
        if (opts.authorize) await opts.authorize(kind, name, req);
        const onWritten = opts.onWritten;
        const keepBytes = typeof opts.keepBytes === 'function' ? opts.keepBytes(kind, req) : opts.keepBytes;
        accepted = await receiveUpload(opts.spool, kind, name, req.raw, opts.maxBytes, {
          keepBytes,
          ...(onWritten ? { onWritten: (data: Buffer) => onWritten(kind, name, data) } : {}),
        }, pace ? pacedBody(req.raw, pace) : undefined);
      } finally {
        leave();
      }
      opts.onAccepted?.(kind, name, accepted);
      const more = opts.answer ? await opts.answer(kind, name, accepted, req).catch(() => undefined) : undefined;
      return reply.code(201).send({ data: { ...more, file: name, bytes: accepted.bytes, sha256: accepted.sha256 } });
    });
  }
  if (opts.batch) installBatchRoute(app, { ...opts.batch, maxFileBytes: opts.maxBytes, perClient, ...(pace && { pace }) });
}
