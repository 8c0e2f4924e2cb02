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
