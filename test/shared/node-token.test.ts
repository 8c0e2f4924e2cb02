import t from 'tap';
import { importJWK, SignJWT } from 'jose';
import { checkRenewRequest, createNodeIdentity, generateSigningKey, issueNodeToken, jwksOf, makeRenewRequest, RELAY_ROLE, tokenKeyId, tokenNeedsRenewal, verifyNodeToken } from '@capstan/shared';

const ed = generateSigningKey('EdDSA');
const rsa = generateSigningKey('RS256');
const jwks = jwksOf([ed, rsa]);
const now = new Date('2026-11-22T12:00:00Z');
const later = (s: number) => new Date(now.getTime() + s * 1000);

t.test('claims and header are the ones relays and admins rely on', async (t) => {
  const { token, claims } = await issueNodeToken({ key: ed, nodeId: 'n1', group: 'web', datacenter: 'dc1', ttlSeconds: 86400, now });
  const [h, p] = token.split('.').slice(0, 2).map((x) => JSON.parse(Buffer.from(x, 'base64url').toString()));
  t.same(h, { alg: 'EdDSA', kid: ed.kid, typ: 'JWT' });
  t.match(p, { sub: 'node:n1', capstan_node_id: 'n1', capstan_node_group: 'web', capstan_datacenter: 'dc1', aud: 'capstan', iat: 1795348800, nbf: 1795348800, exp: 1795348800 + 86400 });
  t.match(p.jti, /^[0-9a-f-]{36}$/);
  t.same(await verifyNodeToken(token, jwks, { nodeId: 'n1', now }), claims);
  t.equal(tokenKeyId(token), ed.kid);
  const r = await issueNodeToken({ key: rsa, nodeId: 'n1', group: 'web', ttlSeconds: 60, now });
  t.same(JSON.parse(Buffer.from(r.token.split('.')[0]!, 'base64url').toString()), { alg: 'RS256', kid: rsa.kid, typ: 'JWT' });
  t.notOk('capstan_datacenter' in JSON.parse(Buffer.from(r.token.split('.')[1]!, 'base64url').toString()), 'no datacenter claim when none is set');
  t.ok(await verifyNodeToken(r.token, jwks, { now }));
  t.notOk(JSON.stringify(jwks).includes('"d"'), 'the JWKS carries no private part');
});

t.test('refusals carry their codes', async (t) => {
  const { token } = await issueNodeToken({ key: ed, nodeId: 'n1', group: 'web', ttlSeconds: 3600, now });
  await t.rejects(verifyNodeToken(token, jwks, { now: later(3600 + 61) }), { code: 'ERR_TOKEN_EXPIRED', statusCode: 401 });
  t.ok(await verifyNodeToken(token, jwks, { now: later(3600 + 30) }), 'small clock skew allowed');
  await t.rejects(verifyNodeToken(token, jwks, { now: later(-120) }), { code: 'ERR_TOKEN_INVALID' }, 'not yet valid');
  await t.rejects(verifyNodeToken(token, jwks, { nodeId: 'n2', now }), { code: 'ERR_TOKEN_WRONG_NODE', statusCode: 403 });
  await t.rejects(verifyNodeToken(token, jwksOf([generateSigningKey()]), { now }), { code: 'ERR_TOKEN_UNKNOWN_KEY' });
  const [h, p, s] = token.split('.');
  const forged = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(p!, 'base64url').toString()), capstan_node_id: 'n2', sub: 'node:n2' })).toString('base64url');
  await t.rejects(verifyNodeToken(`${h}.${forged}.${s}`, jwks, { now }), { code: 'ERR_TOKEN_INVALID' });
  await t.rejects(verifyNodeToken('garbage', jwks, { now }), { code: 'ERR_TOKEN_INVALID' });
  await t.rejects(issueNodeToken({ key: ed, nodeId: 'n1', group: 'web', ttlSeconds: 0 }), { code: 'ERR_BAD_REQUEST' }, 'no eternal tokens');
});

t.test('a token signed by a published key is still refused for another audience, without exp, or with a sub not matching its node', async (t) => {
  const iat = Math.floor(now.getTime() / 1000);
  const sign = async (claims: Record<string, unknown>) =>
    new SignJWT(claims).setProtectedHeader({ alg: 'EdDSA', kid: ed.kid, typ: 'JWT' }).sign(await importJWK(ed.privateJwk, 'EdDSA'));
  const good = { sub: 'node:n1', capstan_node_id: 'n1', capstan_node_group: 'g', iat, nbf: iat, exp: iat + 600, jti: 'j', aud: 'capstan' };
  t.ok(await verifyNodeToken(await sign(good), jwks, { nodeId: 'n1', now }), 'the same claims, well formed, verify');
  await t.rejects(verifyNodeToken(await sign({ ...good, aud: 'nomad' }), jwks, { now }), { code: 'ERR_TOKEN_INVALID', statusCode: 401 }, 'another audience');
  const { exp: _exp, ...noExp } = good;
  await t.rejects(verifyNodeToken(await sign(noExp), jwks, { now }), { code: 'ERR_TOKEN_INVALID' }, 'no expiry: never an eternal token');
  await t.rejects(verifyNodeToken(await sign({ ...good, sub: 'node:n2' }), jwks, { now }), { code: 'ERR_TOKEN_INVALID' }, 'sub and capstan_node_id disagree');
  // The algorithm is the key's: an RS256 header naming the EdDSA key's kid does not verify.
  const [, p, sig] = (await sign(good)).split('.');
  const rsHeader = Buffer.from(JSON.stringify({ alg: 'RS256', kid: ed.kid, typ: 'JWT' })).toString('base64url');
  await t.rejects(verifyNodeToken(`${rsHeader}.${p}.${sig}`, jwks, { now }), { code: /^ERR_TOKEN_(INVALID|UNKNOWN_KEY)$/ });
});

t.test('renewal is due when less than a third of the life is left', async (t) => {
  const c = { iat: 0, exp: 3000 };
  t.equal(tokenNeedsRenewal(c, new Date(1000 * 1000)), false);
  t.equal(tokenNeedsRenewal(c, new Date(2001 * 1000)), true);
  t.equal(tokenNeedsRenewal(c, new Date(5000 * 1000)), true);
});

t.test('signed renewal requests: pinned key, fresh, never replayed', async (t) => {
  const node = createNodeIdentity('n1');
  const other = createNodeIdentity('n1');
  const seen = new Set<string>();
  const remember = (nonce: string) => (seen.has(nonce) ? false : (seen.add(nonce), true));
  const req = makeRenewRequest(node, 'n1', now);
  t.match(await checkRenewRequest(req, node.certPem, 'n1', remember, later(10)), { node_id: 'n1' });
  await t.rejects(checkRenewRequest(req, node.certPem, 'n1', remember, later(11)), { code: 'ERR_RENEW_REPLAY' });
  await t.rejects(checkRenewRequest(makeRenewRequest(other, 'n1', now), node.certPem, 'n1', remember, now), { code: 'ERR_SMIME_SIGNER_NOT_FOUND' });
  await t.rejects(checkRenewRequest(makeRenewRequest(node, 'n1', now), node.certPem, 'n1', remember, later(3600)), { code: 'ERR_RENEW_STALE' });
  await t.rejects(checkRenewRequest(makeRenewRequest(node, 'n2', now), node.certPem, 'n1', remember, now), { code: 'ERR_TOKEN_WRONG_NODE' });
});

t.test('key ids never look like command-line options', async (t) => {
  // Regression: base64url kids could start with '-', which commander took for an option.
  for (let i = 0; i < 50; i++) t.match(generateSigningKey().kid, /^[0-9a-f]{16}$/);
});

t.test('a relay\'s token says so (capstan_role), and only it opens what only a relay may do', async (t) => {
  const relay = await issueNodeToken({ key: ed, nodeId: 'relay-1', group: 'relays', role: RELAY_ROLE, ttlSeconds: 3600, now });
  t.equal(JSON.parse(Buffer.from(relay.token.split('.')[1]!, 'base64url').toString()).capstan_role, 'relay');
  t.match(await verifyNodeToken(relay.token, jwks, { nodeId: 'relay-1', role: RELAY_ROLE, now }), { capstan_node_id: 'relay-1', capstan_role: 'relay' });
  t.match(await verifyNodeToken(relay.token, jwks, { nodeId: 'relay-1', now }), { capstan_role: 'relay' }, 'a relay is a node too: its token opens its own node paths');
  const agent = await issueNodeToken({ key: ed, nodeId: 'relay-1', group: 'web', ttlSeconds: 3600, now });
  t.notOk('capstan_role' in JSON.parse(Buffer.from(agent.token.split('.')[1]!, 'base64url').toString()), 'agents carry no role');
  await t.rejects(verifyNodeToken(agent.token, jwks, { nodeId: 'relay-1', role: RELAY_ROLE, now }), { code: 'ERR_TOKEN_NOT_RELAY', statusCode: 403 }, 'a token without the role, even of that node id');
  const other = await issueNodeToken({ key: ed, nodeId: 'relay-2', group: 'relays', role: RELAY_ROLE, ttlSeconds: 3600, now });
  await t.rejects(verifyNodeToken(other.token, jwks, { nodeId: 'relay-1', role: RELAY_ROLE, now }), { code: 'ERR_TOKEN_WRONG_NODE', statusCode: 403 }, 'another relay\'s token');
  await t.rejects(verifyNodeToken(relay.token, jwks, { nodeId: 'relay-1', role: RELAY_ROLE, now: later(3600 + 61) }), { code: 'ERR_TOKEN_EXPIRED' });
  // A role no server issues is not a role: the token is refused outright.
  const sign = async (payload: Record<string, unknown>) => new SignJWT(payload).setProtectedHeader({ alg: 'EdDSA', kid: ed.kid }).sign(await importJWK(ed.privateJwk, 'EdDSA'));
  const base = { sub: 'node:n1', capstan_node_id: 'n1', aud: 'capstan', iat: 1795348800, nbf: 1795348800, exp: 1795348800 + 60 };
  await t.rejects(verifyNodeToken(await sign({ ...base, capstan_role: 'admin' }), jwks, { now }), { code: 'ERR_TOKEN_INVALID' });
  await t.rejects(verifyNodeToken(await sign({ ...base, capstan_role: ['relay'] }), jwks, { role: RELAY_ROLE, now }), { code: 'ERR_TOKEN_INVALID' });
  // Claims forged onto an agent's token do not verify.
  const [h, p, s] = agent.token.split('.');
  const forged = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(p!, 'base64url').toString()), capstan_role: 'relay' })).toString('base64url');
  await t.rejects(verifyNodeToken(`${h}.${forged}.${s}`, jwks, { role: RELAY_ROLE, now }), { code: 'ERR_TOKEN_INVALID' });
});
