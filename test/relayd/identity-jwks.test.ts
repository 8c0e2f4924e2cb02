/**
 * The relay's copy of the server's keys: refetch on an unknown kid at most every minRefreshMs,
 * kept on disk for restarts without the upstream, and refusal of JWKS documents that are not one
 * (private parts, too many keys, not JSON).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { generateSigningKey, issueNodeToken, jwksOf, silentLogger } from '@capstan/shared';
import { JwksCache, MAX_JWKS_KEYS, parseJwks } from '@capstan/relayd/identity/jwks';
import { nodeTokenVerifier } from '@capstan/relayd/identity/verify';

t.test('unknown kids refetch at most every minRefreshMs; the disk copy survives an unreachable upstream', async (t) => {
  const dir = t.testdir();
  const k1 = generateSigningKey();
  const k2 = generateSigningKey();
  let served = jwksOf([k1]);
  let up = true;
  let fetches = 0;
  const clock = { now: 1_000_000 };
  const make = () =>
    new JwksCache({
      fetch: async () => {
        fetches++;
        if (!up) throw new Error('connect ECONNREFUSED');
        return Buffer.from(JSON.stringify(served));
      },
      file: join(dir, 'jwks.json'),
      minRefreshMs: 10_000,
      maxAgeMs: 3_600_000,
      log: silentLogger,
      clock: () => clock.now,
    });
  const cache = make();
  await cache.init();
  await cache.refresh(true);
  t.ok(cache.has(k1.kid));
  const verifier = nodeTokenVerifier(cache, 60);
  const tok = async (key: typeof k1) => `Bearer ${(await issueNodeToken({ key, nodeId: 'n1', group: 'g', ttlSeconds: 3600 })).token}`;

  served = jwksOf([k1, k2]);
  const before = fetches;
  clock.now += 1000;
  await t.rejects(verifier.verify(await tok(k2), 'n1'), { code: 'ERR_TOKEN_UNKNOWN_KEY' }, 'within minRefreshMs: no refetch');
  t.equal(fetches, before);
  clock.now += 10_000;
  t.ok(await verifier.verify(await tok(k2), 'n1'), 'refetched on the new kid');
  t.equal(fetches, before + 1);
  t.ok(await verifier.verify(await tok(k2), 'n1'));
  t.equal(fetches, before + 1, 'known kid: no refetch');
  t.same(JSON.parse(readFileSync(join(dir, 'jwks.json'), 'utf8')).keys.map((k: { kid: string }) => k.kid), [k1.kid, k2.kid]);

  up = false;
  const restarted = make();
  await restarted.init();
  t.ok(await nodeTokenVerifier(restarted, 60).verify(await tok(k2), 'n1'), 'the disk copy verifies with the upstream down');
});

t.test('documents that are not a public JWKS are refused', async (t) => {
  const k = generateSigningKey();
  t.throws(() => parseJwks(Buffer.from('nope')), { code: 'ERR_UPSTREAM_REJECTED' });
  t.throws(() => parseJwks(Buffer.from('{"keys": {}}')), { code: 'ERR_UPSTREAM_REJECTED' });
  t.throws(() => parseJwks(Buffer.from(JSON.stringify({ keys: [k.privateJwk] }))), { code: 'ERR_UPSTREAM_REJECTED' }, 'private parts');
  const many = Array.from({ length: MAX_JWKS_KEYS + 1 }, (_, i) => ({ ...k.publicJwk, kid: `k${i}` }));
  t.throws(() => parseJwks(Buffer.from(JSON.stringify({ keys: many }))), { code: 'ERR_UPSTREAM_REJECTED' });
  t.same(parseJwks(Buffer.from(JSON.stringify(jwksOf([k])))).keys[0]!.kid, k.kid);
});

t.test('retain: keys the upstream no longer lists leave the copy at once; a listed one missing is fetched', async (t) => {
  // A deleted key used to stay in the relay's copy until it was jwks_max_age old.
  const dir = t.testdir();
  const k1 = generateSigningKey();
  const k2 = generateSigningKey();
  let served = jwksOf([k1]);
  let fetches = 0;
  const clock = { now: 1_000_000 };
  const cache = new JwksCache({
    fetch: async () => {
      fetches++;
      return Buffer.from(JSON.stringify(served));
    },
    file: join(dir, 'jwks.json'), minRefreshMs: 10_000, maxAgeMs: 3_600_000, log: silentLogger, clock: () => clock.now,
  });
  await cache.init();
  await cache.refresh(true);
  const verifier = nodeTokenVerifier(cache, 60);
  const tok = async (key: typeof k1) => `Bearer ${(await issueNodeToken({ key, nodeId: 'n1', group: 'g', ttlSeconds: 3600 })).token}`;
  const old = await tok(k1);
  t.ok(await verifier.verify(old, 'n1'));

  // Rotation, then the old key deleted: the list names k2 only, within minRefreshMs of the last fetch.
  served = jwksOf([k2]);
  clock.now += 1000;
  const before = fetches;
  await cache.retain([k2.kid]);
  t.equal(fetches, before + 1, 'the listed key it lacked was fetched despite minRefreshMs');
  t.notOk(cache.has(k1.kid));
  t.ok(cache.has(k2.kid));
  await t.rejects(verifier.verify(old, 'n1'), { code: 'ERR_TOKEN_UNKNOWN_KEY' });
  t.ok(await verifier.verify(await tok(k2), 'n1'));
  t.same(JSON.parse(readFileSync(join(dir, 'jwks.json'), 'utf8')).keys.map((k: { kid: string }) => k.kid), [k2.kid], 'on disk too');
  // A list naming what the copy holds costs nothing.
  await cache.retain([k2.kid]);
  t.equal(fetches, before + 1);
});
