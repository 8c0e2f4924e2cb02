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
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { realpath, stat } from 'node:fs/promises';
import { join, sep } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { capstanError } from '../../shared.js';
import type { RelayContext } from '../context.js';
import { rudderText, sendText } from '../rudder-text.js';

const MARK = '/shared-folder/';
const HASH_HEX = { sha256: 64, sha512: 128 } as const;

/** The path segments after `/shared-folder/`, decoded and checked; throws ERR_BAD_PATH. */
export function sharedFolderSegments(rawUrl: string): string[] {
  const path = rawUrl.split('?')[0]!;
  const at = path.indexOf(MARK);
  if (at === -1) throw capstanError('ERR_BAD_PATH', 'not a shared-folder path');
  const rest = path.slice(at + MARK.length);
  const segments = rest.split('/');
  const out: string[] = [];
  for (const raw of segments) {
    let s: string;
    try {
      s = decodeURIComponent(raw);
    } catch {
      throw capstanError('ERR_BAD_PATH', 'path is not valid percent-encoding');
    }
    if (s === '') throw capstanError('ERR_BAD_PATH', 'empty path segment (absolute path or "//")');
    if (s === '.' || s.startsWith('..')) throw capstanError('ERR_BAD_PATH', 'path segments may not be "." or start with ".."');
    if (/[\\/\0]/.test(s)) throw capstanError('ERR_BAD_PATH', 'path segments may not contain "\\", "/" or NUL');
    out.push(s);
  }
  return out;
}

/** Resolve under the root, following symlinks, and refuse anything that lands outside it. */
async function resolveInside(root: string, segments: string[]): Promise<string | null> {
  const rootReal = await realpath(root);
  let real: string;
  try {
    real = await realpath(join(rootReal, ...segments));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR') return null;
    throw err;
  }
  if (real !== rootReal && !real.startsWith(rootReal + sep)) throw capstanError('ERR_BAD_PATH', 'path leaves the shared folder');
  const s = await stat(real);
  return s.isFile() ? real : null;
}

async function hashFile(path: string, algorithm: 'sha256' | 'sha512'): Promise<string> {
  const h = createHash(algorithm);
  await pipeline(createReadStream(path), h);
  return h.digest('hex');
}

type Req = FastifyRequest<{ Querystring: Record<string, string | undefined> }>;

export function registerSharedFolder(app: FastifyInstance, ctx: RelayContext): void {
  const root = ctx.config.shared_folder.path;
  const url = '/rudder/relay-api/1/shared-folder/*';

  app.route({
    method: 'HEAD',
    url,
    handler: rudderText(ctx.log, async (req: Req, reply) => {
      const segments = sharedFolderSegments(req.raw.url ?? '');
      const type = req.query.hash_type ?? 'sha256';
      if (type !== 'sha256' && type !== 'sha512') throw capstanError('ERR_BAD_REQUEST', `unknown hash_type ${type}`);
      const hash = req.query.hash ?? '';
      if (hash !== '' && !new RegExp(`^[0-9a-fA-F]{${HASH_HEX[type]}}$`).test(hash)) {
        throw capstanError('ERR_BAD_REQUEST', `hash is not a ${type} in hex`);
      }
      if (!root) return sendText(reply, 404, '');
      const file = await resolveInside(root, segments);
      if (!file) return sendText(reply, 404, '');
      if (hash === '') return sendText(reply, 200, '');
      return sendText(reply, (await hashFile(file, type)) === hash.toLowerCase() ? 304 : 200, '');
    }),
  });

  app.route({
    method: 'GET',
    url,
    exposeHeadRoute: false,
    handler: rudderText(ctx.log, async (req: Req, reply) => {
      const segments = sharedFolderSegments(req.raw.url ?? '');
      if (!root) return sendText(reply, 404);
      const file = await resolveInside(root, segments);
      if (!file) return sendText(reply, 404);
      const size = (await stat(file)).size;
      return reply.code(200).type('application/octet-stream').header('content-length', size).send(createReadStream(file));
    }),
  });
}
