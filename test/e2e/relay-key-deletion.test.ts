/**
 * A signing key deleted at the server (`DELETE /api/1/keys/<kid>?force=true`) stops opening the
 * relay at the relay's next sync of the nodes list (which names the key ids the server publishes),
 * not when the relay's JWKS copy ages out (identity.jwks_max_age, an hour by default): the node
 * gets 401 ERR_TOKEN_UNKNOWN_KEY there and renews. Real server and relay, real tokens.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { createNodeIdentity, makeRenewRequest } from '@capstan/shared';
import { adminClient, BIN, startProgram, waitFor, programDir, startServer } from '../helpers/programs.js';

t.test('a force-deleted key is refused at the relay from its next list sync; the renewed token works', async (t) => {
  // The relay used to accept tokens of the deleted key until its JWKS copy was an hour old.
  const dir = programDir(t);
  const serverDir = join(dir, 'server');
  const { server, api } = await startServer(t, serverDir);
  // Syncing every second; the JWKS copy keeps its default age limit (1h), so only the sync can explain a refusal.
  await writeFile(join(dir, 'relay.toml'), '[nodes_sync]\ninterval = "1s"\n');
  const relay = await startProgram(BIN.relayd, ['-c', join(dir, 'relay.toml'), '--spool-dir', join(dir, 'relay'), '--upstream', server.url, '--listen', '127.0.0.1:0', '--log-level', 'warn']);
  t.teardown(() => relay.stop());

  const node = createNodeIdentity('node-k1');
  t.equal((await api('POST', '/api/1/nodes', { id: 'node-k1', hostname: 'k1.example', certificate: node.certPem })).status, 201);
  const renew = async () => {
    const res = await fetch(`${server.url}/identity/renew`, { method: 'POST', headers: { 'content-type': 'application/pkcs7-mime' }, body: makeRenewRequest(node, 'node-k1') });
    t.equal(res.status, 200);
    return ((await res.json()) as { data: { token: string } }).data.token;
  };
  const oldToken = await renew();
  const shared = `${relay.url}/rudder/relay-api/1/shared-folder/anything`;
  const at = async (token: string) => {
    const res = await fetch(shared, { headers: { authorization: `Bearer ${token}` } });
    return { status: res.status, code: res.status === 401 ? ((await res.json()) as { error: { code: string } }).error.code : undefined };
  };
  t.not((await at(oldToken)).status, 401, 'the token opens the relay');
  const list = async () => ((await (await fetch(`${server.url}/rudder/relay-api/1/nodes`)).json()) as { data: { keys: string[] } }).data.keys;
  const [oldKid] = await list();
  t.ok(oldKid, 'the nodes list names the published key ids');

  t.equal((await api('POST', '/api/1/keys/rotate')).status, 201);
  const deleted = await api('DELETE', `/api/1/keys/${oldKid}?force=true`);
  t.match(deleted, { status: 200, json: { data: { kid: oldKid, nodes: 1 } } });
  t.notOk((await list()).includes(oldKid!), 'the list no longer names it');

  // The server refuses the token at once (the relay, which passes it on for the file, then answers
  // 401 ERR_UNAUTHORIZED); the relay's own check says ERR_TOKEN_UNKNOWN_KEY once it has synced.
  const refused = await waitFor(async () => {
    const r = await at(oldToken);
    return r.code === 'ERR_TOKEN_UNKNOWN_KEY' ? r : undefined;
  }, 'the relay to refuse the deleted key\'s token itself', 15_000);
  t.same(refused, { status: 401, code: 'ERR_TOKEN_UNKNOWN_KEY' });
  // The copy on disk is rewritten after the keys in memory change: wait for it, bounded.
  const onDisk = async () => (JSON.parse(await readFile(join(dir, 'relay', 'jwks.json'), 'utf8')) as { keys: Array<{ kid: string }> }).keys.map((k) => k.kid);
  t.ok(await waitFor(async () => ((await onDisk()).includes(oldKid!) ? undefined : true), 'the relay\'s JWKS copy on disk to lose it', 15_000),
    'the relay\'s JWKS copy on disk lost it too');
  // The node renews by signed request, as it does on that error; the new token opens the relay.
  t.not((await at(await renew())).status, 401);
});
