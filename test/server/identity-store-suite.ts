/**
 * The identity part of the store (keyring, node tokens, renewal nonces), written once and run on
 * every backend by store-sqlite.test.ts and store-postgres.test.ts. (Not named `.test.ts`.)
 */
import type { Test } from 'tap';
import type { IdentityKeyRecord, IdentityInitial } from '@capstan/server/store/index';
import { setup, type Backend } from './store-suite.js';

const key = (kid: string, active = true, at = '2024-05-01T08:00:00.000Z'): IdentityKeyRecord => ({
  kid, alg: 'EdDSA', active, created_at: at, retired_at: null, max_exp: 0,
  public_jwk: JSON.stringify({ kty: 'OKP', kid }), sealed_private: `sealed-${kid}`,
});

export function identitySuite(t: Test, backend: Backend): void {
  t.test('identity: two stores initialising one empty keyring at once end with one active key', async (t) => {
    const { db, store } = await setup(t, backend);
    const other = await db.open();
    const calls: string[] = [];
    const init = (kid: string) => (): IdentityInitial => (calls.push(kid), { keys: [key(kid)], tokens: [] });
    const results = await Promise.all([store.identity.initKeyring(init('k-a')), other.identity.initKeyring(init('k-b'))]);
    t.same(results.filter(Boolean).length, 1, 'exactly one initialisation stored');
    t.equal(calls.length, 1, 'the loser never even made a keyring');
    const keys = await store.identity.listKeys();
    t.equal(keys.length, 1);
    t.match(await other.identity.activeKey(), { kid: keys[0]!.kid, active: true, sealed_private: `sealed-${keys[0]!.kid}` });
    t.notOk(await store.identity.initKeyring(init('k-c')), 'a keyring is never initialised twice');
  });

  t.test('identity: rotation retires the active key, the JWKS keeps keys with unexpired tokens, deletion', async (t) => {
    const { store } = await setup(t, backend);
    const ids = store.identity;
    await store.createNode({ id: 'n1', hostname: 'h1' });
    await ids.initKeyring(() => ({ keys: [key('k1')], tokens: [] }));
    t.ok(await ids.recordToken({ node_id: 'n1', kid: 'k1', jti: 'j1', iat: 100, exp: 200 }));
    t.notOk(await ids.recordToken({ node_id: 'ghost', kid: 'k1', jti: 'j0', iat: 100, exp: 150 }), 'no token row for an unknown node (its exp still counts for the key)');
    await ids.addActiveKey({ kid: 'k2', alg: 'EdDSA', created_at: '2024-05-01T09:00:00.000Z', public_jwk: '{"kid":"k2"}', sealed_private: 's2' });
    t.match(await ids.listKeys(), [
      { kid: 'k1', active: false, retired_at: '2024-05-01T09:00:00.000Z', max_exp: 200 },
      { kid: 'k2', active: true, retired_at: null, max_exp: 0 },
    ]);
    t.equal((await ids.activeKey())!.kid, 'k2');
    t.same((await ids.publishedKeys(150)).map((j) => JSON.parse(j).kid), ['k1', 'k2'], 'k1 still signs an unexpired token');
    t.same((await ids.publishedKeys(200)).map((j) => JSON.parse(j).kid), ['k2'], 'gone once its last token expired');
    t.equal(await ids.nodesUsingKey('k1', 150), 1);
    t.equal(await ids.nodesUsingKey('k1', 200), 0);
    t.match(await ids.getKey('k1'), { kid: 'k1', active: false });
    t.equal(await ids.getKey('nope'), null);
    t.equal((await ids.allKeys()).length, 2);
    t.ok(await ids.deleteKey('k1'));
    t.notOk(await ids.deleteKey('k1'));
  });

  t.test('identity: forced renewal is kept across new tokens and goes with the node', async (t) => {
    const { store } = await setup(t, backend);
    const ids = store.identity;
    await store.createNode({ id: 'n1', hostname: 'h1' });
    await store.createNode({ id: 'n2', hostname: 'h2' });
    t.equal(await ids.forceRenewal(['n1', 'n2', 'ghost'], 500), 2, 'unknown nodes are skipped');
    t.match(await ids.getToken('n1'), { node_id: 'n1', kid: '', forced_after: 500 });
    await ids.recordToken({ node_id: 'n1', kid: 'k1', jti: 'j', iat: 501, exp: 900 });
    t.same(await ids.getToken('n1'), { node_id: 'n1', kid: 'k1', jti: 'j', iat: 501, exp: 900, forced_after: 500 });
    t.equal(await ids.forceRenewal([], 1), 0);
    await store.createNode({ id: 'n3', hostname: 'h3' });
    await ids.recordToken({ node_id: 'n3', kid: 'k1', jti: 'j3', iat: 10, exp: 900 });
    t.same([...(await ids.forcedRenewals(0))].sort(), [['n1', 500], ['n2', 500]], 'forced renewals, not plain tokens');
    t.same([...(await ids.forcedRenewals(500))], [], 'only those after the given time');
    await store.deleteNode('n1');
    t.equal(await ids.getToken('n1'), null, 'a deleted node leaves no token row');
    t.same([...(await ids.forcedRenewals(0))], [['n2', 500]]);
  });

  t.test('identity: a renewal nonce is accepted once, by any store on the database, until it expires', async (t) => {
    const { db, store } = await setup(t, backend);
    const other = await db.open();
    t.ok(await store.identity.rememberNonce('nonce-0123456789abcdef', 1000, 100));
    t.notOk(await other.identity.rememberNonce('nonce-0123456789abcdef', 1000, 100), 'replay at another server refused');
    const both = await Promise.all([store.identity.rememberNonce('nonce-b', 1000, 100), other.identity.rememberNonce('nonce-b', 1000, 100)]);
    t.same(both.filter(Boolean).length, 1, 'the same nonce at two servers at once: one wins');
    t.ok(await other.identity.rememberNonce('nonce-0123456789abcdef', 3000, 1001), 'expired nonces are forgotten');
  });

  t.test('identity: an import carries keys and the tokens of known nodes', async (t) => {
    const { store } = await setup(t, backend);
    await store.createNode({ id: 'n1', hostname: 'h1' });
    t.ok(await store.identity.initKeyring(() => ({
      keys: [{ ...key('old', false), retired_at: '2024-05-01T08:30:00.000Z', max_exp: 700 }, key('new', true, '2024-05-01T08:30:00.000Z')],
      tokens: [
        { node_id: 'n1', kid: 'old', jti: 'j1', iat: 1, exp: 700, forced_after: 3 },
        { node_id: 'gone', kid: 'old', jti: 'j2', iat: 1, exp: 700, forced_after: 0 },
      ],
    })));
    t.match(await store.identity.listKeys(), [{ kid: 'old', active: false, max_exp: 700 }, { kid: 'new', active: true }]);
    t.same(await store.identity.getToken('n1'), { node_id: 'n1', kid: 'old', jti: 'j1', iat: 1, exp: 700, forced_after: 3 });
    t.equal(await store.identity.getToken('gone'), null);
  });
}
