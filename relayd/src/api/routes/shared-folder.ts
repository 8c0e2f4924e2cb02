/**
 * `HEAD|GET /rudder/relay-api/1/shared-folder/<path>`: files of the server's shared folder
 * (RUDDER R/src/api/shared_folder.rs). HEAD takes `hash` (hex, optional) and `hash_type`
 * (`sha256` default, or `sha512`): missing file → 404; same hash → 304; no or another hash → 200;
 * a malformed hash or hash type → 400. GET sends the bytes, or 404 `NOT FOUND`.
 *
 * Every path that could leave the root is a 400 before the file system is touched: `..` (also
 * percent-encoded), `.`, backslashes, NUL, empty segments (`//x`, an absolute path) and encoded
 * slashes. The path is read from the raw URL, because the router would already have collapsed
 * double slashes and decoded segments.
 *
 * Where the files come from: `[shared_folder] path` when set (the relay holds the folder, as
 * RUDDER's root relay does); otherwise the upstream's shared folder through the relay's cache
 * (cache/shared-folder.ts: by sha256, single download per file, a governor on upstream downloads).
 * Capstan extension: GET also takes `hash` (sha256), the content the caller expects, which lets
 * the cache answer without asking the upstream; RUDDER clients do not send it.
 * Cache mode adds two answers: 503 `ERR_BUSY` + Retry-After when the download queue is
 * full, 502 `ERR_UPSTREAM` when the upstream cannot be reached and nothing usable is cached.
 */
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { isCapstanError } from '@capstan/shared/errors';
import { hashFile, resolveSharedFile, sharedFolderHashQuery, sharedFolderSegments } from '@capstan/toolkit/http/shared-folder';
import { SharedFolderCache, type CachedFile } from '../../cache/shared-folder.js';
import type { RelayContext } from '../context.js';
import { rudderText, sendText } from '../rudder-text.js';

type Req = FastifyRequest<{ Querystring: Record<string, string | undefined> }>;

/** Seconds an agent is told to wait when the download queue is full (it adds its own jitter). */
const BUSY_RETRY_AFTER = '5';

export function sharedFolderRoutes(app: FastifyInstance, ctx: RelayContext): void {
  const root = ctx.config.shared_folder.path;
  const url = '/rudder/relay-api/1/shared-folder/*';
  const sf = ctx.config.shared_folder;
  const cache =
    !root && sf.from_upstream
      ? new SharedFolderCache({
          dir: sf.cache_dir || join(ctx.config.spool.directory, 'cache', 'shared-folder'),
          upstream: ctx.upstream,
          timeoutMs: ctx.config.upstream.timeout,
          maxAgeMs: sf.max_age,
          maxDownloads: sf.max_downloads,
          maxQueued: sf.max_queued,
          maxFileBytes: sf.max_file_size,
          log: ctx.log,
        })
      : null;
  if (cache) app.addHook('onClose', () => cache.idle());

  /** The cached file, or a reply already sent (404, 502, 503). */
  const fromCache = async (c: SharedFolderCache, req: Req, reply: FastifyReply, segments: string[], want: string | undefined, head: boolean): Promise<CachedFile | FastifyReply> => {
    const own = ctx.ownAuthorization ? (await ctx.ownAuthorization().catch(() => ({}) as Record<string, string>)).authorization : undefined;
    const auth = own ?? (typeof req.headers.authorization === 'string' ? req.headers.authorization : undefined);
    try {
      const f = await c.get(segments.join('/'), want, auth, { head });
      return f ?? sendText(reply, 404, head ? '' : undefined);
    } catch (err) {
      if (isCapstanError(err) && err.code === 'ERR_BUSY') {
        reply.header('retry-after', BUSY_RETRY_AFTER);
        return sendText(reply, 503, 'too many downloads waiting for the upstream');
      }
      if (isCapstanError(err) && err.code === 'ERR_BODY_TOO_LARGE') throw err;
      const refused = isCapstanError(err) && (err as { permanent?: boolean }).permanent ? Number(err.details?.status) : 0;
      if (refused === 401 || refused === 403) {
        ctx.log.warn({ path: segments.join('/'), status: refused }, 'the upstream refused the token for a shared-folder file');
        return sendText(reply, refused, refused === 401 ? 'the upstream wants a node token' : 'the upstream refused this node');
      }
      ctx.log.warn({ err, path: segments.join('/') }, 'shared-folder file not available from the upstream');
      return sendText(reply, 502, 'the upstream cannot be reached and nothing usable is cached');
    }
  };

  app.route({
    method: 'HEAD',
    url,
    handler: rudderText(ctx.log, async (req: Req, reply) => {
      const segments = sharedFolderSegments(req.raw.url ?? '');
      const { type, hash } = sharedFolderHashQuery(req.query);
      if (cache) {
        const f = await fromCache(cache, req, reply, segments, type === 'sha256' && hash ? hash : undefined, true);
        if (!('sha256' in f)) return f;
        if (hash === '') return sendText(reply, 200, '');
        const have = type === 'sha256' ? f.sha256 : await hashFile(cache.objectPath(f.sha256), type);
        return sendText(reply, have === hash ? 304 : 200, '');
      }
      if (!root) return sendText(reply, 404, '');
      const file = await resolveSharedFile(root, segments);
      if (!file) return sendText(reply, 404, '');
      if (hash === '') return sendText(reply, 200, '');
      return sendText(reply, (await hashFile(file, type)) === hash ? 304 : 200, '');
    }),
  });

  app.route({
    method: 'GET',
    url,
    exposeHeadRoute: false,
    handler: rudderText(ctx.log, async (req: Req, reply) => {
      const segments = sharedFolderSegments(req.raw.url ?? '');
      if (cache) {
        const { type, hash } = sharedFolderHashQuery(req.query);
        const f = await fromCache(cache, req, reply, segments, type === 'sha256' && hash ? hash : undefined, false);
        if (!('sha256' in f)) return f;
        return reply
          .code(200)
          .type('application/octet-stream')
          .header('content-length', f.size)
          .header('etag', `"sha256:${f.sha256}"`)
          .send(createReadStream(cache.objectPath(f.sha256)));
      }
      if (!root) return sendText(reply, 404);
      const file = await resolveSharedFile(root, segments);
      if (!file) return sendText(reply, 404);
      const size = (await stat(file)).size;
      return reply.code(200).type('application/octet-stream').header('content-length', size).send(createReadStream(file));
    }),
  });
}
