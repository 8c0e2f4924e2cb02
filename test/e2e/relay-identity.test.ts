/**
 * Relay identity with the real programs: a server, a top relay linked to it and a sub-relay
 * linked to the top relay, both registered as relays by an admin (`capstan-relayd --identity`,
 * `POST /api/1/nodes {…, relay: true}`), both keeping `require_token` and `require_relay_token`
 * on (the defaults), and a real agent listening on the sub-relay. A job from the server and a
 * trigger on the top relay reach the agent through both links; the relay-only endpoints refuse
 * no token, an agent's token and another relay's token, at the server and at the top relay; the
 * relays' 6-second tokens are renewed when a third of their life is left, and jobs still reach
 * the agent long after the first tokens expired.
 */
import { spawn } from 'node:child_process';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { adminClient, BIN, registerRelay, runProgram, startProgram, waitFor, programDir, programCommand, startServer } from '../helpers/programs.js';
import { statusAndCode } from '../helpers/http.js';

const claims = (token: string) => JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as { iat: number; exp: number; jti: string; capstan_role?: string; capstan_node_id: string };
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

const refusal = async (url: string, init: RequestInit = {}) => statusAndCode(await fetch(url, init));

t.test('a job reaches an agent behind a sub-relay, every link authenticated, relay tokens renewed as they expire', async (t) => {
  const dir = programDir(t);
  const serverDir = join(dir, 'server');
  // Relays' tokens live 6 s (their group's TTL) and are checked with a 1 s clock skew: the test
  // sees them expire and be renewed. Agents keep the default 24 h.
  await writeFile(join(dir, 'server.toml'), '[identity]\ngroup_ttls = "relays=6s"\nclock_skew = "1s"\n\n[jobs]\nsweep_interval = "200ms"\n');
  const { server, api } = await startServer(t, serverDir, { config: join(dir, 'server.toml') });

  // The top relay routes by the nodes list it syncs from the server: the agent is under
  // relay-sub (its inventory names the relay it asked at /uuid), relay-sub under relay-top (as
  // registered). No identity setting is relaxed anywhere.
  await writeFile(join(dir, 'top.toml'), '[general]\nnode_id = "relay-top"\n\n[remote_run]\nlink_upstream = true\nconnect_wait = "2s"\n\n[identity]\nclock_skew = "1s"\n');
  const topArgs = ['-c', join(dir, 'top.toml'), '--spool-dir', join(dir, 'top'), '--upstream', server.url];
  const topId = await registerRelay(api, topArgs, { groups: ['relays'] });
  t.equal(topId.node_id, 'relay-top');
  const top = await startProgram(BIN.relayd, [...topArgs, '--listen', '127.0.0.1:0', '--log-level', 'warn']);
  t.teardown(() => top.stop());
  await writeFile(join(dir, 'sub.toml'), '[general]\nnode_id = "relay-sub"\n\n[remote_run]\nlink_upstream = true\n\n[identity]\nclock_skew = "1s"\n');
  const subArgs = ['-c', join(dir, 'sub.toml'), '--spool-dir', join(dir, 'sub'), '--upstream', top.url];
  await registerRelay(api, subArgs, { groups: ['relays'], policy_server: 'relay-top' });
  const sub = await startProgram(BIN.relayd, [...subArgs, '--listen', '127.0.0.1:0', '--log-level', 'warn']);
  t.teardown(() => sub.stop());
  t.equal((await stat(join(dir, 'sub', 'relay.key'))).mode & 0o777, 0o600, 'the relay\'s key is 0600');

  const relayStatus = async (url: string) => ((await (await fetch(`${url}/rudder/relay-api/1/system/status`)).json()) as any).data;
  await waitFor(async () => ((await api('GET', '/api/1/system/status')).json?.data?.remote_run?.relays?.includes('relay-top') ? true : undefined), 'the top relay to link to the server');
  await waitFor(async () => ((await relayStatus(top.url)).remote_run.connections === 1 ? true : undefined), 'the sub-relay to link to the top relay');
  // Relays send no inventory and no run: their renewals (the sub-relay's passed up by the top
  // relay) and the top relay's link are their contacts, so neither stays `unknown`. A relay is
  // a node with a certificate but no agent.
  for (const id of ['relay-top', 'relay-sub']) {
    const seen = await waitFor(async () => {
      const n = (await api('GET', `/api/1/nodes/${id}`)).json.data;
      return n.status === 'reachable' ? n : undefined;
    }, `${id} reachable`);
    t.match(seen, { relay: true, state: 'running', last_contact_at: /^\d{4}-/ }, `${id} heard from`);
  }
  const relays = (await api('GET', '/api/1/nodes?relay=true&sort=id')).json.data as Array<{ id: string; status: string; has_agent: boolean }>;
  t.same(relays.map((n) => [n.id, n.status, n.has_agent]), [['relay-sub', 'reachable', false], ['relay-top', 'reachable', false]], 'listed reachable, without an agent');
  const topToken = () => readFile(join(dir, 'top', 'relay.token'), 'utf8').then((s) => s.trim());
  const subToken = () => readFile(join(dir, 'sub', 'relay.token'), 'utf8').then((s) => s.trim());
  const firstTop = await topToken();
  const firstSub = await subToken();
  t.match(claims(firstTop), { capstan_node_id: 'relay-top', capstan_role: 'relay' });
  t.match(claims(firstSub), { capstan_node_id: 'relay-sub', capstan_role: 'relay' });
  t.equal((await stat(join(dir, 'sub', 'relay.token'))).mode & 0o777, 0o600, 'the relay\'s token is 0600');

  // An agent behind the sub-relay, enrolled the normal way, holding its listen connection there.
  const stateDir = join(dir, 'agent');
  const agentArgs = ['--relay', sub.url, '--state-dir', stateDir, '--log-level', 'warn'];
  const first = await runProgram(BIN.agent, ['run', ...agentArgs]);
  t.equal(first.code, 5, `waiting for acceptance (${first.stderr})`);
  const agentId = (await readFile(join(stateDir, 'node-id'), 'utf8')).trim();
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${agentId}`)).status === 200 ? true : undefined), 'the agent registered');
  t.equal((await api('GET', `/api/1/nodes/${agentId}`)).json.data.policy_server, 'relay-sub', 'the agent names its relay by node id');
  t.match(JSON.parse(await readFile(join(stateDir, 'policy-server'), 'utf8')), { id: 'relay-sub' }, 'and remembers it');
  t.equal((await api('POST', `/api/1/nodes/${agentId}/accept`)).status, 200);
  const second = await runProgram(BIN.agent, ['run', ...agentArgs]);
  t.equal(second.code, 0, second.stderr);
  const agentToken = (await readFile(join(stateDir, 'identity.token'), 'utf8')).trim();
  const listener = spawn(...programCommand(BIN.agent, ['listen', ...agentArgs]), { stdio: ['ignore', 'ignore', 'pipe'] });
  const listenLog: string[] = [];
  listener.stderr!.on('data', (d: Buffer) => listenLog.push(d.toString()));
  t.teardown(() => listener.kill('SIGKILL'));
  await waitFor(async () => ((await relayStatus(sub.url)).remote_run.connections === 1 ? true : undefined), 'the agent to connect to the sub-relay');

  const finished = (id: string) => waitFor(async () => {
    const r = await api('GET', `/api/1/jobs/${id}`);
    return r.json.data.state === 'finished' ? r.json.data : undefined;
  }, `job ${id} to finish`, 60_000);
  const job = async (name: string) => {
    const created = await api('POST', '/api/1/jobs', { name, type: 'run', nodes: [agentId], keep_output: true });
    t.equal(created.status, 201);
    return (await finished(created.json.data.id)).tasks[0];
  };
  const task = await job('through two relays');
  t.match(task, { node_id: agentId, state: 'done', reason: 'completed', exit_code: 0, relay: 'relay-top' }, `the job ran the agent behind the sub-relay (${listenLog.join('')})`);
  t.match(task.output, /config [^:]+: \d+ success, \d+ repaired, 0 errors/);
  // A trigger on the top relay's own API reaches it too.
  const trigger = await (await fetch(`${top.url}/rudder/relay-api/1/remote-run/nodes/${agentId}`, { method: 'POST', body: 'keep_output=false', headers: { 'content-type': 'application/x-www-form-urlencoded' } })).text();
  t.equal(trigger, `${agentId}: [started]\n${agentId}: [done, exit 0]\n`);

  // What only a relay may do, refused to anyone else: at the server…
  const discovery = `${server.url}/relay-api/1/providers/relay-top/managers/none/discovery`;
  const post = (headers: Record<string, string>) => ({ method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: '{"instances":[]}' });
  t.match(await refusal(discovery, post({})), { status: 401, code: 'ERR_TOKEN_INVALID' }, 'discovery without a token');
  t.match(await refusal(discovery, post(bearer(agentToken))), { status: 403, code: 'ERR_TOKEN_NOT_RELAY' }, 'discovery with an agent\'s token');
  t.match(await refusal(discovery, post(bearer(await subToken()))), { status: 403, code: 'ERR_TOKEN_WRONG_NODE' }, 'discovery with another relay\'s token');
  t.match(await refusal(discovery, post(bearer(await topToken()))), { status: 404, code: 'ERR_MANAGER_UNKNOWN' }, 'the relay\'s own token passes the check');
  const serverLink = `${server.url}/remote-run/listen/relay-top?relay=1`;
  t.match(await refusal(serverLink), { status: 401, code: 'ERR_TOKEN_INVALID' }, 'a link without a token');
  t.match(await refusal(serverLink, { headers: bearer(agentToken) }), { status: 403, code: 'ERR_TOKEN_NOT_RELAY' }, 'a link with an agent\'s token');
  t.match(await refusal(serverLink, { headers: bearer(await subToken()) }), { status: 403, code: 'ERR_TOKEN_WRONG_NODE' }, 'a link with another relay\'s token');
  // … and at the top relay, for its sub-relay's link.
  const topLink = `${top.url}/remote-run/listen/relay-sub?relay=1`;
  t.match(await refusal(topLink), { status: 401, code: 'ERR_TOKEN_INVALID' });
  t.match(await refusal(topLink, { headers: bearer(agentToken) }), { status: 403, code: 'ERR_TOKEN_NOT_RELAY' });
  t.match(await refusal(topLink, { headers: bearer(await topToken()) }), { status: 403, code: 'ERR_TOKEN_WRONG_NODE' });
  // Through the sub-relay and the top relay, an intermediate relay passes provider calls up
  // unchanged: the server still sees (and refuses) an agent's token.
  t.match(await refusal(`${sub.url}/relay-api/1/providers/relay-sub/managers`, { headers: bearer(agentToken) }), { status: 403, code: 'ERR_TOKEN_NOT_RELAY' });
  const viaRelays = await fetch(`${sub.url}/relay-api/1/providers/relay-sub/managers`, { headers: bearer(await subToken()) });
  t.equal(viaRelays.status, 200, 'the sub-relay\'s own token, through both relays');

  // Renewal: both relays renew before their 6 s tokens expire, and the links follow.
  const renewedTop = await waitFor(async () => {
    const now = await topToken();
    return claims(now).iat >= claims(firstTop).exp + 1 ? now : undefined;
  }, 'the top relay to hold a token issued after its first one expired', 30_000);
  const renewedSub = await waitFor(async () => {
    const now = await subToken();
    return claims(now).iat >= claims(firstSub).exp + 1 ? now : undefined;
  }, 'the sub-relay likewise', 30_000);
  t.ok(claims(renewedTop).jti !== claims(firstTop).jti && claims(renewedSub).jti !== claims(firstSub).jti, 'new tokens');
  t.ok(Date.now() / 1000 > claims(firstTop).exp + 1 && Date.now() / 1000 > claims(firstSub).exp + 1, 'the first tokens are past their life and skew');
  t.match(await refusal(discovery, post(bearer(firstTop))), { status: 401, code: 'ERR_TOKEN_EXPIRED' }, 'the first token is refused now');
  const later = await job('after the first tokens expired');
  t.match(later, { state: 'done', reason: 'completed', relay: 'relay-top' }, 'the links were renewed with their tokens');
  t.equal(listener.exitCode, null, 'the agent kept listening');
});
