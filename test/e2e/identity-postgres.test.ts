/**
 * Node identity shared by two capstan-server processes on one PostgreSQL schema: started at once
 * on an empty database they end with one keyring (one active key, identical JWKS); a token issued
 * by server A verifies at a relay whose upstream is server B; a renewal request used at A is
 * refused at B as a replay; a rotation at B is published by A; a forced renewal at A is honoured
 * by B; a server given another secret does not start. Skipped with the reason when
 * PostgreSQL is unreachable.
 */
import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { createNodeIdentity, makeRenewRequest } from '@capstan/shared';
import { adminClient, BIN, runProgram, startProgram, waitFor, programDir, startServer } from '../helpers/programs.js';
import { freshSchemaUrl, postgresOrSkipFile } from '../server/pg.js';

if (await postgresOrSkipFile(t)) {
  t.test('two servers on one database share the keyring, the node tokens and the renewal nonces', { timeout: 120_000 }, async (t) => {
    const url = await freshSchemaUrl(t);
    const dir = programDir(t, { 'shared': { motd: 'hello\n' } });
    const secret = join(dir, 'identity.secret');
    const conf = join(dir, 'server.toml');
    await writeFile(conf, `[lifecycle]\nsweep_interval = "1h"\n[identity]\nsecret_file = "${secret}"\n`);
    const start = (name: string) => startServer(t, join(dir, name), { config: conf, logLevel: 'error', args: ['--database', url] });
    // Both at once on an empty database: one of them makes the first key (and the secret file).
    const [{ server: a, api: apiA }, { server: b, api: apiB }] = await Promise.all([start('a'), start('b')]);
    t.equal((await stat(secret)).mode & 0o777, 0o600, 'the secret file is private');
    const jwks = async (base: string) => (await (await fetch(`${base}/.well-known/jwks.json`)).json()) as { keys: Array<{ kid: string }> };
    const jA = await jwks(a.url);
    t.equal(jA.keys.length, 1, 'one key');
    t.same(await jwks(b.url), jA, 'identical JWKS at both servers');
    const keysA = (await apiA('GET', '/api/1/keys')).json.data as Array<{ kid: string; active: boolean }>;
    t.match(keysA, [{ kid: jA.keys[0]!.kid, active: true }], 'one active key');
    t.same((await apiB('GET', '/api/1/keys')).json.data, keysA);

    const relayConf = join(dir, 'relayd.toml');
    await writeFile(relayConf, `[identity]\nrequire_token = true\njwks_min_refresh = "0s"\n[shared_folder]\npath = "${join(dir, 'shared')}"\n`);
    const relay = await startProgram(BIN.relayd, ['-c', relayConf, '--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'), '--upstream', b.url, '--log-level', 'warn']);
    t.teardown(() => relay.stop());

    const id = 'c0ffee00-0000-4000-8000-0000000000aa';
    const node = createNodeIdentity(id, { bits: 1024 });
    t.equal((await apiA('POST', '/api/1/nodes', { id, hostname: 'n.test', certificate: node.certPem })).status, 201);
    const renewal = makeRenewRequest(node, id);
    const renew = (base: string) => fetch(`${base}/identity/renew`, { method: 'POST', headers: { 'content-type': 'application/pkcs7-mime' }, body: renewal });
    const atA = await renew(a.url);
    t.equal(atA.status, 200, 'renewed at server A');
    const token = ((await atA.json()) as { data: { token: string } }).data.token;
    const atB = await renew(b.url);
    t.equal(atB.status, 401, 'the same request at server B is a replay');
    t.match(await atB.json(), { error: { code: 'ERR_RENEW_REPLAY' } });
    const viaRelay = await renew(relay.url);
    t.equal(viaRelay.status, 401, 'and through the relay');
    t.match(await viaRelay.json(), { error: { code: 'ERR_RENEW_REPLAY' } });

    // Issued by A, checked by the relay in front of B (JWKS from B) and by B itself.
    const shared = await fetch(`${relay.url}/rudder/relay-api/1/shared-folder/motd`, { headers: { authorization: `Bearer ${token}` } });
    t.equal(shared.status, 200, 'the relay of server B accepts the token of server A');
    t.equal(await shared.text(), 'hello\n');
    const policy = await fetch(`${relay.url}/policies/${id}/rules`, { headers: { authorization: `Bearer ${token}` } });
    t.notOk([401, 403].includes(policy.status), `server B accepts it for the policy download (${policy.status})`);
    await policy.body?.cancel();
    const none = await fetch(`${relay.url}/rudder/relay-api/1/shared-folder/motd`);
    t.equal(none.status, 401);
    t.match(await none.json(), { error: { code: 'ERR_TOKEN_INVALID' } });
    t.match((await apiB('GET', '/api/1/keys')).json.data, [{ kid: jA.keys[0]!.kid, nodes: 1 }], 'server B counts the node A issued to');

    // A rotation at B: A signs with the new key and publishes it (its copy of the keys is short-lived).
    const rot = await apiB('POST', '/api/1/keys/rotate');
    t.equal(rot.status, 201);
    const newKid = rot.json.data.kid as string;
    await waitFor(async () => ((await jwks(a.url)).keys.some((k) => k.kid === newKid) ? true : undefined), 'server A to publish the key made at B', 15_000);
    const second = await fetch(`${a.url}/identity/renew`, { method: 'POST', body: makeRenewRequest(node, id) });
    t.equal(second.status, 200);
    const token2 = ((await second.json()) as { data: { token: string } }).data.token;
    t.equal(JSON.parse(Buffer.from(token2.split('.')[0]!, 'base64url').toString()).kid, newKid, 'server A signs with the key rotated at B');
    const shared2 = await fetch(`${relay.url}/rudder/relay-api/1/shared-folder/motd`, { headers: { authorization: `Bearer ${token2}` } });
    t.equal(shared2.status, 200, 'the relay fetches the new key from B on first sight');
    await shared2.body?.cancel();

    // A forced renewal at A is honoured at B: B refuses the token it would otherwise accept.
    t.equal((await apiA('POST', `/api/1/nodes/${id}/identity/renew`)).status, 200);
    const forced = await fetch(`${b.url}/policies/${id}/rules`, { headers: { authorization: `Bearer ${token2}` } });
    t.equal(forced.status, 401, 'server B refuses a token revoked at server A');
    t.match(await forced.json(), { error: { code: 'ERR_TOKEN_EXPIRED' } });

    // A third server given another secret refuses to start instead of making its own keyring.
    const otherConf = join(dir, 'other.toml');
    await writeFile(join(dir, 'other.secret'), 'a different secret, long enough to be accepted\n', { mode: 0o600 });
    await writeFile(otherConf, `[identity]\nsecret_file = "${join(dir, 'other.secret')}"\n`);
    const refused = await runProgram(BIN.server, ['serve', '--config', otherConf, '--listen', '127.0.0.1:0', '--data-dir', join(dir, 'c'), '--database', url, '--log-level', 'error'], 30_000);
    t.not(refused.code, 0, 'a server with another secret does not start');
    t.match(refused.stdout + refused.stderr, /identity secret \S+ does not open signing key/);
    t.match(refused.stdout, /"code":"ERR_STARTUP"/);
    t.equal((await apiA('GET', '/api/1/keys')).json.data.length, 2, 'and added no key');
  });
}
