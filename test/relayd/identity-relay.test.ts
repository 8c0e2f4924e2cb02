/**
 * Node tokens checked at a real relay (in process, port 0) in front of a real server: renewal
 * passed through, stateless verification against the cached JWKS (also with the server down and
 * the relay restarted), refetch on rotation, and the coded refusals — missing, expired, unknown
 * key (401), another node's token (403) — on shared-folder and remote-run listen.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { createNodeIdentity, generateSigningKey, issueNodeToken, makeRenewRequest } from '@capstan/shared';
import { protectedNode } from '@capstan/relayd/identity/routes';
import { raw } from './helpers/raw.js';
import { startTestRelay } from './helpers/relay.js';
import { programDir } from '../helpers/programs.js';
import { serverWithApi } from '../helpers/admin-app.js';
import { setAcceptance, TEST_ADMIN } from '../helpers/node-changes.js';

async function setup(t: Test) {
  const dir = programDir(t);
  const { server: srv, close: stopServer } = await serverWithApi(t, { 'general.data_dir': join(dir, 'server'), 'log.level': 'silent' }, dir);
  const shared = join(dir, 'shared');
  mkdirSync(shared);
  writeFileSync(join(shared, 'motd'), 'hello\n');
  const relayDir = join(dir, 'relay');
  const overrides = {
    'upstream.url': srv.url,
    'identity.require_token': true,
    'identity.clock_skew': '5s',
    'identity.jwks_min_refresh': '0s',
    'shared_folder.path': shared,
  };
  // Registered before the relay starts: its first node list (synced from the server) has them.
  const nodes: Record<string, ReturnType<typeof createNodeIdentity>> = {};
  for (const id of ['node-a', 'node-b']) {
    nodes[id] = createNodeIdentity(id);
    await srv.store.createNode({ id, hostname: `${id}.example`, certificate: nodes[id]!.certPem });
    await setAcceptance(srv.store, id, 'accepted', new Date().toISOString());
  }
  const relay = await startTestRelay(t, overrides, { dir: relayDir });
  const renew = async (url: string, id: string) => {
    const res = await request(`${url}/identity/renew`, { method: 'POST', headers: { 'content-type': 'application/pkcs7-mime' }, body: makeRenewRequest(nodes[id]!, id) });
    return { status: res.statusCode, json: (await res.body.json()) as any };
  };
  const get = async (url: string, path: string, token?: string) => {
    const ac = new AbortController();
    const res = await request(`${url}${path}`, { headers: token ? { authorization: `Bearer ${token}` } : {}, signal: ac.signal, bodyTimeout: 0 });
    // remote-run listen streams forever: read the first chunk only.
    let text = '';
    for await (const chunk of res.body) {
      text += chunk.toString();
      break;
    }
    ac.abort();
    let json: any = null;
    try {
      json = JSON.parse(text);
    } catch { /* text answer */ }
    return { status: res.statusCode, text, json };
  };
  return { dir, srv, stopServer, relay, relayDir, overrides, renew, get, nodes };
}

t.test('protected paths and the node they are about', async (t) => {
  t.equal(protectedNode('/policies/n1/rules'), 'n1');
  t.equal(protectedNode('/remote-run/listen/n%201?relay=1'), 'n 1');
  t.equal(protectedNode('/rudder/relay-api/1/shared-folder/a/b'), null);
  t.equal(protectedNode('/reports/x'), undefined);
  t.equal(protectedNode('/identity/renew'), undefined);
});

t.test('a token obtained through the relay opens shared-folder; missing, garbage, unknown-key and expired tokens get 401', async (t) => {
  const s = await setup(t);
  const r = await s.renew(s.relay.url, 'node-a');
  t.equal(r.status, 200, 'renewal passed through to the server');
  const token = r.json.data.token as string;
  t.match(await s.get(s.relay.url, '/rudder/relay-api/1/shared-folder/motd', token), { status: 200, text: 'hello\n' });
  t.match(await s.get(s.relay.url, '/rudder/relay-api/1/shared-folder/motd'), { status: 401, json: { error: { code: 'ERR_TOKEN_INVALID' } } });
  t.match(await s.get(s.relay.url, '/rudder/relay-api/1/shared-folder/motd', 'garbage'), { status: 401, json: { error: { code: 'ERR_TOKEN_INVALID' } } });
  const rogue = await issueNodeToken({ key: generateSigningKey(), nodeId: 'node-a', group: 'default', ttlSeconds: 3600 });
  t.match(await s.get(s.relay.url, '/rudder/relay-api/1/shared-folder/motd', rogue.token), { status: 401, json: { error: { code: 'ERR_TOKEN_UNKNOWN_KEY' } } });
  // Signed by the server's real key, but two hours old with a one-hour life.
  const key = await s.srv.identity.activeKey();
  const old = await issueNodeToken({ key, nodeId: 'node-a', group: 'default', ttlSeconds: 3600, now: new Date(Date.now() - 7200_000) });
  t.match(await s.get(s.relay.url, '/rudder/relay-api/1/shared-folder/motd', old.token), { status: 401, json: { error: { code: 'ERR_TOKEN_EXPIRED' } } });
  // Pending and unknown nodes are refused an identity, through the relay too.
  const res = await request(`${s.relay.url}/identity/renew`, { method: 'POST', headers: { 'content-type': 'application/pkcs7-mime' }, body: makeRenewRequest(createNodeIdentity('ghost'), 'ghost') });
  t.equal(res.statusCode, 403);
  t.match(await res.body.json(), { error: { code: 'ERR_NODE_UNKNOWN' } });
  // The relay publishes the keys it verifies with.
  const jwks = await s.get(s.relay.url, '/.well-known/jwks.json');
  t.same(jwks.json.keys.map((k: { kid: string }) => k.kid), [key.kid]);
});

t.test('remote-run listen: the node\'s own token connects, another node\'s token is 403, none is 401 (plain and upgraded)', async (t) => {
  const s = await setup(t);
  const a = (await s.renew(s.relay.url, 'node-a')).json.data.token as string;
  const ok = await s.get(s.relay.url, '/remote-run/listen/node-a', a);
  t.equal(ok.status, 200);
  t.match(ok.text, /"type":"hello"/);
  t.match(await s.get(s.relay.url, '/remote-run/listen/node-b', a), { status: 403, json: { error: { code: 'ERR_TOKEN_WRONG_NODE' } } });
  t.match(await s.get(s.relay.url, '/remote-run/listen/node-b'), { status: 401 });
  const upgrade = { connection: 'Upgrade', upgrade: 'capstan-remote-run' };
  const wrong = await raw(s.relay.url, 'GET', '/remote-run/listen/node-b', { headers: { ...upgrade, authorization: `Bearer ${a}` } });
  t.equal(wrong.status, 403, 'upgrade with another node\'s token refused');
  t.match(JSON.parse(wrong.body), { error: { code: 'ERR_TOKEN_WRONG_NODE' } });
  t.equal((await raw(s.relay.url, 'GET', '/remote-run/listen/node-b', { headers: upgrade })).status, 401);
  // The node's own token: switched protocols, and the hello line arrives.
  const u = new URL(s.relay.url);
  const hello = await new Promise<string>((resolve, reject) => {
    const req = httpRequest({ host: u.hostname, port: u.port, path: '/remote-run/listen/node-a', headers: { ...upgrade, authorization: `Bearer ${a}` } });
    req.on('upgrade', (_res, socket, head: Buffer) => {
      // The hello may come with the 101 (in head) or just after it.
      if (head.length > 0) {
        resolve(head.toString());
        socket.destroy();
        return;
      }
      socket.once('data', (d: Buffer) => {
        resolve(d.toString());
        socket.destroy();
      });
    });
    req.on('response', (res) => reject(new Error(`answered ${res.statusCode}`)));
    req.on('error', reject);
    req.end();
  });
  t.match(hello, /"type":"hello","node":"node-a"/);
});

t.test('rotation: the relay refetches on the new kid and keeps accepting old tokens; with the server down and the relay restarted, the disk cache verifies', async (t) => {
  const s = await setup(t);
  const oldToken = (await s.renew(s.relay.url, 'node-a')).json.data.token as string;
  t.equal((await s.get(s.relay.url, '/rudder/relay-api/1/shared-folder/motd', oldToken)).status, 200);
  await s.srv.identity.rotate(TEST_ADMIN);
  const newToken = (await s.renew(s.relay.url, 'node-b')).json.data.token as string;
  t.equal((await s.get(s.relay.url, '/rudder/relay-api/1/shared-folder/motd', newToken)).status, 200, 'new kid fetched on first sight');
  t.equal((await s.get(s.relay.url, '/rudder/relay-api/1/shared-folder/motd', oldToken)).status, 200, 'old token still accepted');

  await s.stopServer();
  await s.relay.handle.close();
  const again = await startTestRelay(t, s.overrides, { dir: s.relayDir });
  t.equal((await s.get(again.url, '/rudder/relay-api/1/shared-folder/motd', newToken)).status, 200, 'verified from the cached JWKS, server down');
  t.equal((await s.get(again.url, '/rudder/relay-api/1/shared-folder/motd', oldToken)).status, 200);
  const renewDown = await request(`${again.url}/identity/renew`, { method: 'POST', body: makeRenewRequest(s.nodes['node-a']!, 'node-a') });
  t.equal(renewDown.statusCode, 502, 'renewal needs the server');
  await renewDown.body.dump();
});
