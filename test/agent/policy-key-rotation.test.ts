/**
 * Policy key rotation seen from the agent: a bundle signed by a new server key is accepted only
 * through a valid endorsement chain from the pinned key, after which the new key is pinned; an
 * unendorsed key, a forged or broken chain are refused and the last good policy stays. The chain
 * rules themselves (shared followEndorsements) are checked directly too.
 */
import { generateKeyPairSync } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { computeConfigId, endorseKey, followEndorsements, policyKeyId, signBundle, type KeyEndorsement } from '@capstan/shared';
import { fetchPolicy, loadPinnedKey } from '@capstan/agent/policy/fetch';
import { programDir } from '../helpers/programs.js';

function newKey() {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const pub = publicKey.export({ type: 'spki', format: 'pem' }).toString();
  return { priv: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(), pub, id: policyKeyId(pub) };
}
type Key = ReturnType<typeof newKey>;

const pin = (k: Key) => ({ keyId: k.id, publicKeyPem: k.pub });

t.test('endorsement chains: followed across rotations, refused when broken or forged', async (t) => {
  const [k0, k1, k2, k3] = [newKey(), newKey(), newKey(), newKey()];
  const chain = [endorseKey(k0.priv, k1.pub), endorseKey(k1.priv, k2.pub), endorseKey(k2.priv, k3.pub)];
  t.equal(followEndorsements(pin(k0), chain, k3.id).keyId, k3.id, 'three rotations later');
  t.equal(followEndorsements(pin(k2), chain, k3.id).keyId, k3.id, 'from a middle key');
  t.equal(followEndorsements(pin(k0), [...chain].reverse(), k3.id).keyId, k3.id, 'order does not matter');
  t.equal(followEndorsements(pin(k3), [], k3.id).keyId, k3.id, 'the pinned key itself needs no chain');
  const refuse = (what: string, from: Key, c: unknown, to: string) =>
    t.throws(() => followEndorsements(pin(from), c, to), { code: 'ERR_POLICY_SIGNATURE' }, what);
  refuse('no chain', k0, undefined, k1.id);
  refuse('a missing link', k0, [chain[0], chain[2]], k3.id);
  refuse('backwards: an old key is not endorsed by a new one', k3, chain, k0.id);
  const rogue = newKey();
  const forged = { ...endorseKey(rogue.priv, rogue.pub), previous_key_id: k0.id };
  refuse('an endorsement signed by another key', k0, [forged], rogue.id);
  const swapped: KeyEndorsement = { ...chain[0]!, public_key: rogue.pub, key_id: rogue.id };
  refuse('a real signature over another key', k0, [swapped], rogue.id);
  const lying: KeyEndorsement = { ...chain[0]!, key_id: rogue.id };
  refuse('a key id that is not its key\'s', k0, [lying], rogue.id);
  refuse('junk', k0, [{ nonsense: true }, 'x', null], k1.id);
});

/** A relay serving one signed answer for n1 at a time. */
async function relay(t: { teardown: (fn: () => unknown) => void }) {
  let body = '';
  let etag = '"0"';
  const server = createServer((req, res) => {
    if (req.headers['if-none-match'] === etag) return void res.writeHead(304).end();
    res.writeHead(200, { etag, 'content-type': 'application/json' }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  t.teardown(() => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    serve: (content: string, key: Key, endorsements: KeyEndorsement[] = []) => {
      const directives = [{ id: 'd', name: 'd', method: 'file_content', params: { path: '/tmp/x', content }, mode: 'enforce' as const, rule_id: 'r' }];
      body = JSON.stringify(signBundle({ node_id: 'n1', config_id: computeConfigId(directives), generated_at: new Date().toISOString(), directives }, key.priv, { includePublicKey: true, endorsements }));
      etag = `"${Math.random()}"`;
    },
  };
}

t.test('the agent follows a rotation through the chain and re-pins; an unendorsed key is refused', async (t) => {
  const r = await relay(t);
  const stateDir = programDir(t);
  const [k0, k1, k2] = [newKey(), newKey(), newKey()];
  const fetch = () => fetchPolicy({ relay: r.url, nodeId: 'n1', stateDir, timeoutMs: 5000, configuredKeyPem: null });

  r.serve('v0', k0);
  t.match(await fetch(), { source: 'fresh', bundle: { directives: [{ params: { content: 'v0' } }] } }, 'first contact pins k0');
  t.equal((await loadPinnedKey(stateDir, null))!.keyId, k0.id);

  const e01 = endorseKey(k0.priv, k1.pub);
  r.serve('v1', k1, [e01]);
  t.match(await fetch(), { source: 'fresh', bundle: { directives: [{ params: { content: 'v1' } }] } }, 'k1 accepted through k0\'s endorsement');
  t.equal((await loadPinnedKey(stateDir, null))!.keyId, k1.id, 're-pinned to k1');

  r.serve('v1b', k1);
  t.match(await fetch(), { source: 'fresh', bundle: { directives: [{ params: { content: 'v1b' } }] } }, 'k1 now needs no chain');

  const rogue = newKey();
  r.serve('evil', rogue, [{ ...endorseKey(rogue.priv, rogue.pub), previous_key_id: k1.id }]);
  const refused = await fetch();
  t.match(refused, { source: 'cache', problem: { code: 'ERR_POLICY_SIGNATURE', refused: true }, bundle: { directives: [{ params: { content: 'v1b' } }] } }, 'an unendorsed key is refused; the last good policy stays');
  t.equal((await loadPinnedKey(stateDir, null))!.keyId, k1.id, 'and nothing is re-pinned');

  r.serve('v0-again', k0, []);
  t.match(await fetch(), { problem: { code: 'ERR_POLICY_SIGNATURE' } }, 'the retired key is not accepted back');

  r.serve('v2', k2, [e01, endorseKey(k1.priv, k2.pub)]);
  t.match(await fetch(), { source: 'fresh', bundle: { directives: [{ params: { content: 'v2' } }] } });
  t.equal((await loadPinnedKey(stateDir, null))!.keyId, k2.id);
});

t.test('a configured key anchors the chain; configuring another key starts over from it', async (t) => {
  const r = await relay(t);
  const stateDir = programDir(t);
  const [k0, k1, other] = [newKey(), newKey(), newKey()];
  r.serve('v1', k1, [endorseKey(k0.priv, k1.pub)]);
  t.match(await fetchPolicy({ relay: r.url, nodeId: 'n1', stateDir, timeoutMs: 5000, configuredKeyPem: k0.pub }), { source: 'fresh' });
  t.equal((await loadPinnedKey(stateDir, k0.pub))!.keyId, k1.id, 'reached from the configured key: pinned');
  t.equal((await readFile(join(stateDir, 'policy-key.anchor'), 'utf8')).trim(), k0.id);
  t.equal((await loadPinnedKey(stateDir, other.pub))!.keyId, other.id, 'another configured key ignores that pin');
  await writeFile(join(stateDir, 'policy-key.anchor'), other.id);
  t.equal((await loadPinnedKey(stateDir, k0.pub))!.keyId, k0.id, 'a pin anchored elsewhere does not count');
});
