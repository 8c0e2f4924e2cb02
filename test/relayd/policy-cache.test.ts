/**
 * The relay's policy cache (GET /policies/<node>/rules): passes through the upstream's signed
 * answer and ETag, answers the agent's If-None-Match itself, revalidates with its own ETag,
 * serves the stale copy when the upstream is down, and never answers a refusal from the cache.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import t from 'tap';
import { startTestRelay } from './helpers/relay.js';
import { testTokens } from './helpers/tokens.js';
import { programDir } from '../helpers/programs.js';
import { listenOn } from '../helpers/ports.js';

// Relays require the node's token on policy downloads: tokens of a test keyring the relays have cached.
const keys = testTokens(programDir(t));

/** A policy upstream whose answers the test sets per request; it records what it was asked. */
async function fakeServer(t: { teardown: (fn: () => unknown) => void }) {
  const seen: Array<{ url: string; inm?: string; auth?: string }> = [];
  const state = { etag: '"c1"', body: '{"policy":"e30=","signature":"00","key_id":"k"}', status: 200 };
  let server: Server;
  const start = (port = 0) =>
    new Promise<number>((resolve) => {
      server = createServer((req: IncomingMessage, res) => {
        if (!req.url?.startsWith('/policies/')) return void res.writeHead(404).end(); // probes, JWKS
        seen.push({ url: req.url ?? '', inm: req.headers['if-none-match'], auth: req.headers.authorization });
        if (state.status !== 200) return void res.writeHead(state.status, { 'content-type': 'application/json' }).end('{"error":{"code":"ERR_NOT_FOUND","message":"no"}}');
        if (req.headers['if-none-match'] === state.etag) return void res.writeHead(304, { etag: state.etag }).end();
        res.writeHead(200, { etag: state.etag, 'content-type': 'application/json' }).end(state.body);
      });
      resolve(listenOn(server, port));
    });
  const port = await start();
  const stop = () => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r())));
  t.teardown(() => stop().catch(() => undefined));
  return { seen, state, url: `http://127.0.0.1:${port}`, stop, restart: () => start(port) };
}

t.test('cached per node with the upstream ETag; 304s from the relay; stale while down', async (t) => {
  const up = await fakeServer(t);
  const relay = await startTestRelay(t, { ...keys.overrides, 'upstream.url': up.url, 'upstream.timeout': '2s' });
  const get = async (node: string, headers: Record<string, string> = {}) => fetch(`${relay.url}/policies/${node}/rules`, { headers: { ...(await keys.auth(node)), ...headers } });

  const n1 = await keys.auth('n1');
  const r1 = await get('n1', n1);
  t.equal(r1.status, 200);
  t.equal(r1.headers.get('etag'), '"c1"');
  t.equal(await r1.text(), up.state.body, 'bytes unchanged');
  t.same(up.seen[0], { url: '/policies/n1/rules', inm: undefined, auth: n1.authorization }, 'the node token goes upstream');

  const r2 = await get('n1', { 'if-none-match': '"c1"' });
  t.equal(r2.status, 304);
  t.equal(up.seen[1]?.inm, '"c1"', 'revalidated with the cached ETag');

  // New content upstream: the old ETag no longer matches, the new bundle is cached.
  up.state.etag = '"c2"';
  up.state.body = '{"policy":"e30=","signature":"11","key_id":"k"}';
  const r3 = await get('n1', { 'if-none-match': '"c1"' });
  t.equal(r3.status, 200);
  t.equal(await r3.text(), up.state.body);

  // Upstream gone: the cached copy, stale but signed, with a warning; an unknown node gets 502.
  await up.stop();
  const r4 = await get('n1');
  t.equal(r4.status, 200);
  t.equal(await r4.text(), up.state.body);
  t.match(r4.headers.get('warning'), /stale/);
  t.equal((await get('n1', { 'if-none-match': '"c2"' })).status, 304);
  const r5 = await get('n2');
  t.equal(r5.status, 502);
  t.equal(((await r5.json()) as { error: { code: string } }).error.code, 'ERR_UPSTREAM');

  // Back up and the server says "no policy": passed on, and the cached copy is dropped.
  await up.restart();
  up.state.status = 404;
  t.equal((await get('n1')).status, 404);
  await up.stop();
  t.equal((await get('n1')).status, 502, 'nothing cached any more');
});

t.test('refusals pass through and bad node ids never reach the disk', async (t) => {
  const up = await fakeServer(t);
  const relay = await startTestRelay(t, { ...keys.overrides, 'upstream.url': up.url });
  up.state.status = 403;
  const r = await fetch(`${relay.url}/policies/n1/rules`, { headers: await keys.auth('n1') });
  t.equal(r.status, 403);
  const bad = await fetch(`${relay.url}/policies/${encodeURIComponent('.a b')}/rules`, { headers: await keys.auth('.a b') });
  t.equal(bad.status, 400);
  t.equal(up.seen.length, 1, 'the bad id was not asked upstream');
});

t.test('max_age answers from the cache without asking the upstream', async (t) => {
  const up = await fakeServer(t);
  const relay = await startTestRelay(t, { ...keys.overrides, 'upstream.url': up.url, 'policies.max_age': '1h' });
  const headers = await keys.auth('n1');
  t.equal((await fetch(`${relay.url}/policies/n1/rules`, { headers })).status, 200);
  t.equal((await fetch(`${relay.url}/policies/n1/rules`, { headers })).status, 200);
  t.equal(up.seen.length, 1);
});
