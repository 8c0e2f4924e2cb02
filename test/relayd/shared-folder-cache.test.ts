/**
 * A relay without a local shared folder serves the upstream's, through its cache: one upstream
 * download however many agents ask at once, revalidation by hash (HEAD → 304), stale copies while
 * the upstream is down, a governor bounding concurrent upstream downloads with a bounded queue
 * (503 + Retry-After beyond), and the real server as the upstream.
 */
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { silentLogger } from '@capstan/shared';
import { loadServerConfig } from '@capstan/server/config';
import { startServer } from '@capstan/server/server';
import { startTestRelay } from './helpers/relay.js';
import { programDir } from '../helpers/programs.js';
import { listenOn } from '../helpers/ports.js';

const PREFIX = '/rudder/relay-api/1/shared-folder/';
const sha = (b: Buffer | string, alg = 'sha256') => createHash(alg).update(b).digest('hex');

/** An upstream shared folder that counts what it is asked and can hold GETs until released. */
async function fakeUpstream(t: { teardown: (fn: () => unknown) => void }) {
  const files = new Map<string, Buffer>();
  const gets = new Map<string, number>();
  const heads: string[] = [];
  const state = { inFlight: 0, maxInFlight: 0, hold: false };
  let waiters: Array<() => void> = [];
  let server: Server;
  const start = (port = 0) =>
    new Promise<number>((resolve) => {
      server = createServer((req, res) => {
        const url = new URL(req.url ?? '/', 'http://x');
        if (!url.pathname.startsWith(PREFIX)) return void res.writeHead(404).end();
        const path = decodeURIComponent(url.pathname.slice(PREFIX.length));
        const data = files.get(path);
        if (req.method === 'HEAD') {
          heads.push(`${path}?${url.searchParams.get('hash') ?? ''}`);
          if (!data) return void res.writeHead(404).end();
          return void res.writeHead(url.searchParams.get('hash') === sha(data) ? 304 : 200).end();
        }
        gets.set(path, (gets.get(path) ?? 0) + 1);
        if (!data) return void res.writeHead(404).end('NOT FOUND');
        state.inFlight++;
        state.maxInFlight = Math.max(state.maxInFlight, state.inFlight);
        const send = () => {
          state.inFlight--;
          res.writeHead(200, { 'content-length': data.length }).end(data);
        };
        if (state.hold) waiters.push(send);
        else send();
      });
      resolve(listenOn(server, port));
    });
  const port = await start();
  const stop = () => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r())));
  t.teardown(() => stop().catch(() => undefined));
  const release = () => {
    const w = waiters;
    waiters = [];
    w.forEach((f) => f());
  };
  return { files, gets, heads, state, url: `http://127.0.0.1:${port}`, stop, restart: () => start(port), release, held: () => waiters.length };
}

async function until(what: string, cond: () => boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

const relayConfig = (up: string, extra: Record<string, unknown> = {}) => ({
  'upstream.url': up,
  'upstream.timeout': '3s',
  'identity.require_token': false,
  ...extra,
});

t.test('200 concurrent agent requests for one new file cause one upstream download', async (t) => {
  const up = await fakeUpstream(t);
  const data = Buffer.from('x'.repeat(100_000));
  up.files.set('bundles/new.tar.gz', data);
  const relay = await startTestRelay(t, relayConfig(up.url));
  // Held upstream: every request arrives while the first download is still in flight.
  up.state.hold = true;
  const all = Array.from({ length: 200 }, () => fetch(`${relay.url}${PREFIX}bundles/new.tar.gz?hash=${sha(data)}`).then(async (r) => ({ status: r.status, body: Buffer.from(await r.arrayBuffer()) })));
  await until('the upstream download', () => up.held() === 1);
  up.release();
  const answers = await Promise.all(all);
  t.equal(up.gets.get('bundles/new.tar.gz'), 1, 'one upstream GET');
  t.equal(answers.filter((a) => a.status === 200 && a.body.equals(data)).length, 200, 'every agent got the bytes');
  t.same(up.heads, [], 'asked with the right hash, nothing to revalidate');
  // Later agents with the hash: served from the cache, the upstream is not asked at all.
  t.equal((await fetch(`${relay.url}${PREFIX}bundles/new.tar.gz?hash=${sha(data)}`)).status, 200);
  t.equal(up.gets.get('bundles/new.tar.gz'), 1);
  t.same(up.heads, []);
});

t.test('revalidated by hash: 304 keeps the cached copy, a change downloads again, 404 forgets', async (t) => {
  const up = await fakeUpstream(t);
  up.files.set('motd', Buffer.from('v1\n'));
  const relay = await startTestRelay(t, relayConfig(up.url, { 'shared_folder.max_age': '0' }));
  const get = async (q = '') => {
    const r = await fetch(`${relay.url}${PREFIX}motd${q}`);
    return { status: r.status, text: await r.text() };
  };
  t.same(await get(), { status: 200, text: 'v1\n' });
  t.same(await get(), { status: 200, text: 'v1\n' });
  t.equal(up.gets.get('motd'), 1, 'unchanged: no second download');
  t.same(up.heads, [`motd?${sha('v1\n')}`], 'revalidated with the cached hash');

  // HEAD on the relay, RUDDER semantics, sha256 and sha512.
  const head = async (q: string) => (await fetch(`${relay.url}${PREFIX}motd${q}`, { method: 'HEAD' })).status;
  t.equal(await head(`?hash=${sha('v1\n')}`), 304);
  t.equal(await head(`?hash=${sha('v1\n', 'sha512')}&hash_type=sha512`), 304);
  t.equal(await head(`?hash=${sha('other')}`), 200);
  t.equal(await head(''), 200);
  t.equal(await head('?hash=zz'), 400);

  up.files.set('motd', Buffer.from('v2\n'));
  t.same(await get(), { status: 200, text: 'v2\n' }, 'changed upstream: downloaded again');
  t.equal(up.gets.get('motd'), 2);
  t.same(await get(`?hash=${sha('v1\n')}`), { status: 200, text: 'v2\n' }, 'an old hash gets what the upstream has now');

  // Upstream down: the cached copy is served; a file never fetched is a 502.
  await up.stop();
  t.same(await get(), { status: 200, text: 'v2\n' });
  t.equal((await fetch(`${relay.url}${PREFIX}never-seen`)).status, 502);

  await up.restart();
  up.files.delete('motd');
  t.equal((await get()).status, 404, 'gone upstream: gone here');
  await up.stop();
  t.equal((await get()).status, 502, 'and no longer cached');
  t.equal((await fetch(`${relay.url}${PREFIX}a%2Fb`)).status, 400, 'paths are checked before anything else');
});

t.test('the governor caps concurrent upstream downloads and queues the rest', async (t) => {
  const up = await fakeUpstream(t);
  const N = 12;
  for (let i = 0; i < N; i++) up.files.set(`f${i}`, Buffer.from(`file ${i}\n`));
  const relay = await startTestRelay(t, relayConfig(up.url, { 'shared_folder.max_downloads': 3 }));
  up.state.hold = true;
  const all = Array.from({ length: N }, (_, i) => fetch(`${relay.url}${PREFIX}f${i}`).then(async (r) => ({ status: r.status, text: await r.text() })));
  let served = 0;
  while (served < N) {
    await until('a full round of downloads', () => up.held() === Math.min(3, N - served));
    t.ok(up.state.inFlight <= 3, `in flight ${up.state.inFlight}`);
    served += up.held();
    up.release();
  }
  const answers = await Promise.all(all);
  t.equal(up.state.maxInFlight, 3, 'never more than max_downloads at once');
  t.same(answers.map((a) => a.text), Array.from({ length: N }, (_, i) => `file ${i}\n`));
});

t.test('a full download queue answers 503 with Retry-After', async (t) => {
  const up = await fakeUpstream(t);
  for (const f of ['a', 'b', 'c']) up.files.set(f, Buffer.from(f));
  const relay = await startTestRelay(t, relayConfig(up.url, { 'shared_folder.max_downloads': 1, 'shared_folder.max_queued': 1 }));
  up.state.hold = true;
  const a = fetch(`${relay.url}${PREFIX}a`);
  await until('the first download', () => up.held() === 1);
  // One slot busy, one queue place: of b and c, one waits and the other is refused at once.
  const b = fetch(`${relay.url}${PREFIX}b`);
  const c = fetch(`${relay.url}${PREFIX}c`);
  const first = await Promise.race([b, c]);
  t.equal(first.status, 503, 'the one beyond the queue is refused without waiting');
  t.ok(first.headers.get('retry-after'), 'with Retry-After');
  t.equal(up.gets.size, 1, 'only the first file reached the upstream so far');
  up.state.hold = false;
  up.release();
  t.equal((await a).status, 200);
  const statuses = [(await b).status, (await c).status].sort();
  t.same(statuses, [200, 503], 'the queued one is served when the slot frees');
});

t.test('the real server is a shared-folder upstream', async (t) => {
  const dir = programDir(t);
  const shared = join(dir, 'shared');
  mkdirSync(join(shared, 'sub'), { recursive: true });
  writeFileSync(join(shared, 'sub', 'file.txt'), 'from the server\n');
  // The server asks for a node token (identity.require_token, its default), as for policies: a
  // request with none, passed on by a relay without an identity, is refused and the relay says so.
  const guarded = await startServer(
    loadServerConfig({ overrides: { 'general.data_dir': join(dir, 'guarded'), 'general.listen': '127.0.0.1:0', 'log.level': 'silent', 'policy.shared_folder': shared } }),
    silentLogger,
  );
  t.teardown(() => guarded.close());
  t.equal((await fetch(`${guarded.url}${PREFIX}sub/file.txt`)).status, 401, 'the server refuses an anonymous download');
  const toGuarded = await startTestRelay(t, relayConfig(guarded.url), { dir: join(dir, 'to-guarded') });
  const refused = await fetch(`${toGuarded.url}${PREFIX}sub/file.txt`);
  t.equal(refused.status, 401, 'the relay answers the refusal as is (the agent renews its token), not 502');
  t.equal((await fetch(`${toGuarded.url}${PREFIX}sub/file.txt`, { method: 'HEAD' })).status, 401);

  // Agents without tokens (RUDDER's): the server is told not to ask for them.
  const srv = await startServer(
    loadServerConfig({ overrides: { 'general.data_dir': join(dir, 'server'), 'general.listen': '127.0.0.1:0', 'log.level': 'silent', 'policy.shared_folder': shared, 'identity.require_token': false } }),
    silentLogger,
  );
  t.teardown(() => srv.close());
  const relay = await startTestRelay(t, relayConfig(srv.url), { dir: join(dir, 'relay') });
  const r = await fetch(`${relay.url}${PREFIX}sub/file.txt?hash=${sha('from the server\n')}`);
  t.equal(r.status, 200);
  t.equal(await r.text(), 'from the server\n');
  t.equal((await fetch(`${relay.url}${PREFIX}sub/missing`)).status, 404);
  t.equal((await fetch(`${relay.url}${PREFIX}sub/file.txt?hash=${sha('from the server\n')}`, { method: 'HEAD' })).status, 304);

  // server → relay → sub-relay, both revalidating every time: a change at the server shows through both.
  const mid = await startTestRelay(t, relayConfig(srv.url, { 'shared_folder.max_age': '0' }), { dir: join(dir, 'mid') });
  const leaf = await startTestRelay(t, relayConfig(mid.url, { 'shared_folder.max_age': '0' }), { dir: join(dir, 'leaf') });
  const viaLeaf = async () => (await fetch(`${leaf.url}${PREFIX}sub/file.txt`)).text();
  t.equal(await viaLeaf(), 'from the server\n');
  writeFileSync(join(shared, 'sub', 'file.txt'), 'changed at the server\n');
  t.equal(await viaLeaf(), 'changed at the server\n', 'the sub-relay revalidates through its relay, which revalidates at the server');
});

t.test('upstream downloads carry the relay\'s own token when it has one, else the asking agent\'s', async (t) => {
  const { default: Fastify } = await import('fastify');
  const { Upstream } = await import('@capstan/relayd/forward/upstream');
  const { sharedFolderRoutes } = await import('@capstan/relayd/api/routes/shared-folder');
  const { loadRelaydConfig } = await import('@capstan/relayd/config');
  const seen: Array<string | undefined> = [];
  const up = createServer((req, res) => {
    seen.push(req.headers.authorization);
    const ok = req.headers.authorization === 'Bearer relay-own' || req.headers.authorization === 'Bearer agent';
    if (!ok) return void res.writeHead(401).end();
    res.writeHead(200, { 'content-length': '3' }).end(req.method === 'HEAD' ? undefined : 'abc');
  });
  await new Promise<void>((r) => up.listen(0, '127.0.0.1', () => r()));
  t.teardown(() => up.close());
  const app = async (own?: () => Promise<Record<string, string>>) => {
    const dir = programDir(t);
    const config = loadRelaydConfig({ overrides: { 'spool.directory': join(dir, 'spool'), 'shared_folder.max_age': '0', 'log.level': 'silent' } });
    const upstream = new Upstream({ url: `http://127.0.0.1:${(up.address() as AddressInfo).port}`, timeoutMs: 5000, connections: 2 });
    const a = Fastify();
    // Only what the shared-folder route uses of the relay's context.
    sharedFolderRoutes(a, { config, log: silentLogger, upstream, ...(own ? { ownAuthorization: own } : {}) } as never);
    t.teardown(async () => {
      await a.close();
      await upstream.close();
    });
    return a;
  };
  const withOwn = await app(async () => ({ authorization: 'Bearer relay-own' }));
  const r1 = await withOwn.inject({ method: 'GET', url: `${PREFIX}x.txt`, headers: { authorization: 'Bearer agent-token-the-server-refuses' } });
  t.equal(r1.statusCode, 200);
  t.equal(r1.body, 'abc');
  t.same(seen, ['Bearer relay-own'], 'the relay presented its own token');
  seen.length = 0;
  const passOn = await app();
  t.equal((await passOn.inject({ method: 'GET', url: `${PREFIX}x.txt`, headers: { authorization: 'Bearer agent' } })).statusCode, 200);
  t.same(seen, ['Bearer agent'], 'without an identity the agent\'s token is passed on');
  seen.length = 0;
  const refused = await passOn.inject({ method: 'GET', url: `${PREFIX}y.txt`, headers: { authorization: 'Bearer stale' } });
  t.equal(refused.statusCode, 401, 'a refused token is answered as is');
});
