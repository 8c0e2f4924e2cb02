/**
 * Policy rollback: the server signs a per-node generation into each bundle, and an agent that
 * applied generation N+1 refuses generation N — validly signed, replayed by a relay — with
 * ERR_POLICY_ROLLBACK in its run log, keeping its last good policy. Re-enrolment (another node
 * id) and another configured server key start over; a rotation through endorsements does not.
 */
import { generateKeyPairSync } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { computeConfigId, endorseKey, policyKeyId, signBundle, verifyBundle, type KeyEndorsement, type PolicyBundle } from '@capstan/shared';
import { fetchPolicy } from '@capstan/agent/policy/fetch';
import { GENERATION_FILE } from '@capstan/agent/policy/generation';
import { reportPolicy } from '@capstan/agent/policy/report';
import { RunLogWriter } from '@capstan/agent/runlog/write';
import { BundleServer } from '@capstan/server/policy/bundles';
import { programDir } from '../helpers/programs.js';

function newKey() {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const pub = publicKey.export({ type: 'spki', format: 'pem' }).toString();
  return { priv: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(), pub, id: policyKeyId(pub) };
}
type Key = ReturnType<typeof newKey>;

const directives = (content: string) => [{ id: 'd', name: 'd', method: 'file_content', params: { path: '/tmp/x', content }, mode: 'enforce' as const, rule_id: 'r' }];

/** Signed bundle text of `content` for `node` at `generation` (none: a server that puts none). */
function signed(node: string, content: string, key: Key, generation?: number, endorsements: KeyEndorsement[] = []): string {
  const d = directives(content);
  const bundle: PolicyBundle = { node_id: node, config_id: computeConfigId(d), generated_at: new Date().toISOString(), ...(generation !== undefined && { generation }), directives: d };
  return JSON.stringify(signBundle(bundle, key.priv, { includePublicKey: true, endorsements }));
}

/** A relay answering whatever it was last told to, with a fresh ETag each time. */
async function relay(t: { teardown: (fn: () => unknown) => void }) {
  let body = '';
  let etag = '"0"';
  const server = createServer((req, res) => {
    if (req.headers['if-none-match'] === etag) return void res.writeHead(304).end();
    res.writeHead(200, { etag, 'content-type': 'application/json' }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  t.teardown(() => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))));
  let n = 0;
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    serve: (text: string) => {
      body = text;
      etag = `"${++n}"`;
    },
  };
}

const content = (s: { bundle: PolicyBundle | null }) => s.bundle?.directives[0]?.params.content;

t.test('generation N+1 applied, then generation N served: refused, and the run log says why', async (t) => {
  const r = await relay(t);
  const stateDir = programDir(t);
  const k = newKey();
  const fetch = () => fetchPolicy({ relay: r.url, nodeId: 'n1', stateDir, timeoutMs: 5000, configuredKeyPem: null });

  const genN = signed('n1', 'old', k, 1000);
  r.serve(genN);
  t.match(await fetch(), { source: 'fresh' }, 'generation N applied');
  r.serve(signed('n1', 'new', k, 1001));
  t.match(await fetch(), { source: 'fresh' }, 'generation N+1 applied');

  r.serve(genN);
  const replay = await fetch();
  t.match(replay, { source: 'cache', problem: { code: 'ERR_POLICY_ROLLBACK', refused: true } }, 'the replayed generation N is refused');
  t.equal(content(replay), 'new', 'the last good policy (N+1) still runs');
  t.match(replay.problem!.message, /generation 1000, older than generation 1001/);

  const w = new RunLogWriter({ nodeId: 'n1', configId: replay.bundle!.config_id, startedAt: new Date(0), clock: () => new Date(0) });
  w.start();
  reportPolicy(w, replay);
  w.end();
  t.match(w.text(), /result_error/, 'an error in the run log');
  t.match(w.text(), /policy refused \(ERR_POLICY_ROLLBACK\)/, 'naming the refusal');

  r.serve(signed('n1', 'old', k));
  t.match(await fetch(), { problem: { code: 'ERR_POLICY_ROLLBACK' } }, 'a bundle with no generation (an older server\'s) is below the floor too');
  r.serve(signed('n1', 'same', k, 1001));
  t.match(await fetch(), { source: 'fresh' }, 'the same generation again is not older');
});

t.test('resets: re-enrolment and another server key start over; an endorsed rotation does not', async (t) => {
  const r = await relay(t);
  const stateDir = programDir(t);
  const [k0, k1] = [newKey(), newKey()];
  const fetch = (node: string, configuredKeyPem: string | null = null) => fetchPolicy({ relay: r.url, nodeId: node, stateDir, timeoutMs: 5000, configuredKeyPem });

  r.serve(signed('n1', 'a', k0, 50));
  t.match(await fetch('n1'), { source: 'fresh' });
  r.serve(signed('n1', 'b', k1, 40, [endorseKey(k0.priv, k1.pub)]));
  t.match(await fetch('n1'), { problem: { code: 'ERR_POLICY_ROLLBACK' } }, 'a rotated key keeps the floor');

  r.serve(signed('n2', 'c', k0, 10));
  t.match(await fetch('n2'), { source: 'fresh' }, 'another node id (re-enrolment) starts from zero');

  const other = newKey();
  r.serve(signed('n2', 'd', other, 5));
  t.match(await fetch('n2', other.pub), { source: 'fresh' }, 'another configured server key starts from zero');

  r.serve(signed('n2', 'e', other, 4));
  t.match(await fetch('n2', other.pub), { problem: { code: 'ERR_POLICY_ROLLBACK' } });
  await rm(join(stateDir, GENERATION_FILE));
  t.match(await fetch('n2', other.pub), { source: 'fresh' }, 'deleting the floor file resets by hand');
});

t.test('the server signs a generation that grows with the node\'s bundle', async (t) => {
  const k = newKey();
  const rec = { node_id: 'n1', config_id: 'c1', generated_at: '2026-01-01T00:00:00.000Z', bundle: '' };
  rec.bundle = JSON.stringify({ node_id: 'n1', config_id: 'c1', generated_at: rec.generated_at, directives: directives('x') });
  const store = { getNode: async () => ({ accepted: 'accepted' }), getPolicyBundle: async () => rec };
  const server = new BundleServer({ store: store as never, generator: {} as never, key: { current: () => ({ keyId: k.id, privateKeyPem: k.priv, publicKeyPem: k.pub, endorsements: [] }) } as never });
  const gen = async () => verifyBundle(JSON.parse((await server.forNode('n1')).text()), { keyId: k.id, publicKeyPem: k.pub }, 'n1').generation;
  const first = await gen();
  t.equal(first, Date.parse('2026-01-01T00:00:00.000Z'), 'the generation is signed into the bundle');
  rec.generated_at = '2026-01-01T00:00:01.000Z';
  rec.config_id = 'c2';
  t.ok((await gen())! > first!, 'a regenerated bundle has a higher generation');
});
