/**
 * Node identity at the server, in process (buildApp + inject) on a real SQLite store (the
 * keyring is in it, sealed): renewal by signed request for accepted nodes only, claims and per-group TTL, the
 * JWKS, replay refusal, forced renewal, rotation keeping old tokens valid, and key deletion
 * refused while a key is in use.
 */
import { readdirSync, statSync, writeFileSync } from 'node:fs';
import Database from 'better-sqlite3';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { compressSync, createNodeIdentity, generateSigningKey, HEADER_TOKEN_REQUEST, INVENTORY_TOKEN_FIELD, inventoryFileName, issueNodeToken, makeRenewRequest, signSmime, silentLogger, tokenRequestStamp, verifyNodeToken } from '@capstan/shared';
import { Spool } from '@capstan/toolkit';
import { buildApp } from '@capstan/server/api/app';
import { authorizeNodeToken } from '@capstan/server/api/routes/identity';
import { loadServerConfig } from '@capstan/server/config';
import { NodeIdentity } from '@capstan/server/identity/service';
import { identitySettings } from '@capstan/server/identity/settings';
import { openRegistry } from '@capstan/server/registry/open';
import { programDir } from '../helpers/programs.js';
import { setAcceptance, TEST_ADMIN } from '../helpers/node-changes.js';
import { composeDomain } from '@capstan/server/domain';

const TOKEN = 'x'.repeat(32);

async function setup(t: Test, overrides: Record<string, string> = {}, deps: { ingested?: (kind: string, name: string, ms: number) => Promise<boolean> } = {}) {
  const dir = programDir(t);
  const config = loadServerConfig({ overrides: { 'general.data_dir': dir, ...overrides } });
  const store = await openRegistry({ sqlitePath: join(dir, 'capstan.db') });
  const spool = new Spool({ root: join(dir, 'spool'), maxFileBytes: 1 << 20 });
  await spool.init();
  const clock = { now: new Date('2026-11-22T12:00:00Z') };
  const identity = await NodeIdentity.open({ dataDir: dir, store, log: silentLogger, ...identitySettings(config.identity), clock: () => clock.now });
  const app = buildApp({ config, store, domain: composeDomain({ store, log: silentLogger }), spool, log: silentLogger, adminToken: TOKEN, status: async () => ({}), identity, ...deps });
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
    await setAcceptance(store, id, accepted, clock.now.toISOString());
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
  const kid = (await s.identity.listKeys())[0]!.kid;
  t.same(h, { alg: 'EdDSA', kid, typ: 'JWT' });
  const iat = s.clock.now.getTime() / 1000;
  t.match(p, { sub: 'node:n1', capstan_node_id: 'n1', capstan_node_group: 'laptops', capstan_datacenter: 'dc1', aud: 'capstan', iat, nbf: iat, exp: iat + 8 * 3600 });
  t.equal(r.json.data.expires_at, new Date((iat + 8 * 3600) * 1000).toISOString());
  t.match(await s.store.identity.getToken('n1'), { kid, jti: p.jti, exp: iat + 8 * 3600 }, 'the signing kid is recorded on the node');
  t.ok(await verifyNodeToken(token, await s.jwks(), { nodeId: 'n1', now: s.clock.now }), 'verifies against the published JWKS');
  t.equal(statSync(join(s.dir, 'identity.secret')).mode & 0o777, 0o600, 'the secret sealing the keyring is private');
  t.same(readdirSync(s.dir).filter((n) => n.startsWith('identity.db')), [], 'no separate keyring file any more');
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
  // Renewing in the very second of a forced renewal (an agent or relay told at once by its relay)
  // gets a token dated at the forced time, not one refused as soon as it is issued.
  t.equal((await s.api('POST', '/api/1/nodes/n1/identity/renew')).status, 200);
  await t.rejects(authorize(req(fresh), 'n1'), { code: 'ERR_TOKEN_EXPIRED' });
  const sameSecond = (await s.renew(makeRenewRequest(id, 'n1', s.clock.now))).json.data.token as string;
  await authorize(req(sameSecond), 'n1');
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
  const oldKid = (await s.identity.listKeys())[0]!.kid;
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
  const oldKid = (await s.identity.listKeys())[0]!.kid;
  await s.identity.rotate(TEST_ADMIN);
  s.clock.now = new Date(s.clock.now.getTime() + 3601_000);
  t.same((await s.jwks()).keys.map((k: { kid: string }) => k.kid), [(await s.identity.listKeys()).find((k) => k.active)!.kid]);
  t.match(await s.api('DELETE', `/api/1/keys/${oldKid}`), { status: 200, json: { data: { nodes: 0 } } });
});

t.test('configuration: a TTL of 0 is refused, per group and overall', async (t) => {
  t.throws(() => loadServerConfig({ overrides: { 'identity.token_ttl': '0' } }), { code: 'ERR_CONFIG' });
  t.throws(() => loadServerConfig({ overrides: { 'identity.group_ttls': 'web=0' } }), { code: 'ERR_CONFIG' });
  t.throws(() => loadServerConfig({ overrides: { 'identity.group_ttls': 'web' } }), { code: 'ERR_CONFIG' });
  t.throws(() => loadServerConfig({ overrides: { 'identity.key_alg': 'HS256' } }), { code: 'ERR_CONFIG' });
  t.ok(loadServerConfig({ overrides: { 'identity.group_ttls': 'web=2h, db=3d', 'identity.key_alg': 'RS256' } }));
});

t.test('the keyring is in the registry database with its private keys sealed; a wrong or missing secret stops the start', async (t) => {
  const dir = programDir(t);
  const config = loadServerConfig({ overrides: { 'general.data_dir': dir } });
  const store = await openRegistry({ sqlitePath: join(dir, 'capstan.db') });
  t.teardown(() => store.close());
  const open = (over: { secretFile?: string } = {}) => NodeIdentity.open({ dataDir: dir, store, log: silentLogger, ...identitySettings(config.identity), ...over });
  const first = await open();
  const active = await first.activeKey();
  const [row] = await store.identity.allKeys();
  t.equal(row!.kid, active.kid);
  t.notMatch(row!.sealed_private, (active.privateJwk as { d: string }).d, 'the private key is not in the database in clear');
  t.match(row!.sealed_private, /^v1\./);
  t.equal((await open()).constructor, NodeIdentity, 'the same secret opens it again');
  t.equal((await (await open()).activeKey()).kid, active.kid, 'and finds the same key, no new keyring');

  const wrong = join(dir, 'other.secret');
  writeFileSync(wrong, 'an entirely different secret of enough length\n', { mode: 0o600 });
  await t.rejects(open({ secretFile: wrong }), { code: 'ERR_STARTUP', message: /does not open signing key .* same identity secret file/ });
  await t.rejects(open({ secretFile: join(dir, 'absent.secret') }), { code: 'ERR_STARTUP', message: /does not exist, but the database already holds a signing keyring/ });
  t.throws(() => statSync(join(dir, 'absent.secret')), 'no secret is made beside an existing keyring');
  writeFileSync(join(dir, 'short.secret'), 'too short\n');
  await t.rejects(open({ secretFile: join(dir, 'short.secret') }), { code: 'ERR_STARTUP', message: /at least 32 characters/ });
  t.equal((await store.identity.listKeys()).length, 1, 'none of the refused starts added a key');
});

t.test('an old identity.db is imported once (keys sealed, node tokens kept) and renamed', async (t) => {
  const dir = programDir(t);
  const config = loadServerConfig({ overrides: { 'general.data_dir': dir } });
  const store = await openRegistry({ sqlitePath: join(dir, 'capstan.db') });
  t.teardown(() => store.close());
  const nid = createNodeIdentity('n1');
  await store.createNode({ id: 'n1', hostname: 'n1.example', certificate: nid.certPem });
  await setAcceptance(store, 'n1', 'accepted', new Date().toISOString());
  // The file as servers before migration 4 wrote it.
  const oldKey = generateSigningKey();
  const token = await issueNodeToken({ key: oldKey, nodeId: 'n1', group: 'default', ttlSeconds: 3600 });
  const db = new Database(join(dir, 'identity.db'));
  db.exec(`CREATE TABLE signing_keys (kid TEXT PRIMARY KEY, alg TEXT NOT NULL, private_jwk TEXT NOT NULL, public_jwk TEXT NOT NULL,
      active INTEGER NOT NULL DEFAULT 0, created_at TEXT NOT NULL, retired_at TEXT, max_exp INTEGER NOT NULL DEFAULT 0) STRICT;
    CREATE TABLE node_tokens (node_id TEXT PRIMARY KEY, kid TEXT NOT NULL, jti TEXT NOT NULL, iat INTEGER NOT NULL, exp INTEGER NOT NULL,
      forced_after INTEGER NOT NULL DEFAULT 0) STRICT;
    CREATE TABLE renew_nonces (nonce TEXT PRIMARY KEY, until INTEGER NOT NULL) STRICT;`);
  db.prepare('INSERT INTO signing_keys VALUES (?, ?, ?, ?, 1, ?, NULL, ?)').run(oldKey.kid, 'EdDSA', JSON.stringify(oldKey.privateJwk), JSON.stringify(oldKey.publicJwk), '2026-01-01T00:00:00.000Z', token.claims.exp);
  db.prepare('INSERT INTO node_tokens VALUES (?, ?, ?, ?, ?, 0)').run('n1', oldKey.kid, token.claims.jti, token.claims.iat, token.claims.exp);
  db.close();

  const identity = await NodeIdentity.open({ dataDir: dir, store, log: silentLogger, ...identitySettings(config.identity) });
  t.match(await identity.listKeys(), [{ kid: oldKey.kid, active: true, nodes: 1 }], 'the old key, still active, with its node');
  t.match(await store.identity.getToken('n1'), { kid: oldKey.kid, jti: token.claims.jti });
  t.ok(await identity.verify(token.token, 'n1'), 'a token issued before the upgrade still verifies');
  t.same(readdirSync(dir).filter((n) => n.startsWith('identity.db')), ['identity.db.imported']);
  // The next start finds the keyring and no file to import.
  const again = await NodeIdentity.open({ dataDir: dir, store, log: silentLogger, ...identitySettings(config.identity) });
  t.equal((await again.listKeys()).length, 1);
});

t.test('an old identity.db that cannot be read stops the start with ERR_STARTUP, naming it', async (t) => {
  const dir = programDir(t, { 'identity.db': 'not a database, just text long enough to not be empty'.repeat(20) });
  const config = loadServerConfig({ overrides: { 'general.data_dir': dir } });
  const store = await openRegistry({ sqlitePath: join(dir, 'capstan.db') });
  t.teardown(() => store.close());
  await t.rejects(NodeIdentity.open({ dataDir: dir, store, log: silentLogger, ...identitySettings(config.identity) }),
    { code: 'ERR_STARTUP', message: /cannot import the old identity state .*identity\.db/ });
  t.same(await store.identity.listKeys(), [], 'no keyring was made instead');
});

t.test('a token asked for inside a signed inventory comes back in the answer to its upload, with the renewal checks', async (t) => {
  const s = await setup(t);
  const id = await s.node('n1', 'accepted', ['web']);
  const pending = await s.node('p1', 'pending');
  const other = createNodeIdentity('n1');
  // Each upload has a name of its own: the same name with other bytes is refused (409) before any token check.
  let named = 0;
  const inventory = (nid: { keyPem: string; certPem: string }, nodeId: string, extra: Record<string, unknown> = {},
    at = new Date(s.clock.now.getTime() - 1000 * ++named)) => ({
    name: inventoryFileName(nodeId, at, 'zstd'),
    body: compressSync(signSmime(Buffer.from(JSON.stringify({
      node_id: nodeId, hostname: `${nodeId}.example`, certificate: nid.certPem, agent_version: '0.1.0', policy_server: 'relay',
      os: { name: 'debian', version: '12', kernel: '6.1', arch: 'x86_64' }, ...extra,
    })), nid), 'zstd'),
  });
  const put = async (inv: { name: string; body: Buffer }, ask = true) => {
    const res = await s.app.inject({ method: 'PUT', url: `/inventories/${inv.name}`, payload: inv.body, headers: { 'content-type': 'application/octet-stream', ...(ask && { [HEADER_TOKEN_REQUEST]: '1' }) } });
    return { status: res.statusCode, data: JSON.parse(res.body).data as { file: string; token?: string; expires_at?: string } };
  };
  const stamp = (at = s.clock.now) => ({ [INVENTORY_TOKEN_FIELD]: tokenRequestStamp(at) });

  const asked = inventory(id, 'n1', stamp());
  const r = await put(asked);
  t.equal(r.status, 201, 'the inventory is on disk');
  t.equal(r.data.file, asked.name);
  const claims = await verifyNodeToken(r.data.token!, await s.jwks(), { nodeId: 'n1', now: s.clock.now });
  t.match(claims, { capstan_node_id: 'n1', capstan_node_group: 'web', capstan_datacenter: 'dc1', exp: s.clock.now.getTime() / 1000 + 86400 });
  t.equal(r.data.expires_at, new Date(claims.exp * 1000).toISOString());
  t.match(await s.store.identity.getToken('n1'), { jti: claims.jti }, 'recorded on the node like a renewal');

  // Every refusal leaves the upload itself accepted (2xx: the bytes are on disk) and carries no token.
  const noToken = async (inv: { name: string; body: Buffer }, why: string, ask = true) => {
    const res = await put(inv, ask);
    t.equal(res.status, 201, `${why}: still stored`);
    t.equal(res.data.token, undefined, `${why}: no token`);
  };
  await noToken(asked, 'the same upload replayed');
  await noToken(inventory(id, 'n1', stamp()), 'no x-capstan-token-request header (a relay forwarding it)', false);
  await noToken(inventory(id, 'n1'), 'no token request inside');
  await noToken(inventory(id, 'n1', stamp(new Date(s.clock.now.getTime() - 600_000))), 'a stale request');
  await noToken(inventory(other, 'n1', stamp()), 'signed by a key other than the pinned one');
  await noToken(inventory(pending, 'p1', stamp()), 'a pending node');
  await noToken(inventory(createNodeIdentity('ghost'), 'ghost', stamp()), 'an unknown node');
  t.match(await s.store.identity.getToken('n1'), { jti: claims.jti }, 'none of them issued a token');
  // A replayed renewal nonce is refused across both ways of asking.
  const reused = tokenRequestStamp(s.clock.now);
  t.ok((await put(inventory(id, 'n1', { [INVENTORY_TOKEN_FIELD]: reused }))).data.token);
  await noToken(inventory(id, 'n1', { [INVENTORY_TOKEN_FIELD]: reused }, new Date(s.clock.now.getTime() + 1000)), 'its nonce used again');
});

t.test('a newcomer accepted by its inventory gets its token in the answer once the ingest is done with it', async (t) => {
  // The ingest as the answer sees it: done with a file once it registered the node it names.
  const waited: Array<{ name: string; ms: number }> = [];
  let ingest: (name: string) => Promise<boolean> = async () => false;
  const s = await setup(t, { 'enrollment.token_wait': '3s' }, {
    ingested: async (kind, name, ms) => {
      t.equal(kind, 'inventories');
      waited.push({ name, ms });
      return ingest(name);
    },
  });
  const upload = async (nodeId: string, at: Date) => {
    const nid = createNodeIdentity(nodeId);
    const name = inventoryFileName(nodeId, at, 'zstd');
    const body = compressSync(signSmime(Buffer.from(JSON.stringify({
      node_id: nodeId, hostname: `${nodeId}.example`, certificate: nid.certPem, agent_version: '0.1.0', policy_server: 'relay',
      os: { name: 'debian', version: '12', kernel: '6.1', arch: 'x86_64' }, [INVENTORY_TOKEN_FIELD]: tokenRequestStamp(s.clock.now),
    })), nid), 'zstd');
    ingest = async () => {
      // What an enrollment rule does with this inventory: the node registered, accepted, its certificate pinned.
      if (nodeId.startsWith('auto')) {
        await s.store.createNode({ id: nodeId, hostname: `${nodeId}.example`, certificate: nid.certPem, region: 'dc1', groups: [] });
        await setAcceptance(s.store, nodeId, 'accepted', s.clock.now.toISOString());
      }
      return true;
    };
    const res = await s.app.inject({ method: 'PUT', url: `/inventories/${name}`, payload: body, headers: { 'content-type': 'application/octet-stream', [HEADER_TOKEN_REQUEST]: '1' } });
    return { status: res.statusCode, data: JSON.parse(res.body).data as { token?: string } };
  };

  const auto = await upload('auto-1', new Date(s.clock.now.getTime() - 1000));
  t.equal(auto.status, 201);
  t.same(waited, [{ name: inventoryFileName('auto-1', new Date(s.clock.now.getTime() - 1000), 'zstd'), ms: 3000 }], 'waited for its own file, at most token_wait');
  const claims = await verifyNodeToken(auto.data.token!, await s.jwks(), { nodeId: 'auto-1', now: s.clock.now });
  t.equal(claims.capstan_node_id, 'auto-1', 'the token of the node its inventory just registered');

  const pending = await upload('newcomer', new Date(s.clock.now.getTime() - 2000));
  t.equal(pending.status, 201, 'a node no rule accepts: stored');
  t.equal(pending.data.token, undefined, 'and no token');
  t.equal(waited.length, 2);

  // The ingest not done in time: answered without a token (the agent renews at its next run).
  ingest = async () => false;
  const late = await s.app.inject({ method: 'PUT', url: `/inventories/${inventoryFileName('auto-2', s.clock.now, 'zstd')}`, payload: Buffer.from('x'), headers: { 'content-type': 'application/octet-stream', [HEADER_TOKEN_REQUEST]: '1' } });
  t.equal(late.statusCode, 201);
  t.equal(JSON.parse(late.body).data.token, undefined);

  // An accepted node is answered at once, without waiting.
  const known = await s.node('n9', 'accepted');
  const before = waited.length;
  const name = inventoryFileName('n9', s.clock.now, 'zstd');
  const body = compressSync(signSmime(Buffer.from(JSON.stringify({ node_id: 'n9', hostname: 'n9.example', certificate: known.certPem, [INVENTORY_TOKEN_FIELD]: tokenRequestStamp(s.clock.now) })), known), 'zstd');
  const res = await s.app.inject({ method: 'PUT', url: `/inventories/${name}`, payload: body, headers: { 'content-type': 'application/octet-stream', [HEADER_TOKEN_REQUEST]: '1' } });
  t.ok(JSON.parse(res.body).data.token, 'token');
  t.equal(waited.length, before, 'no wait');
});

t.test('with key_alg = "RS256" the keyring key is RSA and tokens are RS256; rotation keeps the configured algorithm', async (t) => {
  const s = await setup(t, { 'identity.key_alg': 'RS256' });
  const id = await s.node('n1');
  const token = (await s.renew(makeRenewRequest(id, 'n1', s.clock.now))).json.data.token as string;
  const header = JSON.parse(Buffer.from(token.split('.')[0]!, 'base64url').toString());
  const [key] = await s.identity.listKeys();
  t.same(header, { alg: 'RS256', kid: key!.kid, typ: 'JWT' });
  t.match((await s.jwks()).keys, [{ kty: 'RSA', alg: 'RS256', kid: key!.kid, use: 'sig' }]);
  t.notOk((await s.jwks()).keys.some((k: Record<string, unknown>) => 'd' in k || 'p' in k), 'no private part published');
  t.ok(await verifyNodeToken(token, await s.jwks(), { nodeId: 'n1', now: s.clock.now }));
  t.match(await s.identity.rotate(TEST_ADMIN), { alg: 'RS256', active: true });
});
