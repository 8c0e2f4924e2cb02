/**
 * `HEAD|GET /rudder/relay-api/1/shared-folder/<path>` on the server: the files that
 * `file_from_shared_folder` directives name, served from `[policy] shared_folder` so that relays
 * (whose upstream is the server) can fetch and cache them. Same semantics as relayd's route
 * (RUDDER's shared_folder.rs): HEAD with `hash` (+ `hash_type` sha256|sha512) → 304 when equal,
 * 200 when not or absent, 404 missing; GET sends the bytes. Paths that could leave the folder
 * (`..`, `.`, empty or encoded-slash segments, symlinks out) are 400 ERR_BAD_PATH before any read.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { realpath, stat } from 'node:fs/promises';
import { join, sep } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { capstanError } from '@capstan/shared';

const MARK = '/shared-folder/';
const HASH_HEX = { sha256: 64, sha512: 128 } as const;

/** Segments after `/shared-folder/`, read from the raw URL (the router collapses `//`). */
export function sharedFolderPath(rawUrl: string): string[] {
  const path = rawUrl.split('?')[0]!;
  const at = path.indexOf(MARK);
  if (at === -1) throw capstanError('ERR_BAD_PATH', 'not a shared-folder path');
  return path.slice(at + MARK.length).split('/').map((raw) => {
    let s: string;
    try {
      s = decodeURIComponent(raw);
    } catch {
      throw capstanError('ERR_BAD_PATH', 'path is not valid percent-encoding');
    }
    if (s === '') throw capstanError('ERR_BAD_PATH', 'empty path segment');
    if (s === '.' || s.startsWith('..')) throw capstanError('ERR_BAD_PATH', 'path segments may not be "." or start with ".."');
    if (/[\\/\0]/.test(s)) throw capstanError('ERR_BAD_PATH', 'path segments may not contain "\\", "/" or NUL');
    return s;
  });
}

async function resolveInside(root: string, segments: string[]): Promise<string | null> {
  const rootReal = await realpath(root);
  let real: string;
  try {
    real = await realpath(join(rootReal, ...segments));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return null;
    throw err;
  }
  if (real !== rootReal && !real.startsWith(rootReal + sep)) throw capstanError('ERR_BAD_PATH', 'path leaves the shared folder');
  return (await stat(real)).isFile() ? real : null;
}

type Req = FastifyRequest<{ Querystring: Record<string, string | undefined> }>;

export function sharedFolderRoutes(app: FastifyInstance, root: string): void {
  const url = '/rudder/relay-api/1/shared-folder/*';
  app.route({
    method: 'HEAD',
    url,
    handler: async (req: Req, reply) => {
      const segments = sharedFolderPath(req.raw.url ?? '');
      const type = req.query.hash_type ?? 'sha256';
      if (type !== 'sha256' && type !== 'sha512') throw capstanError('ERR_BAD_REQUEST', `unknown hash_type ${type}`);
      const hash = (req.query.hash ?? '').toLowerCase();
      if (hash !== '' && !new RegExp(`^[0-9a-f]{${HASH_HEX[type]}}$`).test(hash)) throw capstanError('ERR_BAD_REQUEST', `hash is not a ${type} in hex`);
      const file = root ? await resolveInside(root, segments) : null;
      if (!file) return reply.code(404).send();
      if (hash === '') return reply.code(200).send();
      const h = createHash(type);
      await pipeline(createReadStream(file), h);
      return reply.code(h.digest('hex') === hash ? 304 : 200).send();
    },
  });
  app.route({
    method: 'GET',
    url,
    exposeHeadRoute: false,
    handler: async (req, reply) => {
      const segments = sharedFolderPath(req.raw.url ?? '');
      const file = root ? await resolveInside(root, segments) : null;
      if (!file) throw capstanError('ERR_NOT_FOUND', 'no such file in the shared folder');
      const size = (await stat(file)).size;
      return reply.code(200).type('application/octet-stream').header('content-length', size).send(createReadStream(file));
    },
  });
}
