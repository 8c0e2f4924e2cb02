/**
 * Node identity end to end with the real programs (server, relayd requiring tokens, agent): the
 * agent gets its first token by signed request through the relay; after a rotation and a forced
 * delete of the old key, its still-fresh token is refused by the relay (401, unknown key), and the
 * agent renews and proceeds in the same run; an expired token is renewed the same way; the admin
 * `keys` verbs refuse to delete a key in use.
 */
import { spawn } from 'node:child_process';
import { chmod, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { adminClient, BIN, runProgram, startProgram, waitFor, programDir, programCommand, startServer } from '../helpers/programs.js';

const claims = (token: string) => {
  const [h, p] = token.trim().split('.').slice(0, 2).map((x) => JSON.parse(Buffer.from(x, 'base64url').toString()));
  return { kid: h.kid as string, ...p } as { kid: string; capstan_node_id: string; iat: number; exp: number; jti: string };
};

// The three tests share nothing (a server, relay and agent state of their own each) and spend
// much of their time waiting on programs and token lifetimes: they run at once. Programs that
// start beside the other tests' get a longer bound for their ready line than one alone needs.
t.jobs = 3;
const READY_MS = 60_000;

t.test('agent renews through the relay, survives a key deletion and an expired token within one run', async (t) => {
  const dir = programDir(t);
  const serverDir = join(dir, 'server');
  const { server } = await startServer(t, serverDir, { timeoutMs: READY_MS });
  const relayConf = join(dir, 'relayd.toml');
  await writeFile(relayConf, '[identity]\nrequire_token = true\njwks_min_refresh = "0s"\njwks_max_age = "1s"\n');
  const relay = await startProgram(BIN.relayd, ['-c', relayConf, '--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'), '--upstream', server.url, '--log-level', 'warn'], READY_MS);
  t.teardown(() => relay.stop());
  const api = adminClient(server.url, (await readFile(join(serverDir, 'admin.token'), 'utf8')).trim());
  const stateDir = join(dir, 'agent');
  const agent = () => runProgram(BIN.agent, ['run', '--relay', relay.url, '--state-dir', stateDir, '--log-level', 'warn']);
  const tokenFile = join(stateDir, 'identity.token');
  const keysCli = (...args: string[]) => runProgram(BIN.server, ['keys', ...args, '--data-dir', serverDir, '--json']);

  const first = await agent();
  t.equal(first.code, 5, `waiting for acceptance (${first.stderr})`);
  const nodeId = (await readFile(join(stateDir, 'node-id'), 'utf8')).trim();
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${nodeId}`)).status === 200 ? true : undefined), 'the node to be registered');
  await stat(tokenFile).then(() => t.fail('a pending node gets no token'), () => t.pass('a pending node gets no token'));
  t.equal((await runProgram(BIN.server, ['nodes', 'accept', nodeId, '--data-dir', serverDir])).code, 0);

  const second = await agent();
  t.equal(second.code, 0, second.stderr);
  const token1 = await readFile(tokenFile, 'utf8');
  t.equal((await stat(tokenFile)).mode & 0o777, 0o600, 'the token is kept 0600');
  const c1 = claims(token1);
  t.equal(c1.capstan_node_id, nodeId);
  const keys1 = JSON.parse((await keysCli('list')).stdout).data as Array<{ kid: string; nodes: number; active: boolean }>;
  t.match(keys1, [{ kid: c1.kid, nodes: 1, active: true }], 'the kid is recorded for the node');

  // Rotate; deleting the old key is refused while the node's token uses it, then forced.
  const rotated = await keysCli('rotate');
  t.equal(rotated.code, 0, rotated.stderr);
  const kid2 = JSON.parse(rotated.stdout).data.kid as string;
  const [refused, viaApi] = await Promise.all([keysCli('delete', c1.kid), api('DELETE', `/api/1/keys/${c1.kid}`)]);
  t.equal(refused.code, 4, 'delete of an in-use key refused');
  t.match(refused.stderr, /ERR_CONFLICT.*1 node/);
  t.match(viaApi, { status: 409, json: { error: { code: 'ERR_CONFLICT', nodes: 1 } } });
  t.equal((await keysCli('delete', c1.kid, '--force')).code, 0);
  // The relay learns of the deletion when its copy of the keys is older than jwks_max_age.
  await waitFor(async () => {
    const keys = ((await (await fetch(`${relay.url}/.well-known/jwks.json`)).json()) as { keys: Array<{ kid: string }> }).keys;
    return keys.some((k) => k.kid === c1.kid) ? undefined : true;
  }, 'the relay to drop the deleted key', 10_000);

  // The agent's token is fresh by its own clock, so it uses it; the relay refuses the unknown
  // key, and the agent renews by signed request and retries in the same run.
  const third = await agent();
  t.equal(third.code, 0, third.stderr);
  const c2 = claims(await readFile(tokenFile, 'utf8'));
  t.equal(c2.kid, kid2, 'renewed within the run, signed by the new key');
  t.not(c2.jti, c1.jti);

  // A token of this node used for another node's policy: 403, at the relay and at the server.
  const token2 = (await readFile(tokenFile, 'utf8')).trim();
  for (const base of [relay.url, server.url]) {
    const res = await fetch(`${base}/policies/some-other-node/rules`, { headers: { authorization: `Bearer ${token2}` } });
    t.equal(res.status, 403, `${base === relay.url ? 'relay' : 'server'}: another node's policy refused`);
    t.match(await res.json(), { error: { code: 'ERR_TOKEN_WRONG_NODE' } });
  }

  // Forced renewal: the server refuses tokens issued before it; the agent renews at its next run.
  const force = await api('POST', `/api/1/nodes/${nodeId}/identity/renew`);
  t.equal(force.status, 200);
  const forcedAt = Date.parse(force.json.data.forced_at);
  const direct = await fetch(`${server.url}/policies/${nodeId}/rules`, { headers: { authorization: `Bearer ${token2}` } });
  t.equal(direct.status, 401, 'the pre-force token is refused by the server');
  await direct.body?.cancel();
  // Tokens are timed in whole seconds: wait until a new one can be as new as the force time.
  await waitFor(async () => (Date.now() >= forcedAt ? true : undefined), 'the force time to pass', 5000);
  const forced = await agent();
  t.equal(forced.code, 0, forced.stderr);
  const cf = claims(await readFile(tokenFile, 'utf8'));
  t.not(cf.jti, c2.jti, 'the agent got a new token at its next contact');
  const after = await fetch(`${server.url}/policies/${nodeId}/rules`, { headers: { authorization: `Bearer ${(await readFile(tokenFile, 'utf8')).trim()}` } });
  t.not(after.status, 401, 'and the new one is accepted');
  await after.body?.cancel();

  // An expired token is never a lockout: the agent renews it with the signed request.
  const expired = `${token1.trim().split('.')[0]}.${Buffer.from(JSON.stringify({ ...claims(token1), iat: 1, nbf: 1, exp: 2 })).toString('base64url')}.x\n`;
  await writeFile(tokenFile, expired);
  await chmod(tokenFile, 0o600);
  const fourth = await agent();
  t.equal(fourth.code, 0, fourth.stderr);
  const c3 = claims(await readFile(tokenFile, 'utf8'));
  t.equal(c3.kid, kid2);
  t.ok(c3.exp > Date.now() / 1000, 'a valid token again');

  const runs = await waitFor(async () => {
    const r = await api('GET', `/api/1/nodes/${nodeId}/runs`);
    return r.json.total >= 4 ? r.json.total : undefined;
  }, 'the runs of the accepted node to be stored');
  t.ok(runs >= 4, 'the runs went on and reached the server');
});

/**
 * The agent's clock runs 100 s behind the relay's (a node whose NTP drifted): a token still fresh
 * by the agent's clock has expired by the relay's. Preloaded into the agent process only.
 */
const CLOCK_BEHIND = `
const offset = -100_000;
const Real = Date;
class Shifted extends Real {
  constructor(...a) { if (a.length === 0) super(Real.now() + offset); else super(...a); }
  static now() { return Real.now() + offset; }
}
globalThis.Date = Shifted;
`;

t.test('a token expired at the relay (401) is renewed by signed request within the same run, and by the listener', async (t) => {
  const dir = programDir(t, { 'clock-behind.mjs': CLOCK_BEHIND });
  const serverDir = join(dir, 'server');
  await writeFile(join(dir, 'server.toml'), '[identity]\ntoken_ttl = "3s"\n');
  const stateDir = join(dir, 'agent');
  const clockBehind = [`--import=${join(dir, 'clock-behind.mjs')}`];
  const agentRun = (cmd: string, args: string[] = []) => new Promise<{ code: number | null; stderr: string; stdout: string }>((resolve) => {
    const p = spawn(...programCommand(BIN.agent, [cmd, '--state-dir', stateDir, '--log-level', 'warn', ...args], clockBehind), { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    p.once('exit', (code) => resolve({ code, stdout, stderr }));
  });
  // Registered and accepted by an admin with the agent's certificate, before the relay starts.
  // The agent makes its identity (`info` talks to no one) while the server starts.
  const [{ server, api }, info] = await Promise.all([startServer(t, serverDir, { config: join(dir, 'server.toml'), timeoutMs: READY_MS }), agentRun('info', ['--relay', 'http://127.0.0.1:9'])]);
  t.equal(info.code, 0, info.stderr);
  const { node_id: nodeId, certificate } = JSON.parse(info.stdout) as { node_id: string; certificate: string };
  t.equal((await api('POST', '/api/1/nodes', { id: nodeId, hostname: 'drift.test', certificate })).status, 201);
  // Default require_token (true); no clock-skew allowance, so an expired token is refused at once.
  await writeFile(join(dir, 'relayd.toml'), '[identity]\nclock_skew = "0s"\n');
  const relay = await startProgram(BIN.relayd, ['-c', join(dir, 'relayd.toml'), '--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'), '--upstream', server.url, '--log-level', 'warn'], READY_MS);
  t.teardown(() => relay.stop());
  const tokenFile = join(stateDir, 'identity.token');

  const first = await agentRun('run', ['--relay', relay.url]);
  t.equal(first.code, 0, first.stderr);
  t.notMatch(first.stderr, /policy not refreshed/);
  const c1 = claims(await readFile(tokenFile, 'utf8'));
  t.equal(c1.exp - c1.iat, 3, 'the configured 3 s life');

  // Past its expiry by the relay's clock; fresh by the agent's (exp − (now − 100 s) is far above a third of 3 s).
  await waitFor(async () => (Date.now() / 1000 > c1.exp + 1 ? true : undefined), 'the token to expire', 10_000);
  t.ok(c1.exp - (Date.now() - 100_000) / 1000 > (c1.exp - c1.iat) / 3, 'the agent will not renew it on its own');
  const refused = await fetch(`${relay.url}/policies/${nodeId}/rules`, { headers: { authorization: `Bearer ${(await readFile(tokenFile, 'utf8')).trim()}` } });
  t.equal(refused.status, 401, 'the relay refuses the stored token');
  t.match(await refused.json(), { error: { code: 'ERR_TOKEN_EXPIRED' } });

  const second = await agentRun('run', ['--relay', relay.url]);
  t.equal(second.code, 0, second.stderr);
  t.notMatch(second.stderr, /policy not refreshed/, 'the policy was fetched in this run, after the renewal');
  const c2 = claims(await readFile(tokenFile, 'utf8'));
  t.not(c2.jti, c1.jti, 'renewed by signed request during the run');
  t.ok(c2.exp > c1.exp);

  // The listener: its stored token is expired for the relay too; the 401 renews it and it connects.
  await waitFor(async () => (Date.now() / 1000 > c2.exp + 1 ? true : undefined), 'the second token to expire', 10_000);
  const listener = spawn(...programCommand(BIN.agent, ['listen', '--relay', relay.url, '--state-dir', stateDir, '--log-level', 'info'], clockBehind), { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  listener.stdout.on('data', (d: Buffer) => (out += d.toString()));
  listener.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise((r) => listener.once('exit', r));
  t.teardown(async () => {
    listener.kill('SIGKILL');
    await exited;
  });
  await waitFor(async () => (out.includes('listening for remote runs') ? true : undefined), 'the listener to connect', 30_000).catch((err: Error) => {
    throw new Error(`${err.message}: ${out}`);
  });
  t.match(out, /relay refused the identity token; renewed it/, 'connected after a 401 and a renewal, without backoff');
  const c3 = claims(await readFile(tokenFile, 'utf8'));
  t.not(c3.jti, c2.jti);
  const res = await fetch(`${relay.url}/rudder/relay-api/1/remote-run/nodes/${nodeId}`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'keep_output=true' });
  t.match(await res.text(), new RegExp(`${nodeId}: \\[done, exit 0\\]`), 'and a remote run reaches it');
});

t.test('an agent talking to the server itself gets its token in the answer to its inventory; through a relay it renews by signed request', async (t) => {
  const dir = programDir(t);
  const serverDir = join(dir, 'server');
  const { server, api } = await startServer(t, serverDir, { logLevel: 'info', timeoutMs: READY_MS });
  // The relay used in the second half starts while the first half talks to the server directly.
  const relayStarting = startProgram(BIN.relayd, ['--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'), '--upstream', server.url, '--log-level', 'warn'], READY_MS);
  t.teardown(async () => (await relayStarting.catch(() => undefined))?.stop());
  const stateDir = join(dir, 'agent');
  const tokenFile = join(stateDir, 'identity.token');
  const agent = (upstream: string) => runProgram(BIN.agent, ['run', '--relay', upstream, '--state-dir', stateDir, '--log-level', 'warn', '--force-inventory']);
  // How the server issued each token, from its log lines.
  const issued = () => server.output.flatMap((l) => {
    try {
      const m = (JSON.parse(l) as { msg?: string }).msg;
      return m?.startsWith('node token issued') ? [m] : [];
    } catch {
      return [];
    }
  });
  const inventoryAt = async (nodeId: string) => {
    const r = await api('GET', `/api/1/nodes/${nodeId}/inventory`);
    return r.status === 200 ? (r.json.data as { received_at: string; inventory: Record<string, unknown> }) : undefined;
  };

  const first = await agent(server.url);
  t.equal(first.code, 5, `waiting for acceptance (${first.stderr})`);
  const nodeId = (await readFile(join(stateDir, 'node-id'), 'utf8')).trim();
  const inv1 = await waitFor(() => inventoryAt(nodeId), 'the first inventory to be stored');
  t.notOk('identity_request' in inv1.inventory, 'the token request is not kept in the stored inventory');
  t.same(issued(), [], 'a pending node gets no token');
  t.equal((await runProgram(BIN.server, ['nodes', 'accept', nodeId, '--data-dir', serverDir])).code, 0);

  const second = await agent(server.url);
  t.equal(second.code, 0, second.stderr);
  const c1 = claims(await readFile(tokenFile, 'utf8'));
  t.equal(c1.capstan_node_id, nodeId);
  t.equal((await stat(tokenFile)).mode & 0o777, 0o600);
  t.same(issued(), ['node token issued with an inventory'], 'delivered in the answer to the inventory: no renewal request was needed');

  // Through a relay: the relay answers the upload itself (and never passes the request header
  // on), so the agent renews by signed request, and the forwarded inventory mints no token.
  const relay = await relayStarting;
  const before = (await inventoryAt(nodeId))!.received_at;
  await writeFile(tokenFile, '');
  const third = await agent(relay.url);
  t.equal(third.code, 0, third.stderr);
  await waitFor(async () => ((await inventoryAt(nodeId))!.received_at > before ? true : undefined), 'the relayed inventory to reach the server');
  const c2 = claims(await readFile(tokenFile, 'utf8'));
  t.not(c2.jti, c1.jti);
  t.same(issued(), ['node token issued with an inventory', 'node token issued'], 'the second token came by signed renewal, and the relayed inventory got none');
});
