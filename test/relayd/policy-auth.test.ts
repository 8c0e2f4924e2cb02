/**
 * Only the node itself may fetch its policy, through a caching relay too: a real server and a
 * real relay (in process, port 0) with node tokens required and `[policies] max_age` long, so the
 * relay answers from its cache without asking the server. Another node's token, or none, never
 * gets a cached copy — with the server up or down.
 */
import { join } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import { createNodeIdentity, makeRenewRequest, verifyBundle } from '@capstan/shared';
import { startTestRelay } from './helpers/relay.js';
import { programDir } from '../helpers/programs.js';
import { serverWithApi } from '../helpers/admin-app.js';
import { setAcceptance } from '../helpers/node-changes.js';

t.test('a cached policy goes to its own node only', async (t) => {
  const dir = programDir(t);
  const { server: srv, close: stopServer } = await serverWithApi(t, { 'general.data_dir': join(dir, 'server'), 'log.level': 'silent' }, dir);
  const nodes: Record<string, ReturnType<typeof createNodeIdentity>> = {};
  for (const id of ['node-a', 'node-b']) {
    nodes[id] = createNodeIdentity(id);
    await srv.store.createNode({ id, hostname: `${id}.example`, certificate: nodes[id]!.certPem });
    await setAcceptance(srv.store, id, 'accepted', new Date().toISOString());
  }
  const admin = async (path: string, body: unknown) => {
    const res = await request(`${srv.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${srv.adminToken}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    await res.body.dump();
    return res.statusCode;
  };
  t.equal(await admin('/api/1/directives', { id: 'secret-conf', method: 'file_content', params: { path: '/etc/app.conf', content: 'password=hunter2\n' } }), 201);
  t.equal(await admin('/api/1/groups', { id: 'both', nodes: ['node-a', 'node-b'] }), 201);
  t.equal(await admin('/api/1/rules', { id: 'app', directives: ['secret-conf'], groups: ['both'] }), 201);

  const relay = await startTestRelay(t, {
    'upstream.url': srv.url, 'identity.require_token': true, 'identity.jwks_min_refresh': '0s', 'policies.max_age': '1h', 'policies.push_hints': false,
  });
  const token = async (id: string) => {
    const res = await request(`${relay.url}/identity/renew`, { method: 'POST', headers: { 'content-type': 'application/pkcs7-mime' }, body: makeRenewRequest(nodes[id]!, id) });
    return ((await res.body.json()) as { data: { token: string } }).data.token;
  };
  const [a, b] = [await token('node-a'), await token('node-b')];
  const get = async (base: string, node: string, tok?: string) => {
    const res = await request(`${base}/policies/${node}/rules`, { headers: tok ? { authorization: `Bearer ${tok}` } : {} });
    const text = await res.body.text();
    return { status: res.statusCode, json: JSON.parse(text) as any };
  };

  const published = (await (await request(`${srv.url}/api/1/keys/policy`)).body.json()) as { data: { key_id: string; public_key: string } };
  const key = { keyId: published.data.key_id, publicKeyPem: published.data.public_key };
  const own = await get(relay.url, 'node-a', a);
  t.equal(own.status, 200);
  t.same(verifyBundle(own.json, key, 'node-a').directives.map((d) => d.id), ['secret-conf']);

  // node-a's policy is in the relay's cache now, and max_age lets the relay answer from it alone.
  for (const base of [relay.url, srv.url]) {
    t.match(await get(base, 'node-a', b), { status: 403, json: { error: { code: 'ERR_TOKEN_WRONG_NODE' } } }, `${base === relay.url ? 'relay' : 'server'}: another node's token`);
    t.match(await get(base, 'node-a'), { status: 401, json: { error: { code: 'ERR_TOKEN_INVALID' } } }, `${base === relay.url ? 'relay' : 'server'}: no token`);
  }
  await stopServer();
  t.equal((await get(relay.url, 'node-a', a)).status, 200, 'server down: the node still gets its cached policy');
  t.match(await get(relay.url, 'node-a', b), { status: 403, json: { error: { code: 'ERR_TOKEN_WRONG_NODE' } } }, 'and no one else does');
});
