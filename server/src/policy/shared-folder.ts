/**
 * `HEAD|GET /rudder/relay-api/1/shared-folder/<path>` on the server: the files that
 * `file_from_shared_folder` directives name, served from `[policy] shared_folder` so that relays
 * (whose upstream is the server) can fetch and cache them. Same semantics as relayd's route
 * (RUDDER's shared_folder.rs): HEAD with `hash` (+ `hash_type` sha256|sha512) → 304 when equal,
 * 200 when not or absent, 404 missing; GET sends the bytes. Paths that could leave the folder
 * (`..`, `.`, empty or encoded-slash segments, symlinks out) are 400 ERR_BAD_PATH before any read.
 *
 * With `[identity] require_token` (as for policy downloads) a request needs a valid token of any
 * node, agent or relay: a relay sends its own when it has one, else the agent's it is serving.
 * Checked before the path is even looked at, so an anonymous caller learns nothing of the folder.
 */
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import { hashFile, resolveSharedFile, sharedFolderHashQuery, sharedFolderSegments } from '@capstan/toolkit/http/shared-folder';

type Req = FastifyRequest<{ Querystring: Record<string, string | undefined> }>;

export function sharedFolderRoutes(app: FastifyInstance, root: string, authorize?: (req: FastifyRequest) => Promise<void>): void {
  const url = '/rudder/relay-api/1/shared-folder/*';
  const guard = authorize ? { onRequest: async (req: FastifyRequest) => authorize(req) } : {};
  app.route({
    method: 'HEAD',
    url,
    ...guard,
    handler: async (req: Req, reply) => {
      const segments = sharedFolderSegments(req.raw.url ?? '');
      const { type, hash } = sharedFolderHashQuery(req.query);
      const file = root ? await resolveSharedFile(root, segments) : null;
      if (!file) return reply.code(404).send();
      if (hash === '') return reply.code(200).send();
      return reply.code((await hashFile(file, type)) === hash ? 304 : 200).send();
    },
  });
  app.route({
    method: 'GET',
    url,
    exposeHeadRoute: false,
    ...guard,
    handler: async (req, reply) => {
      const segments = sharedFolderSegments(req.raw.url ?? '');
      const file = root ? await resolveSharedFile(root, segments) : null;
      if (!file) throw capstanError('ERR_NOT_FOUND', 'no such file in the shared folder');
      const size = (await stat(file)).size;
      return reply.code(200).type('application/octet-stream').header('content-length', size).send(createReadStream(file));
    },
  });
}
