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
 */
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { hashFile, resolveSharedFile, sharedFolderHashQuery, sharedFolderSegments } from '../../shared.js';
import type { RelayContext } from '../context.js';
import { rudderText, sendText } from '../rudder-text.js';

type Req = FastifyRequest<{ Querystring: Record<string, string | undefined> }>;

export function registerSharedFolder(app: FastifyInstance, ctx: RelayContext): void {
  const root = ctx.config.shared_folder.path;
  const url = '/rudder/relay-api/1/shared-folder/*';

  app.route({
    method: 'HEAD',
    url,
    handler: rudderText(ctx.log, async (req: Req, reply) => {
      const segments = sharedFolderSegments(req.raw.url ?? '');
      const { type, hash } = sharedFolderHashQuery(req.query);
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
      if (!root) return sendText(reply, 404);
      const file = await resolveSharedFile(root, segments);
      if (!file) return sendText(reply, 404);
      const size = (await stat(file)).size;
      return reply.code(200).type('application/octet-stream').header('content-length', size).send(createReadStream(file));
    }),
  });
}
