/**
 * `HEAD|PUT /rudder/relay-api/1/shared-files/<target>/<source>/<file-id>` with RUDDER's answers
 * (see ../../cache/shared-files.ts for the format and checks):
 *
 *   bad id, reserved `.metadata` id, bad or overflowing ttl → 400; no Content-Length → 411;
 *   body over shared_files.max_body_size → 413; source not below this relay or key not the
 *   source's → 404; unreadable metadata, source without key-hash, bad signature → 500;
 *   stored → 200. HEAD: metadata's hash_value equals `?hash=` → 200, else 404.
 *
 * A target that is not below this relay goes upstream (same method, path and body) and its status
 * comes back; on the root (node id `root`) an unknown target is a 500, as in RUDDER.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import {
  keyMatches, parseMetadata, parseTtlSeconds, publicKeyOf, reservedFileId, signatureValid, splitUpload, validSharedId,
  SharedFilesStore,
} from '../../cache/shared-files.js';
import type { RelayContext } from '../context.js';
import { readBody, rudderText, sendText } from '../rudder-text.js';

type Req = FastifyRequest<{ Params: { target: string; source: string; file: string }; Querystring: Record<string, string | undefined> }>;

const PREFIX = '/rudder/relay-api/1/shared-files';

export function sharedFilesRoutes(app: FastifyInstance, ctx: RelayContext): void {
  const path = ctx.config.shared_files.path;
  const store = path ? new SharedFilesStore(path) : null;
  const max = ctx.config.shared_files.max_body_size;

  const checkIds = (req: Req) => {
    const { target, source, file } = req.params;
    for (const id of [target, source, file]) {
      if (!validSharedId(id)) throw capstanError('ERR_BAD_PATH', `invalid shared-files id: ${id}`);
    }
    if (reservedFileId(file)) throw capstanError('ERR_BAD_PATH', `file id ${file} uses the reserved .metadata extension`);
  };

  /** local: the target is below this relay; upstream: ask the next one; or refuse. */
  const route = (target: string): 'local' | 'upstream' => {
    if (ctx.nodes().get(target)) return 'local';
    if (ctx.config.general.node_id === 'root') throw capstanError('ERR_NODE_UNKNOWN', `unknown target node ${target}`, { statusCode: 500 });
    return 'upstream';
  };

  const forward = async (req: Req, reply: FastifyReply, body?: Buffer) => {
    const query = new URLSearchParams();
    for (const [k, v] of Object.entries(req.query)) if (typeof v === 'string') query.set(k, v);
    const { target, source, file } = req.params;
    const qs = query.toString();
    const res = await ctx.upstream.request({
      method: req.method as 'HEAD' | 'PUT',
      path: `${PREFIX}/${target}/${source}/${file}${qs ? `?${qs}` : ''}`,
      headers: body ? { 'content-length': String(body.length), 'content-type': 'application/octet-stream' } : {},
      body,
      timeoutMs: ctx.config.upstream.timeout,
    }).catch((err: Error) => {
      throw capstanError('ERR_UPSTREAM', `upstream unreachable: ${err.message}`, { cause: err });
    });
    await res.body.text().catch(() => '');
    return sendText(reply, res.statusCode, '');
  };

  app.route<{ Params: { target: string; source: string; file: string }; Querystring: Record<string, string | undefined> }>({
    method: 'HEAD',
    url: `${PREFIX}/:target/:source/:file`,
    handler: rudderText(ctx.log, async (req: Req, reply) => {
      checkIds(req);
      if (!store) return sendText(reply, 404);
      if (route(req.params.target) === 'upstream') return forward(req, reply);
      const meta = await store.readMetadata(req.params.target, req.params.source, req.params.file).catch(() => null);
      if (!meta) return sendText(reply, 404, '');
      const hash = (req.query.hash ?? '').toLowerCase();
      return sendText(reply, hash !== '' && hash === meta.hash_value.toLowerCase() ? 200 : 404, '');
    }),
  });

  app.route<{ Params: { target: string; source: string; file: string }; Querystring: Record<string, string | undefined> }>({
    method: 'PUT',
    url: `${PREFIX}/:target/:source/:file`,
    handler: rudderText(ctx.log, async (req: Req, reply) => {
      checkIds(req);
      if (!store) return sendText(reply, 404);
      const ttl = parseTtlSeconds(req.query.ttl);
      if (ttl === null) throw capstanError('ERR_BAD_REQUEST', `invalid ttl: ${req.query.ttl ?? '(none)'}`);
      const where = route(req.params.target);
      const body = await readBody(req, max);
      if (where === 'upstream') return forward(req, reply, body);

      const sourceNode = ctx.nodes().get(req.params.source);
      if (!sourceNode) return sendText(reply, 404);
      const { meta: metaText, content } = splitUpload(body);
      // Unreadable metadata or key is a 500 in RUDDER (an internal error, not a bad request).
      let meta, key;
      try {
        meta = parseMetadata(metaText);
        key = publicKeyOf(meta.short_pubkey);
      } catch (err) {
        throw capstanError('ERR_BAD_REQUEST', (err as Error).message, { statusCode: 500 });
      }
      if (!sourceNode.keyHash) throw capstanError('ERR_KEY', `source node ${sourceNode.id} has no key-hash in the nodes list`, { statusCode: 500 });
      if (!keyMatches(key, sourceNode.keyHash)) return sendText(reply, 404);
      if (!signatureValid(meta, key, content)) throw capstanError('ERR_SMIME_SIGNATURE', 'shared file signature does not verify', { statusCode: 500 });
      await store.write(req.params.target, req.params.source, req.params.file, { ...meta, expires: Math.floor(Date.now() / 1000) + ttl }, content);
      ctx.log.info({ target: req.params.target, source: req.params.source, file: req.params.file, bytes: content.length }, 'shared file stored');
      return sendText(reply, 200, '');
    }),
  });
}
