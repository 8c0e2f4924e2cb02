/**
 * `POST /batch/<kind>`: many uploads in one request (shared/src/batch.ts), for relays sending up
 * what they spooled. Both relayd and server take it; each says what taking a file means
 * (`take`): the relay spools it, the server ingests a run log at once. Each file is judged as its
 * own PUT would be (name, size), and answered with the status and code that PUT would get.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { BATCH_CONTENT_TYPE, BATCH_PATH, batchError, decodeBatch, type BatchResult } from '@capstan/shared/batch';
import { capstanError, errorBody, isCapstanError } from '@capstan/shared/errors';
import { SPOOL_KINDS, type SpoolKind } from '@capstan/shared/protocol';
import { checkUploadName } from '../spool/upload.js';
import { pacedBody, PerClient, type BodyPace } from './limits.js';

/** One file of a batch that passed the checks a PUT makes before reading a body. */
export interface BatchUpload {
  name: string;
  nodeId: string;
  /** A view into the batch body, which is on a SharedArrayBuffer (handing it to a worker thread copies nothing). */
  data: Buffer;
}

export interface BatchRouteOptions {
  /** Most files in one batch ([http] max_batch_files). */
  maxFiles: number;
  /** Largest batch body ([http] max_batch_size). */
  maxBytes: number;
  /** Batch bodies held at once, all requests together ([http] max_batch_memory). */
  maxMemory: number;
  /** Largest file in it: the PUT's own limit. */
  maxFileBytes: number;
  pace?: BodyPace;
  /** Shared with the PUT routes: a batch is one upload in progress for its client. */
  perClient?: PerClient;
  /**
   * Take the files that passed the checks; resolve one result per file, in order. A file's 2xx
   * means what a PUT's means: its bytes are durable here. Never rejects for one file's sake.
   */
  take: (kind: SpoolKind, files: BatchUpload[], req: FastifyRequest) => Promise<BatchResult[]>;
  /** A file not taken, by code: refused by the checks (its name, its size) or by take() (a full disk, a busy store). */
  onRefused?: (kind: SpoolKind, code: string) => void;
}

/** The body whole, into shared memory of its declared length; ERR_BODY_TOO_LARGE past it. */
async function readShared(req: FastifyRequest, length: number, pace?: BodyPace): Promise<Buffer> {
  const data = Buffer.from(new SharedArrayBuffer(length));
  let at = 0;
  for await (const chunk of (pace ? pacedBody(req.raw, pace) : req.raw) as AsyncIterable<Buffer>) {
    if (at + chunk.length > length) throw capstanError('ERR_BODY_TOO_LARGE', 'batch is longer than its Content-Length');
    data.set(chunk, at);
    at += chunk.length;
  }
  if (at !== length) throw capstanError('ERR_BAD_REQUEST', `batch has ${at} bytes, Content-Length said ${length}`);
  return data;
}

/** A file's result from an error: the status and code its PUT would have been answered with. */
export function batchResultOf(name: string, err: unknown): BatchResult {
  const e = isCapstanError(err) ? err : capstanError('ERR_INTERNAL', 'internal error');
  return batchError(name, e.statusCode, e.code, errorBody(e).error.message);
}

export function installBatchRoute(app: FastifyInstance, opts: BatchRouteOptions): void {
  const perClient = opts.perClient ?? new PerClient(0);
  /** Bytes of the batches being read or taken now. */
  let held = 0;
  app.post<{ Params: { kind: string } }>(`${BATCH_PATH}/:kind`, async (req, reply) => {
    const kind = req.params.kind as SpoolKind;
    if (!SPOOL_KINDS.includes(kind)) throw capstanError('ERR_NOT_FOUND', `no batch route for ${req.params.kind}`);
    const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    if (type !== BATCH_CONTENT_TYPE) throw capstanError('ERR_UNSUPPORTED_MEDIA', `a batch is ${BATCH_CONTENT_TYPE}`);
    const header = req.headers['content-length'];
    if (header === undefined) throw capstanError('ERR_LENGTH_REQUIRED', 'Content-Length is required');
    if (!/^\d{1,15}$/.test(header)) throw capstanError('ERR_BAD_REQUEST', 'Content-Length is not a number');
    const length = Number(header);
    if (length > opts.maxBytes) throw capstanError('ERR_BATCH_TOO_LARGE', `batch of ${length} bytes exceeds the limit of ${opts.maxBytes} ([http] max_batch_size)`);
    if (held + length > opts.maxMemory) {
      reply.header('retry-after', '5');
      throw capstanError('ERR_BUSY', `batches of ${held} bytes are being taken already ([http] max_batch_memory): send again later`);
    }
    const leave = perClient.enter(req.socket.remoteAddress);
    held += length;
    let results: BatchResult[];
    try {
      const files = decodeBatch(await readShared(req, length, opts.pace), opts.maxFiles);
      results = new Array<BatchResult>(files.length);
      const taken: BatchUpload[] = [];
      const at: number[] = [];
      files.forEach((f, i) => {
        try {
          const { nodeId } = checkUploadName(kind, f.name);
          if (f.body.byteLength === 0) throw capstanError('ERR_BAD_REQUEST', 'empty body');
          if (f.body.byteLength > opts.maxFileBytes) throw capstanError('ERR_BODY_TOO_LARGE', `body of ${f.body.byteLength} bytes exceeds the limit of ${opts.maxFileBytes}`);
          taken.push({ name: f.name, nodeId, data: f.body as Buffer });
          at.push(i);
        } catch (err) {
          results[i] = batchResultOf(f.name, err);
          opts.onRefused?.(kind, results[i]!.error!.code);
        }
      });
      if (taken.length > 0) {
        const got = await opts.take(kind, taken, req);
        got.forEach((r, j) => {
          results[at[j]!] = r;
          // Not taken (ERR_SPOOL_FULL on a full disk, ERR_STORE…): counted as a PUT's refusal is.
          if (r.error && r.status >= 300) opts.onRefused?.(kind, r.error.code);
        });
      }
    } finally {
      held -= length;
      leave();
    }
    return reply.code(200).send({ data: { files: results } });
  });
}
