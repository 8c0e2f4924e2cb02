/**
 * Relays authenticate relays. At a relay: a sub-relay's remote-run link (`?relay=1`, plain or
 * upgraded) and its output posts need a relay's token naming it — none → 401, an agent's →
 * 403 ERR_TOKEN_NOT_RELAY, another relay's → 403 ERR_TOKEN_WRONG_NODE — whatever require_token
 * says for agents; `require_relay_token = false` is the explicit opt-out. A relay's own token
 * (identity/own.ts) comes by signed renewal request with its own key, is kept 0600, renewed when a
 * third of its life is left (the link then reconnects with it), renewed at once after a refusal.
 */
import http from 'node:http';
import { connect } from 'node:net';
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { checkRenewRequest, generateSigningKey, issueNodeToken, jwksOf, RELAY_ROLE, silentLogger } from '@capstan/shared';
import { loadRelaydConfig } from '@capstan/relayd';
import { Upstream } from '@capstan/relayd/forward/upstream';
import { ensureRelayKey, RelayToken } from '@capstan/relayd/identity/own';
import { raw } from './helpers/raw.js';
import { startTestRelay } from './helpers/relay.js';
import { testTokens } from './helpers/tokens.js';
import { until } from './helpers/upstream.js';
import { collectEvents } from '../helpers/http.js';
import { programDir } from '../helpers/programs.js';

const keys = testTokens(programDir(t));
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const code = (body: string) => (JSON.parse(body) as { error?: { code?: string } }).error?.code;

/** An upgraded link attempt: the status and, for a refusal, the body. */
function upgrade(base: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const s = connect(Number(url.port), url.hostname, () => {
      s.write(`GET ${path} HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: capstan-remote-run\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`);
    });
    let buf = '';
    s.on('data', (d: Buffer) => {
      buf += d.toString();
      if (buf.startsWith('HTTP/1.1 101') && buf.includes('"hello"')) {
        s.destroy();
        resolve({ status: 101, body: '' });
      }
    });
    s.on('end', () => resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(buf)?.[1]), body: buf.slice(buf.indexOf('\r\n\r\n') + 4) }));
    s.on('error', reject);
  });
}

let relays = 0;
async function relay(t: Parameters<typeof startTestRelay>[0], overrides: Record<string, unknown> = {}) {
  const dir = join(programDir(t), `relay-${++relays}`);
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'nodes.json'), JSON.stringify({ sub: { 'policy-server': 'root' }, leaf: { 'policy-server': 'sub' }, agent: { 'policy-server': 'root' } }));
  return startTestRelay(t, { ...keys.overrides, 'general.nodes_list_file': join(dir, 'nodes.json'), 'remote_run.connect_wait': '2s', ...overrides }, { dir });
}

const LINK = '/remote-run/listen/sub?relay=1';

t.test('a sub-relay\'s link needs its own relay token, plain and upgraded', async (t) => {
  const r = await relay(t);
  const cases: Array<[string, Record<string, string>, number, string]> = [
    ['no token', {}, 401, 'ERR_TOKEN_INVALID'],
    ['a malformed header', { authorization: 'Bearer a b' }, 401, 'ERR_TOKEN_INVALID'],
    ['garbage', bearer('x.y.z'), 401, 'ERR_TOKEN_INVALID'],
    ['the node\'s agent token', bearer(await keys.token('sub')), 403, 'ERR_TOKEN_NOT_RELAY'],
    ['an agent\'s token', bearer(await keys.token('agent')), 403, 'ERR_TOKEN_NOT_RELAY'],
    ['another relay\'s token', bearer(await keys.relayToken('other')), 403, 'ERR_TOKEN_WRONG_NODE'],
    ['an unknown key\'s', bearer((await issueNodeToken({ key: generateSigningKey(), nodeId: 'sub', group: 'g', role: RELAY_ROLE, ttlSeconds: 60 })).token), 401, 'ERR_TOKEN_UNKNOWN_KEY'],
  ];
  for (const [what, headers, status, c] of cases) {
    const plain = await raw(r.url, 'GET', LINK, { headers });
    t.equal(plain.status, status, `plain, ${what}`);
    t.equal(code(plain.body), c);
    const up = await upgrade(r.url, LINK, headers);
    t.equal(up.status, status, `upgraded, ${what}`);
    t.equal(code(up.body), c);
  }
  t.equal(r.handle.context.remoteRun.hub.size, 0, 'nobody linked');
  t.equal((await upgrade(r.url, LINK, bearer(await keys.relayToken('sub')))).status, 101, 'the sub-relay\'s own token links');
  // A relay is a node too: its token opens its own agent-style connection.
  t.equal((await upgrade(r.url, '/remote-run/listen/sub', bearer(await keys.relayToken('sub')))).status, 101);
});

t.test('require_token off (RUDDER agents) leaves relay links checked; require_relay_token off opens them', async (t) => {
  const agentsOpen = await relay(t, { 'identity.require_token': false });
  t.equal((await raw(agentsOpen.url, 'GET', LINK)).status, 401, 'relay links still need a relay token');
  t.equal((await upgrade(agentsOpen.url, '/remote-run/listen/agent')).status, 101, 'agents need none there');
  const relaysOpen = await relay(t, { 'identity.require_relay_token': false });
  t.equal((await upgrade(relaysOpen.url, LINK)).status, 101, 'the opt-out: an old sub-relay links without a token');
  t.equal((await upgrade(relaysOpen.url, '/remote-run/listen/agent')).status, 401, 'agents still need theirs');
});

t.test('a run handed to a sub-relay is answered with its relay token only', async (t) => {
  const r = await relay(t);
  const events: Array<{ type: string; id?: string }> = [];
  const req = http.get(`${r.url}${LINK}`, { headers: bearer(await keys.relayToken('sub')) });
  t.teardown(() => req.destroy());
  req.on('error', () => {});
  req.once('response', (res) => collectEvents(res, events));
  await until(() => (events.some((e) => e.type === 'hello') ? true : undefined), 'the hello');
  const answer = fetch(`${r.url}/rudder/relay-api/1/remote-run/nodes/leaf`, { method: 'POST', body: 'keep_output=true', headers: { 'content-type': 'application/x-www-form-urlencoded' } }).then((x) => x.text());
  const run = await until(() => events.find((e) => e.type === 'run'), 'the run event on the link');
  const out = `/remote-run/output/${run.id}`;
  const lines = `${JSON.stringify({ type: 'started', node: 'leaf' })}\n${JSON.stringify({ type: 'done', node: 'leaf', code: 0 })}\n`;
  for (const [headers, status, c] of [
    [{}, 401, 'ERR_TOKEN_INVALID'],
    [bearer(await keys.token('leaf')), 403, 'ERR_TOKEN_NOT_RELAY'],
    [bearer(await keys.relayToken('other')), 403, 'ERR_TOKEN_WRONG_NODE'],
  ] as const) {
    const res = await raw(r.url, 'POST', out, { body: lines, headers });
    t.equal(res.status, status);
    t.equal(code(res.body), c);
  }
  t.equal((await raw(r.url, 'POST', out, { body: lines, headers: bearer(await keys.relayToken('sub')) })).status, 200);
  t.equal(await answer, 'leaf: [started]\nleaf: [done, exit 0]\n', 'the sub-relay\'s answer, and only it, came through');
});

/** A stand-in server for a relay's own token: checks renewals against the relay's certificate. */
async function tokenServer(t: Parameters<typeof startTestRelay>[0], cert: () => string, nodeId: string) {
  const key = generateSigningKey();
  const seen = new Set<string>();
  const st = { ttl: 3, role: true as boolean, renewals: 0, refuse: 0 };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => void (async () => {
      if (req.url === '/.well-known/jwks.json') return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(jwksOf([key])));
      if (req.method !== 'POST' || req.url !== '/identity/renew') return res.writeHead(404).end();
      st.renewals++;
      try {
        await checkRenewRequest(Buffer.concat(chunks), cert(), nodeId, (n) => (seen.has(n) ? false : (seen.add(n), true)));
      } catch (err) {
        return res.writeHead(401, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { code: (err as { code: string }).code } }));
      }
      const { token } = await issueNodeToken({ key, nodeId, group: 'relays', ttlSeconds: st.ttl, ...(st.role && { role: RELAY_ROLE }) });
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ data: { token } }));
    })());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, st };
}

const claims = (token: string) => JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as { iat: number; exp: number; jti: string; capstan_role?: string; capstan_node_id: string };

t.test('the relay\'s own key and token: made once (0600), got by signed request, renewed when a third of its life is left', async (t) => {
  const dir = programDir(t);
  let certPem = '';
  const up = await tokenServer(t, () => certPem, 'relay-a');
  const config = loadRelaydConfig({ overrides: { 'general.node_id': 'relay-a', 'spool.directory': join(dir, 'spool'), 'upstream.url': up.url, 'remote_run.link_upstream': true } });
  const pair = await ensureRelayKey(config);
  certPem = pair.certPem;
  t.equal((await stat(join(dir, 'spool', 'relay.key'))).mode & 0o777, 0o600, 'the key is 0600');
  t.equal((await ensureRelayKey(config)).keyPem, pair.keyPem, 'made once, then reused');
  const upstream = new Upstream({ url: up.url, timeoutMs: 5000, connections: 2 });
  t.teardown(() => upstream.close());
  const warnings: string[] = [];
  const log = { ...silentLogger, warn: (_o: unknown, msg?: string) => void warnings.push(String(msg)), child: () => log } as unknown as typeof silentLogger;
  const token = await RelayToken.open({ config, upstream, log });
  t.teardown(() => token.stop());
  const renewed: string[] = [];
  token.on('renewed', (tok: string) => renewed.push(tok));
  await token.start();
  const file = join(dir, 'spool', 'relay.token');
  const first = (await readFile(file, 'utf8')).trim();
  t.equal((await stat(file)).mode & 0o777, 0o600, 'the token is kept 0600');
  t.match(claims(first), { capstan_node_id: 'relay-a', capstan_role: 'relay' });
  t.same(await token.authorization(), bearer(first), 'shown while it has more than a third of its life');
  t.equal(up.st.renewals, 1);
  // 3 s tokens: the timer renews past 2 s, untouched by any caller; 'renewed' tells the link.
  const second = await until(async () => {
    const now = (await readFile(file, 'utf8')).trim();
    return now !== first ? now : undefined;
  }, 'the renewal', 10_000);
  t.ok(Date.now() / 1000 < claims(first).exp, 'renewed before the old token expired');
  t.ok(claims(second).iat >= claims(first).iat + 1, 'when a third of its life was left');
  await until(() => (renewed.includes(second) ? true : undefined), 'the renewed event');
  // A refusal upstream (a forced renewal): the next use renews at once, and not again right after.
  up.st.ttl = 3600;
  const before = up.st.renewals;
  token.refused();
  const third = (await token.authorization()).authorization!.slice(7);
  t.not(third, second);
  t.equal(up.st.renewals, before + 1);
  token.refused();
  t.same(await token.authorization(), bearer(third), 'forced renewals are rate-limited');
  t.equal(up.st.renewals, before + 1);
  // Registered as a node but not as a relay: the token comes without the role, and the relay says so.
  up.st.role = false;
  const relayless = await RelayToken.open({ config: loadRelaydConfig({ overrides: { 'general.node_id': 'relay-a', 'spool.directory': join(dir, 'spool'), 'upstream.url': up.url, 'identity.token_file': join(dir, 'other.token') } }), upstream, log });
  t.teardown(() => relayless.stop());
  await relayless.start();
  t.ok(warnings.some((w) => /without the relay role/.test(w)), 'a warning names the fix');
});

t.test('a relay whose key or certificate is not its own refuses to start, with a coded error', async (t) => {
  const dir = programDir(t);
  const base = { 'spool.directory': join(dir, 'spool') };
  const a = loadRelaydConfig({ overrides: { ...base, 'general.node_id': 'relay-a' } });
  const pair = await ensureRelayKey(a);
  await t.rejects(ensureRelayKey(loadRelaydConfig({ overrides: { ...base, 'general.node_id': 'relay-b' } })), { code: 'ERR_CERTIFICATE' });
  await t.rejects(startTestRelay(t, { ...base, 'general.node_id': 'relay-b', 'remote_run.link_upstream': true }, { dir }), { code: 'ERR_CERTIFICATE' });
  // A key file damaged, or swapped for another key: found at start, not at the first renewal.
  await writeFile(pair.keyPath, 'not a key\n');
  await t.rejects(ensureRelayKey(a), { code: 'ERR_KEY' });
  const other = await ensureRelayKey(loadRelaydConfig({ overrides: { 'general.node_id': 'relay-a', 'spool.directory': join(dir, 'other') } }));
  await writeFile(pair.keyPath, other.keyPem);
  await t.rejects(ensureRelayKey(a), { code: 'ERR_KEY' });
  await writeFile(pair.certPath, 'garbage');
  await t.rejects(ensureRelayKey(a), { code: 'ERR_CERTIFICATE' });
  t.equal((await readFile(pair.keyPath, 'utf8')), other.keyPem, 'nothing was overwritten');
});

t.test('a damaged token file is no token: the relay renews, and never crashes', async (t) => {
  const dir = programDir(t);
  let certPem = '';
  const up = await tokenServer(t, () => certPem, 'relay-c');
  const config = loadRelaydConfig({ overrides: { 'general.node_id': 'relay-c', 'spool.directory': join(dir, 'spool'), 'upstream.url': up.url } });
  certPem = (await ensureRelayKey(config)).certPem;
  up.st.ttl = 3600;
  for (const junk of ['', 'garbage', 'a.b.c', `x.${Buffer.from('{"iat":"1"}').toString('base64url')}.y`]) {
    await writeFile(join(dir, 'spool', 'relay.token'), junk);
    const upstream = new Upstream({ url: up.url, timeoutMs: 5000, connections: 1 });
    const token = await RelayToken.open({ config, upstream, log: silentLogger });
    const auth = await token.authorization();
    token.stop();
    await upstream.close();
    t.match(auth.authorization, /^Bearer [\w-]+\.[\w-]+\.[\w-]+$/, `renewed over ${JSON.stringify(junk)}`);
  }
  // Upstream down: no token to show, no crash.
  const upstream = new Upstream({ url: 'http://127.0.0.1:9', timeoutMs: 2000, connections: 1 });
  t.teardown(() => upstream.close());
  await writeFile(join(dir, 'spool', 'relay.token'), 'garbage');
  const token = await RelayToken.open({ config, upstream, log: silentLogger });
  t.teardown(() => token.stop());
  t.same(await token.authorization(), {});
});
