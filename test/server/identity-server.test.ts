/**
 * Node identity at the server, in process (buildApp + inject) on a real SQLite store and a real
 * keyring file: renewal by signed request for accepted nodes only, claims and per-group TTL, the
 * JWKS, replay refusal, forced renewal, rotation keeping old tokens valid, and key deletion
 * refused while a key is in use.
 */
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { createNodeIdentity, makeRenewRequest, silentLogger, Spool, verifyNodeToken } from '@capstan/shared';
import { buildApp } from '@capstan/server/api/app';
import { authorizeNodeToken } from '@capstan/server/api/routes/identity';
import { loadServerConfig } from '@capstan/server/config';
import { NodeIdentity } from '@capstan/server/identity/service';
import { identitySettings } from '@capstan/server/identity/settings';
import { openStore } from '@capstan/server/store/index';

const TOKEN = 'x'.repeat(32);

async function setup(t: Test, overrides: Record<string, string> = {}) {
  const dir = t.testdir();
  const config = loadServerConfig({ overrides: { 'general.data_dir': dir, ...overrides } });
  const store = await openStore({ sqlitePath: join(dir, 'capstan.db') });
  const spool = new Spool({ root: join(dir, 'spool'), maxFileBytes: 1 << 20 });
  await spool.init();
  const clock = { now: new Date('2026-11-22T12:00:00Z') };
  const identity = new NodeIdentity({ dataDir: dir, store, log: silentLogger, ...identitySettings(config.identity), clock: () => clock.now });
  const app = buildApp({ config, store, spool, log: silentLogger, adminToken: TOKEN, status: async () => ({}), identity });
  t.teardown(async () => {
    await app.close();
    await store.close();
    identity.close();
  });
  const api = async (method: string, url: string) => {
    const res = await app.inject({ method: method as 'GET', url, headers: { authorization: `Bearer ${TOKEN}` } });
    return { status: res.statusCode, json: JSON.parse(res.body) };
  };
  const node = async (id: string, accepted: 'accepted' | 'pending' | 'refused' = 'accepted', groups: string[] = []) => {
    const nid = createNodeIdentity(id);
    await store.createNode({ id, hostname: `${id}.example`, certificate: nid.certPem, region: 'dc1', groups });
    await store.setAcceptance(id, accepted, clock.now.toISOString());
    return nid;
  };
  const renew = async (body: Buffer) => {
    const res = await app.inject({ method: 'POST', url: '/identity/renew', headers: { 'content-type': 'application/pkcs7-mime' }, payload: body });
    return { status: res.statusCode, json: JSON.parse(res.body) };
  };
  const jwks = async () => JSON.parse((await app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).body);
  return { dir, store, identity, api, node, renew, jwks, clock, app };
}

t.test('an accepted node renews by signed request and gets a token with the documented claims', async (t) => {
  const s = await setup(t, { 'identity.group_ttls': 'laptops=8h' });
  const id = await s.node('n1', 'accepted', ['laptops', 'web']);
  const r = await s.renew(makeRenewRequest(id, 'n1', s.clock.now));
  t.equal(r.status, 200);
  const token = r.json.data.token as string;
  const [h, p] = token.split('.').slice(0, 2).map((x) => JSON.parse(Buffer.from(x, 'base64url').toString()));
  const kid = s.identity.listKeys()[0]!.kid;
  t.same(h, { alg: 'EdDSA', kid, typ: 'JWT' });
  const iat = s.clock.now.getTime() / 1000;
  t.match(p, { sub: 'node:n1', capstan_node_id: 'n1', capstan_node_group: 'laptops', capstan_datacenter: 'dc1', aud: 'capstan', iat, nbf: iat, exp: iat + 8 * 3600 });
  t.equal(r.json.data.expires_at, new Date((iat + 8 * 3600) * 1000).toISOString());
  t.match(s.identity.state.getToken('n1'), { kid, jti: p.jti, exp: iat + 8 * 3600 }, 'the signing kid is recorded on the node');
  t.ok(await verifyNodeToken(token, await s.jwks(), { nodeId: 'n1', now: s.clock.now }), 'verifies against the published JWKS');
  for (const f of readdirSync(s.dir).filter((n) => n.startsWith('identity.db'))) {
    t.equal(statSync(join(s.dir, f)).mode & 0o777, 0o600, `${f} (keyring, its WAL) is private`);
  }
  // Default TTL for a node without a group override.
  const id2 = await s.node('n2');
  const r2 = await s.renew(makeRenewRequest(id2, 'n2', s.clock.now));
  t.equal(JSON.parse(Buffer.from(r2.json.data.token.split('.')[1], 'base64url').toString()).exp, iat + 86400);
});

t.test('pending, refused and unknown nodes, wrong signers, stale and replayed requests are refused', async (t) => {
  const s = await setup(t);
  const pending = await s.node('p1', 'pending');
  const refused = await s.node('r1', 'refused');
  const good = await s.node('n1');
  t.match(await s.renew(makeRenewRequest(pending, 'p1', s.clock.now)), { status: 403, json: { error: { code: 'ERR_NODE_PENDING' } } });
  t.match(await s.renew(makeRenewRequest(refused, 'r1', s.clock.now)), { status: 403, json: { error: { code: 'ERR_NODE_REFUSED' } } });
  t.match(await s.renew(makeRenewRequest(createNodeIdentity('ghost'), 'ghost', s.clock.now)), { status: 403, json: { error: { code: 'ERR_NODE_UNKNOWN' } } });
  // Signed by another node's key while naming n1: the pinned certificate does not match.
  const other = await s.renew(makeRenewRequest(refused, 'n1', s.clock.now));
  t.equal(other.status, 400);
  t.match(other.json.error.code, /^ERR_SMIME/);
  const stale = await s.renew(makeRenewRequest(good, 'n1', new Date(s.clock.now.getTime() - 600_000)));
  t.match(stale, { status: 401, json: { error: { code: 'ERR_RENEW_STALE' } } });
  const once = makeRenewRequest(good, 'n1', s.clock.now);
  t.equal((await s.renew(once)).status, 200);
  t.match(await s.renew(once), { status: 401, json: { error: { code: 'ERR_RENEW_REPLAY' } } }, 'a replayed request is refused');
  t.match(await s.renew(Buffer.from('not smime')), { status: 400 });
});

t.test('forced renewal: tokens issued before it are refused, the next renewal works', async (t) => {
  const s = await setup(t);
  const id = await s.node('n1');
  const authorize = authorizeNodeToken(s.identity);
  const token = (await s.renew(makeRenewRequest(id, 'n1', s.clock.now))).json.data.token as string;
  const req = (tok: string) => ({ headers: { authorization: `Bearer ${tok}` } }) as never;
  await authorize(req(token), 'n1');
  await t.rejects(authorize(req(token), 'n2'), { code: 'ERR_TOKEN_WRONG_NODE', statusCode: 403 });
  await t.rejects(authorize({ headers: {} } as never, 'n1'), { code: 'ERR_TOKEN_INVALID', statusCode: 401 });
  t.match(await s.api('POST', '/api/1/nodes/n1/identity/renew'), { status: 200, json: { data: { node_id: 'n1' } } });
  t.match(await s.api('POST', '/api/1/nodes/nope/identity/renew'), { status: 404, json: { error: { code: 'ERR_NODE_UNKNOWN' } } });
  await t.rejects(authorize(req(token), 'n1'), { code: 'ERR_TOKEN_EXPIRED', statusCode: 401 }, 'the old token is refused');
  s.clock.now = new Date(s.clock.now.getTime() + 2000);
  const fresh = (await s.renew(makeRenewRequest(id, 'n1', s.clock.now))).json.data.token as string;
  await authorize(req(fresh), 'n1');
});

t.test('forced renewal of a group reaches its nodes only', async (t) => {
  const s = await setup(t);
  const a = await s.node('a1', 'accepted', ['web']);
  const b = await s.node('b1', 'accepted', ['db']);
  const ta = (await s.renew(makeRenewRequest(a, 'a1', s.clock.now))).json.data.token as string;
  const tb = (await s.renew(makeRenewRequest(b, 'b1', s.clock.now))).json.data.token as string;
  t.match(await s.api('POST', '/api/1/groups/web/identity/renew'), { status: 200, json: { data: { group: 'web', nodes: 1 } } });
  await t.rejects(s.identity.verify(ta, 'a1'), { code: 'ERR_TOKEN_EXPIRED' });
  t.ok(await s.identity.verify(tb, 'b1'), 'another group is untouched');
});

t.test('rotation keeps old tokens valid; deleting a key in use is refused with the node count unless forced', async (t) => {
  const s = await setup(t);
  const id = await s.node('n1');
  const old = (await s.renew(makeRenewRequest(id, 'n1', s.clock.now))).json.data.token as string;
  const oldKid = s.identity.listKeys()[0]!.kid;
  const rot = await s.api('POST', '/api/1/keys/rotate');
  t.equal(rot.status, 201);
  const newKid = rot.json.data.kid as string;
  t.not(newKid, oldKid);
  const keys = (await s.api('GET', '/api/1/keys')).json.data as Array<{ kid: string; active: boolean; nodes: number; published: boolean }>;
  t.match(keys.find((k) => k.kid === oldKid), { active: false, nodes: 1, published: true });
  t.match(keys.find((k) => k.kid === newKid), { active: true, nodes: 0, published: true });
  t.same((await s.jwks()).keys.map((k: { kid: string }) => k.kid).sort(), [oldKid, newKid].sort(), 'both keys published');
  t.ok(await s.identity.verify(old, 'n1'), 'the token signed by the old key still verifies');
  // New tokens are signed by the new key.
  const id2 = await s.node('n2');
  const t2 = (await s.renew(makeRenewRequest(id2, 'n2', s.clock.now))).json.data.token as string;
  t.equal(JSON.parse(Buffer.from(t2.split('.')[0]!, 'base64url').toString()).kid, newKid);

  t.match(await s.api('DELETE', `/api/1/keys/${oldKid}`), { status: 409, json: { error: { code: 'ERR_CONFLICT', nodes: 1 } } });
  t.match(await s.api('DELETE', `/api/1/keys/${newKid}?force=true`), { status: 409 }, 'the active key cannot be deleted');
  t.match(await s.api('DELETE', '/api/1/keys/nokey'), { status: 404 });
  t.match(await s.api('DELETE', `/api/1/keys/${oldKid}?force=maybe`), { status: 400 });
  t.match(await s.api('DELETE', `/api/1/keys/${oldKid}?force=true`), { status: 200, json: { data: { kid: oldKid, nodes: 1 } } });
  await t.rejects(s.identity.verify(old, 'n1'), { code: 'ERR_TOKEN_UNKNOWN_KEY', statusCode: 401 });
});

t.test('a retired key leaves the JWKS once its last token expired, and may then be deleted freely', async (t) => {
  const s = await setup(t, { 'identity.token_ttl': '1h' });
  const id = await s.node('n1');
  await s.renew(makeRenewRequest(id, 'n1', s.clock.now));
  const oldKid = s.identity.listKeys()[0]!.kid;
  s.identity.rotate();
  s.clock.now = new Date(s.clock.now.getTime() + 3601_000);
  t.same((await s.jwks()).keys.map((k: { kid: string }) => k.kid), [s.identity.listKeys().find((k) => k.active)!.kid]);
  t.match(await s.api('DELETE', `/api/1/keys/${oldKid}`), { status: 200, json: { data: { nodes: 0 } } });
});

t.test('configuration: a TTL of 0 is refused, per group and overall', async (t) => {
  t.throws(() => loadServerConfig({ overrides: { 'identity.token_ttl': '0' } }), { code: 'ERR_CONFIG' });
  t.throws(() => loadServerConfig({ overrides: { 'identity.group_ttls': 'web=0' } }), { code: 'ERR_CONFIG' });
  t.throws(() => loadServerConfig({ overrides: { 'identity.group_ttls': 'web' } }), { code: 'ERR_CONFIG' });
  t.throws(() => loadServerConfig({ overrides: { 'identity.key_alg': 'HS256' } }), { code: 'ERR_CONFIG' });
  t.ok(loadServerConfig({ overrides: { 'identity.group_ttls': 'web=2h, db=3d', 'identity.key_alg': 'RS256' } }));
});
