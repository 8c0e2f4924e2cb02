/**
 * A relay passes its sub-relays' bootstrap calls to its upstream unchanged: the claim and the
 * events with their bodies and the sub-relay's own token, the package download streamed back
 * byte for byte with its sha256 and name headers, and the upstream's status as it came.
 * Ids that are not ids never leave the relay.
 */
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage } from 'node:http';
import Fastify from 'fastify';
import t from 'tap';
import { silentLogger } from '@capstan/shared';
import { installErrorHandler, installRawBodies } from '@capstan/toolkit';
import { bootstrapForwardRoutes } from '@capstan/relayd/bootstrap/forward';
import { Upstream } from '@capstan/relayd/forward/upstream';

t.test('sub-relays\' bootstrap calls go up unchanged, the package streamed back with its headers', async (t) => {
  const pkg = Buffer.alloc(300_000, 7);
  const seen: Array<{ method: string; url: string; authorization: string | undefined; body: string }> = [];
  const up = createServer(async (req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    seen.push({ method: req.method!, url: req.url!, authorization: req.headers.authorization, body: Buffer.concat(chunks).toString('utf8') });
    if (req.url!.includes('/package/')) {
      res.writeHead(200, { 'content-type': 'application/vnd.debian.binary-package', 'x-capstan-sha256': createHash('sha256').update(pkg).digest('hex'), 'x-capstan-package': 'capstan-agent_1.0.0_amd64.deb' });
      return res.end(pkg);
    }
    if (req.url!.includes('/tasks/')) {
      res.writeHead(404, { 'content-type': 'application/json' });
      return res.end('{"error":{"code":"ERR_NOT_FOUND","message":"no"}}');
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"data":[]}');
  });
  await new Promise<void>((r) => up.listen(0, '127.0.0.1', () => r()));
  t.teardown(() => up.close());
  const upstream = new Upstream({ url: `http://127.0.0.1:${(up.address() as { port: number }).port}`, timeoutMs: 5000, connections: 2 });
  t.teardown(() => upstream.close());
  const app = Fastify();
  installRawBodies(app);
  installErrorHandler(app, silentLogger);
  bootstrapForwardRoutes(app, upstream, 5000);
  await app.ready();
  t.teardown(() => app.close());

  const auth = { authorization: 'Bearer sub-relay-token' };
  const claim = await app.inject({ method: 'POST', url: '/relay-api/1/bootstrap/relay-sub/claim', headers: { 'content-type': 'application/json', ...auth }, payload: '{"limit":2}' });
  t.equal(claim.statusCode, 200);
  t.same(claim.json(), { data: [] });
  t.match(seen[0], { method: 'POST', url: '/relay-api/1/bootstrap/relay-sub/claim', authorization: 'Bearer sub-relay-token', body: '{"limit":2}' });

  const event = await app.inject({ method: 'POST', url: '/relay-api/1/bootstrap/relay-sub/tasks/j1/n1', headers: { 'content-type': 'application/json', ...auth }, payload: '{"step":"copy","message":"x"}' });
  t.equal(event.statusCode, 404, 'the upstream\'s status as it came');
  t.match(event.json(), { error: { code: 'ERR_NOT_FOUND' } });
  t.match(seen[1], { url: '/relay-api/1/bootstrap/relay-sub/tasks/j1/n1', body: '{"step":"copy","message":"x"}', authorization: 'Bearer sub-relay-token' });

  const got = await app.inject({ method: 'GET', url: '/relay-api/1/bootstrap/relay-sub/package/amd64', headers: auth });
  t.equal(got.statusCode, 200);
  t.ok(got.rawPayload.equals(pkg), 'the package byte for byte');
  t.equal(got.headers['x-capstan-sha256'], createHash('sha256').update(pkg).digest('hex'));
  t.equal(got.headers['x-capstan-package'], 'capstan-agent_1.0.0_amd64.deb');

  const before = seen.length;
  for (const url of ['/relay-api/1/bootstrap/..%2Fx/claim', '/relay-api/1/bootstrap/relay-sub/package/AMD64', '/relay-api/1/bootstrap/relay-sub/tasks/j%201/n1']) {
    const r = await app.inject({ method: url.includes('package') ? 'GET' : 'POST', url, headers: { 'content-type': 'application/json' }, payload: url.includes('package') ? undefined : '{}' });
    t.equal(r.statusCode, 400, url);
    t.match(r.json(), { error: { code: 'ERR_BAD_REQUEST' } });
  }
  t.equal(seen.length, before, 'nothing sent up for them');
});
