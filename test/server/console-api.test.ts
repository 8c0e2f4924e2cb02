/**
 * The console's server side, in process (buildApp + inject) on a real SQLite store: its files
 * with the Content-Security-Policy, compression and caching; sign-in, the cookie's attributes,
 * CSRF on every write made with it, sign-out, tampered and expired cookies; bearer tokens
 * unchanged; the read endpoints it added (compliance history, worst nodes, a node's identity).
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import t, { type Test } from 'tap';
import { silentLogger, zeroCounts } from '@capstan/shared';
import { Spool } from '@capstan/toolkit';
import { buildApp } from '@capstan/server/api/app';
import { loadServerConfig } from '@capstan/server/config';
import { ComplianceHistory } from '@capstan/server/console/history';
import type { Principal } from '@capstan/server/console/principal';
import { ConsoleSignIns, COOKIE_NAME, ensureConsoleSecret } from '@capstan/server/console/signin';
import { CONSOLE_DIR, loadAssets } from '@capstan/server/console/static';
import { openRegistry } from '@capstan/server/registry/open';
import { inventory } from './store-suite.js';
import { programDir } from '../helpers/programs.js';
import { composeDomain } from '@capstan/server/domain';
import { serverWithApi } from '../helpers/admin-app.js';

const TOKEN = 'a'.repeat(40);
const VIEWER = 'v'.repeat(40);

async function setup(t: Test, opts: { now?: () => number; secure?: boolean } = {}) {
  const dir = programDir(t);
  const config = loadServerConfig({ overrides: { 'general.data_dir': dir } });
  const store = await openRegistry({ sqlitePath: join(dir, 'capstan.db') });
  const spool = new Spool({ root: join(dir, 'spool'), maxFileBytes: 1 << 20 });
  await spool.init();
  const secret = await ensureConsoleSecret(join(dir, 'console.secret'));
  const signIns = new ConsoleSignIns({ secret, ttlMs: 3_600_000, secure: opts.secure ?? false, ...(opts.now && { now: opts.now }) });
  let clock = Date.parse('2026-11-25T12:00:00Z');
  const history = new ComplianceHistory({
    file: join(dir, 'compliance-history.jsonl'), intervalMs: 600_000, retentionMs: 86_400_000, log: silentLogger,
    summary: async () => ({ nodes: 1, nodes_with_data: 1, counts: { ...zeroCounts(), success: 3, error: 1 } }),
    now: () => new Date(clock),
  });
  // Who holds which token: the admin token, and a viewer (the roles' resolver has this shape).
  const resolveToken = async (tok: string): Promise<Principal | null> =>
    (tok === TOKEN ? { name: 'admin', role: 'admin' } : tok === VIEWER ? { name: 'vera', role: 'viewer' } : null);
  const app = buildApp({
    config, store, domain: composeDomain({ store, log: silentLogger }), spool, log: silentLogger, adminToken: TOKEN, status: async () => ({}), resolveToken,
    console: { signIns, assets: await loadAssets(CONSOLE_DIR), history },
  });
  t.teardown(async () => {
    await app.close();
    await store.close();
  });
  const call = async (method: string, url: string, headers: Record<string, string> = {}, body?: unknown) => {
    const res = await app.inject({
      method: method as 'GET', url, headers: { ...headers, ...(body !== undefined && { 'content-type': 'application/json' }) },
      ...(body !== undefined && { payload: JSON.stringify(body) }),
    });
    const json = /json/.test(String(res.headers['content-type'])) && res.body ? JSON.parse(res.body) : null;
    return { status: res.statusCode, json, headers: res.headers, raw: res.rawPayload };
  };
  const signIn = async (token = TOKEN) => {
    const r = await call('POST', '/console/sign-in', {}, { token });
    const cookie = String(r.headers['set-cookie']).split(';')[0]!;
    return { ...r, cookie, csrf: r.json?.data?.csrf_token as string };
  };
  return { app, store, call, signIn, history, dir, tick: (ms: number) => (clock += ms) };
}

t.test('the console is built and served with its policy, compressed and cached', async (t) => {
  t.ok(existsSync(join(CONSOLE_DIR, 'index.html')), `built into ${CONSOLE_DIR} (npm run build)`);
  const { call } = await setup(t);
  const index = await call('GET', '/', { 'accept-encoding': 'gzip, br' });
  t.equal(index.status, 200);
  t.match(index.headers['content-type'], /^text\/html/);
  const csp = String(index.headers['content-security-policy']);
  t.match(csp, /script-src 'self'/);
  t.match(csp, /style-src 'self'/);
  t.match(csp, /frame-ancestors 'none'/);
  t.notMatch(csp, /unsafe-inline|unsafe-eval/, 'no inline script or style');
  t.equal(index.headers['content-encoding'], 'br');
  t.equal(index.headers['cache-control'], 'no-cache', 'the page is revalidated');
  const html = brotliDecompressSync(index.raw).toString();
  t.notMatch(html, /<script>|<style|style=/, 'no inline script or style in the page');
  const js = /src="(\/assets\/app-[^"]+\.js)"/.exec(html)![1]!;
  const again = await call('GET', '/', { 'if-none-match': String(index.headers.etag) });
  t.equal(again.status, 304);
  const asset = await call('GET', js, { 'accept-encoding': 'gzip' });
  t.equal(asset.status, 200);
  t.equal(asset.headers['content-encoding'], 'gzip');
  t.equal(asset.headers.vary, 'Accept-Encoding');
  t.match(asset.headers['cache-control'], /max-age=31536000, immutable/);
  t.ok(gunzipSync(asset.raw).length > asset.raw.length, 'compressed');
  const plain = await call('GET', js);
  t.equal(plain.headers['content-encoding'], undefined, 'no Accept-Encoding: as is');
  t.equal((await call('GET', '/assets/nope.js')).json.error.code, 'ERR_NOT_FOUND');
});

t.test('sign-in: a cookie that is HttpOnly and SameSite=Strict (Secure under TLS), and writes need its CSRF token', async (t) => {
  const { call, signIn, store } = await setup(t);
  await store.upsertFromInventory(inventory('n1'));
  t.equal((await call('POST', '/console/sign-in', {}, { token: 'wrong' })).json.error.code, 'ERR_UNAUTHORIZED');
  t.equal((await call('POST', '/console/sign-in', {}, { token: TOKEN, extra: 1 })).json.error.code, 'ERR_BAD_REQUEST');
  const form = await call('POST', '/console/sign-in', { 'content-type': 'application/x-www-form-urlencoded' });
  t.equal(form.json.error.code, 'ERR_UNSUPPORTED_MEDIA', 'a cross-site form cannot sign a browser in');
  const s = await signIn();
  t.equal(s.status, 201);
  t.match(s.json.data, { name: 'admin', role: 'admin', expires_at: String });
  const setCookie = String(s.headers['set-cookie']);
  t.match(setCookie, new RegExp(`^${COOKIE_NAME}=[A-Za-z0-9_-]+;`));
  t.match(setCookie, /; HttpOnly/);
  t.match(setCookie, /; SameSite=Strict/);
  t.match(setCookie, /; Max-Age=3600;/);
  t.notMatch(setCookie, /Secure/, 'plain HTTP on loopback: no Secure flag');
  t.notMatch(setCookie, new RegExp(TOKEN), 'the token is sealed, not readable in the cookie');

  t.same((await call('GET', '/console/sign-in', { cookie: s.cookie })).json.data, s.json.data);
  t.equal((await call('GET', '/api/1/nodes', { cookie: s.cookie })).json.total, 1, 'reads with the cookie alone');
  const noCsrf = await call('POST', '/api/1/nodes/n1/accept', { cookie: s.cookie });
  t.equal(noCsrf.status, 403);
  t.equal(noCsrf.json.error.code, 'ERR_CSRF');
  t.equal((await call('POST', '/api/1/nodes/n1/accept', { cookie: s.cookie, 'x-csrf-token': 'x'.repeat(43) })).json.error.code, 'ERR_CSRF');
  const other = await signIn();
  t.equal((await call('POST', '/api/1/nodes/n1/accept', { cookie: s.cookie, 'x-csrf-token': other.csrf })).json.error.code, 'ERR_CSRF', 'bound to its own sign-in');
  t.equal((await store.getNode('n1'))!.accepted, 'pending', 'nothing was done');
  const ok = await call('POST', '/api/1/nodes/n1/accept', { cookie: s.cookie, 'x-csrf-token': s.csrf });
  t.equal(ok.status, 200);
  t.equal(ok.json.data.accepted, 'accepted');
  // Bearer tokens are as before, and need no CSRF token (no browser sends them on its own).
  t.equal((await call('GET', '/api/1/nodes', { authorization: `Bearer ${TOKEN}` })).status, 200);
  t.equal((await call('GET', '/api/1/nodes', { authorization: 'Bearer nope' })).json.error.code, 'ERR_UNAUTHORIZED');
  t.equal((await call('GET', '/api/1/nodes')).json.error.code, 'ERR_UNAUTHORIZED');

  // Sign-out is a write: CSRF first; then the cookie is refused even if replayed.
  t.equal((await call('DELETE', '/console/sign-in', { cookie: s.cookie })).json.error.code, 'ERR_CSRF');
  const out = await call('DELETE', '/console/sign-in', { cookie: s.cookie, 'x-csrf-token': s.csrf });
  t.equal(out.status, 204);
  t.match(String(out.headers['set-cookie']), /Max-Age=0/);
  const replay = await call('GET', '/api/1/nodes', { cookie: s.cookie });
  t.equal(replay.status, 401);
  t.match(String(replay.headers['set-cookie']), /Max-Age=0/, 'the browser is told to drop it');
  t.equal((await call('GET', '/api/1/nodes', { cookie: other.cookie })).status, 200, 'other sign-ins live on');

  // An altered cookie, or one sealed with another secret, is no sign-in.
  const v = other.cookie.split('=')[1]!;
  const flipped = `${v.slice(0, 20)}${v[20] === 'A' ? 'B' : 'A'}${v.slice(21)}`;
  t.equal((await call('GET', '/api/1/nodes', { cookie: `${COOKIE_NAME}=${flipped}` })).status, 401);
  t.equal((await call('GET', '/api/1/nodes', { cookie: `${COOKIE_NAME}=${'x'.repeat(5000)}` })).status, 401);
});

t.test('a sign-out holds across a restart of the server: the cookie stays refused', async (t) => {
  const dir = programDir(t);
  const start = async () => serverWithApi(t, {}, dir);
  const first = await start();
  const at = (path: string, init: RequestInit = {}) => fetch(`${first.server.url}${path}`, init);
  const signedIn = await at('/console/sign-in', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: first.server.adminToken }) });
  t.equal(signedIn.status, 201);
  const cookie = signedIn.headers.get('set-cookie')!.split(';')[0]!;
  const csrf = ((await signedIn.json()) as { data: { csrf_token: string } }).data.csrf_token;
  const kept = await at('/console/sign-in', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: first.server.adminToken }) });
  const keptCookie = kept.headers.get('set-cookie')!.split(';')[0]!;
  t.equal((await at('/console/sign-in', { method: 'DELETE', headers: { cookie, 'x-csrf-token': csrf } })).status, 204);
  t.equal((await at('/api/1/nodes', { headers: { cookie } })).status, 401);
  await first.close();

  const second = await start();
  const again = (c: string) => fetch(`${second.server.url}/api/1/nodes`, { headers: { cookie: c } });
  t.equal((await again(cookie)).status, 401, 'signed out before the restart: still refused');
  t.equal((await again(keptCookie)).status, 200, 'a sign-in that was not ended lives on');
});

t.test('a sign-in expires, carries the principal its token resolves to, and TLS makes its cookie Secure', async (t) => {
  let now = Date.parse('2026-11-25T12:00:00Z');
  const { call, signIn } = await setup(t, { now: () => now, secure: true });
  const s = await signIn(VIEWER);
  t.match(String(s.headers['set-cookie']), /; Secure/);
  t.match(s.json.data, { name: 'vera', role: 'viewer', expires_at: '2026-11-25T13:00:00.000Z' });
  t.equal((await call('GET', '/api/1/nodes', { cookie: s.cookie })).status, 200);
  now += 3_600_000;
  const late = await call('GET', '/api/1/nodes', { cookie: s.cookie });
  t.equal(late.status, 401, 'past signin_ttl');
  t.equal((await call('GET', '/console/sign-in', { cookie: s.cookie })).status, 401);
});

t.test('the console secret is made once, 0600, and a short one is refused', async (t) => {
  const dir = programDir(t, { short: 'abc\n' });
  const a = await ensureConsoleSecret(join(dir, 'console.secret'));
  t.equal(a.length, 32);
  t.same(await ensureConsoleSecret(join(dir, 'console.secret')), a, 'kept across starts');
  const { stat } = await import('node:fs/promises');
  t.equal((await stat(join(dir, 'console.secret'))).mode & 0o777, 0o600);
  await t.rejects(ensureConsoleSecret(join(dir, 'short')), /less than 32 bytes/);
});

t.test('compliance history, worst nodes and a node identity: the read endpoints the console added', async (t) => {
  const { call, history, tick, dir, store } = await setup(t);
  const auth = { authorization: `Bearer ${TOKEN}` };
  await history.record();
  tick(600_000);
  await history.record();
  const all = await call('GET', '/api/1/compliance/history', auth);
  t.equal(all.json.total, 2);
  t.match(all.json.data[0], { at: '2026-11-25T12:00:00.000Z', nodes: 1, compliance: 75, counts: { success: 3, error: 1 } });
  const since = await call('GET', `/api/1/compliance/history?from=${encodeURIComponent('2026-11-25T12:05:00Z')}`, auth);
  t.same(since.json.data.map((p: { at: string }) => p.at), ['2026-11-25T12:10:00.000Z']);
  t.equal((await call('GET', '/api/1/compliance/history?from=yesterday', auth)).json.error.code, 'ERR_BAD_REQUEST');
  t.equal((await call('GET', '/api/1/compliance/history?since=1', auth)).json.error.code, 'ERR_BAD_REQUEST', 'unknown parameter');
  // Kept across restarts, and what is past retention leaves the file.
  tick(86_400_000 + 1_200_000);
  await history.record();
  const lines = (await readFile(join(dir, 'compliance-history.jsonl'), 'utf8')).trim().split('\n');
  t.equal(lines.length, 1, 'rewritten without the expired points');
  const reloaded = new ComplianceHistory({ file: join(dir, 'compliance-history.jsonl'), intervalMs: 0, retentionMs: 86_400_000, log: silentLogger, summary: async () => ({ nodes: 0, nodes_with_data: 0, counts: zeroCounts() }), now: () => new Date('2026-11-26T12:40:00Z') });
  await reloaded.load();
  t.equal(reloaded.series().length, 1);

  t.same((await call('GET', '/api/1/compliance/worst-nodes', auth)).json, { data: [], total: 0 });
  t.equal((await call('GET', '/api/1/compliance/worst-nodes?limit=101', auth)).json.error.code, 'ERR_BAD_REQUEST');
  t.equal((await call('GET', '/api/1/compliance/worst-nodes?limit=x', auth)).json.error.code, 'ERR_BAD_REQUEST');
  await store.upsertFromInventory(inventory('n2'));
  t.match((await call('GET', '/api/1/nodes/n2/identity', auth)).json.data, { node_id: 'n2', state: 'none', kid: null, certificate_fingerprint: /^[0-9a-f]{64}$/ });
  t.equal((await call('GET', '/api/1/nodes/zz/identity', auth)).json.error.code, 'ERR_NODE_UNKNOWN');
});

t.test('max_age: fleet-wide aggregates from a recent copy, one computation at a time, refreshed while in use', async (t) => {
  const { AggregateCache } = await import('@capstan/server/console/cache');
  let now = 1_000_000;
  let computed = 0;
  const cache = new AggregateCache(() => now);
  const compute = async () => ++computed;
  const [a, b] = await Promise.all([cache.get('k', 60_000, compute), cache.get('k', 60_000, compute)]);
  t.same([a.value, b.value, computed], [1, 1, 1], 'two callers at once: one computation');
  now += 20_000;
  t.equal((await cache.get('k', 60_000, compute)).value, 1, 'young enough: the copy');
  now += 20_000;
  const stale = await cache.get('k', 60_000, compute);
  t.equal(stale.value, 1, 'past half its age: still served…');
  await new Promise((r) => setImmediate(r));
  t.equal(computed, 2, '…and refreshed in the background');
  t.equal((await cache.get('k', 60_000, compute)).value, 2);
  now += 2_000;
  t.equal((await cache.get('k', 1_000, compute)).value, 3, 'a caller wanting a younger copy gets one computed');
  const failing = new AggregateCache(() => now);
  await t.rejects(failing.get('f', 60_000, async () => {
    throw new Error('database down');
  }));
  t.equal((await failing.get('f', 60_000, async () => 'back')).value, 'back', 'a failure is not kept');

  const { call } = await setup(t);
  const auth = { authorization: `Bearer ${TOKEN}` };
  const first = await call('GET', '/api/1/compliance/rules?max_age=60', auth);
  t.equal(first.status, 200);
  t.match(first.headers['x-capstan-as-of'], /^\d{4}-\d\d-\d\dT/);
  const second = await call('GET', '/api/1/compliance/rules?max_age=60', auth);
  t.equal(second.headers['x-capstan-as-of'], first.headers['x-capstan-as-of'], 'the same copy');
  t.equal((await call('GET', '/api/1/compliance/rules', auth)).headers['x-capstan-as-of'], undefined, 'without max_age: computed now');
  for (const url of ['/api/1/compliance?max_age=60', '/api/1/lifecycle?max_age=60', '/api/1/changes/histogram?by=hour&max_age=60', '/api/1/compliance/worst-nodes?max_age=60']) {
    const r = await call('GET', url, auth);
    t.equal(r.status, 200, url);
    t.match(r.headers['x-capstan-as-of'], /^\d{4}-/, `${url}: says when it was computed`);
  }
  t.equal((await call('GET', '/api/1/changes?max_age=60', auth)).json.error.code, 'ERR_BAD_REQUEST', 'the list of changes is always read now');
  t.equal((await call('GET', '/api/1/compliance/nodes?max_age=60', auth)).json.error.code, 'ERR_BAD_REQUEST', 'nor is the export cached');
  t.equal((await call('GET', '/api/1/compliance/groups?max_age=0', auth)).json.error.code, 'ERR_BAD_REQUEST');
  t.equal((await call('GET', '/api/1/compliance/directives?max_age=3601', auth)).json.error.code, 'ERR_BAD_REQUEST');
});
