/**
 * Revocations at the server reach relays at their next sync of the nodes list, not when the token
 * expires (relays check tokens without state):
 * - a sub-relay no longer registered: the server's list marks registered relays (`"relay": true`),
 *   the top relay ends a link whose relay it no longer marks and refuses it again
 *   (403 ERR_TOKEN_NOT_RELAY) however valid its token still is;
 * - a forced renewal of an agent: the list carries `"tokens-after"`, the relay ends the agent's
 *   remote-run connection (`bye` token_expired), refuses the old token (401), and the agent renews
 *   by signed request and comes back with a new one.
 * Real programs, real tokens.
 */
import { spawn } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { adminClient, BIN, registerRelay, runProgram, startProgram, waitFor, programDir, programCommand, startServer } from '../helpers/programs.js';

t.test('a sub-relay no longer registered is cut off at the next list sync and cannot link again', async (t) => {
  const dir = programDir(t);
  const serverDir = join(dir, 'server');
  const { server, api } = await startServer(t, serverDir);

  await writeFile(join(dir, 'top.toml'), '[general]\nnode_id = "relay-top"\n\n[remote_run]\nlink_upstream = true\n\n[nodes_sync]\nmiss_refresh = "100ms"\n');
  const topArgs = ['-c', join(dir, 'top.toml'), '--spool-dir', join(dir, 'top'), '--upstream', server.url];
  await registerRelay(api, topArgs);
  const top = await startProgram(BIN.relayd, [...topArgs, '--listen', '127.0.0.1:0', '--log-level', 'warn']);
  t.teardown(() => top.stop());
  await writeFile(join(dir, 'sub.toml'), '[general]\nnode_id = "relay-sub"\n\n[remote_run]\nlink_upstream = true\n');
  const subArgs = ['-c', join(dir, 'sub.toml'), '--spool-dir', join(dir, 'sub'), '--upstream', top.url];
  await registerRelay(api, subArgs, { policy_server: 'relay-top' });
  const sub = await startProgram(BIN.relayd, [...subArgs, '--listen', '127.0.0.1:0', '--log-level', 'warn']);
  t.teardown(() => sub.stop());

  const relayStatus = async (url: string) => ((await (await fetch(`${url}/rudder/relay-api/1/system/status`)).json()) as any).data;
  // The sub-relay was registered after the top relay's first sync: its link makes the top relay ask again.
  await waitFor(async () => ((await relayStatus(top.url)).remote_run.connections === 1 ? true : undefined), 'the sub-relay to link to the top relay');
  const list = (await (await fetch(`${top.url}/rudder/relay-api/1/nodes`)).json()) as { data: { nodes: Record<string, { relay?: boolean }> } };
  t.equal(list.data.nodes['relay-sub']?.relay, true, 'the synced list marks the sub-relay as a relay');
  t.equal(list.data.nodes['relay-top']?.relay, true);

  // The admin deletes the relay: its token stays valid for hours. (Taking the flag away also forces
  // a renewal, which the next test shows reaching relays on its own.)
  const token = (await readFile(join(dir, 'sub', 'relay.token'), 'utf8')).trim();
  t.equal((await api('DELETE', '/api/1/nodes/relay-sub')).status, 204);
  // The next sync (here a reload; otherwise nodes_sync.interval) ends the link.
  const reload = await fetch(`${top.url}/rudder/relay-api/1/system/reload`, { method: 'POST' });
  t.equal(reload.status, 200);
  await waitFor(async () => ((await relayStatus(top.url)).remote_run.connections === 0 ? true : undefined), 'the top relay to end the link');
  // Relinking with the still-valid token is refused, and stays so.
  const again = await fetch(`${top.url}/remote-run/listen/relay-sub?relay=1`, { headers: { authorization: `Bearer ${token}` } });
  t.equal(again.status, 403);
  t.match(await again.text(), /ERR_TOKEN_NOT_RELAY/);
  await new Promise((r) => setTimeout(r, 1500));
  t.equal((await relayStatus(top.url)).remote_run.connections, 0, 'the sub-relay\'s own retries are refused too');
  // The top relay's own link to the server is untouched.
  t.ok((await api('GET', '/api/1/system/status')).json?.data?.remote_run?.relays?.includes('relay-top'), 'the top relay is still linked to the server');
});

t.test('a forced renewal of an agent ends its connection at the relay and refuses its old token there; the agent renews and comes back', async (t) => {
  const dir = programDir(t);
  const serverDir = join(dir, 'server');
  const { server, api } = await startServer(t, serverDir);
  const relay = await startProgram(BIN.relayd, ['--spool-dir', join(dir, 'relay'), '--upstream', server.url, '--listen', '127.0.0.1:0', '--log-level', 'warn']);
  t.teardown(() => relay.stop());
  const relayStatus = async () => ((await (await fetch(`${relay.url}/rudder/relay-api/1/system/status`)).json()) as any).data;

  const stateDir = join(dir, 'agent');
  const agentArgs = ['--relay', relay.url, '--state-dir', stateDir, '--log-level', 'warn'];
  t.equal((await runProgram(BIN.agent, ['run', ...agentArgs])).code, 5, 'waiting for acceptance');
  const agentId = (await readFile(join(stateDir, 'node-id'), 'utf8')).trim();
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${agentId}`)).status === 200 ? true : undefined), 'the agent registered');
  t.equal((await api('POST', `/api/1/nodes/${agentId}/accept`)).status, 200);
  const second = await runProgram(BIN.agent, ['run', ...agentArgs]);
  t.equal(second.code, 0, second.stderr);
  const oldToken = (await readFile(join(stateDir, 'identity.token'), 'utf8')).trim();
  const listener = spawn(...programCommand(BIN.agent, ['listen', ...agentArgs]), { stdio: ['ignore', 'ignore', 'pipe'] });
  t.teardown(() => listener.kill('SIGKILL'));
  await waitFor(async () => ((await relayStatus()).remote_run.connections === 1 ? true : undefined), 'the agent to connect');
  const listenUrl = `${relay.url}/remote-run/listen/${agentId}`;
  const shared = `${relay.url}/rudder/relay-api/1/shared-folder/anything`;
  t.not((await fetch(shared, { headers: { authorization: `Bearer ${oldToken}` } })).status, 401, 'the token opens the relay before');

  // Token times are whole seconds: the forced renewal must come after the token's second.
  await new Promise((r) => setTimeout(r, 1100));
  t.equal((await api('POST', `/api/1/nodes/${agentId}/identity/renew`)).status, 200);
  const list = async () => ((await (await fetch(`${server.url}/rudder/relay-api/1/nodes`)).json()) as any).data.nodes[agentId];
  t.ok((await list())['tokens-after'] > 0, 'the server lists the forced renewal');
  t.equal((await fetch(`${relay.url}/rudder/relay-api/1/system/reload`, { method: 'POST' })).status, 200, 'the relay syncs (otherwise at nodes_sync.interval)');

  const refused = await fetch(shared, { headers: { authorization: `Bearer ${oldToken}` } });
  t.equal(refused.status, 401, 'the old token is refused at the relay');
  t.match(await refused.text(), /ERR_TOKEN_EXPIRED/);
  t.equal((await fetch(listenUrl, { headers: { authorization: `Bearer ${oldToken}` } })).status, 401);
  // The listener was sent a bye, renewed by signed request and is connected again with a new token.
  await waitFor(async () => {
    const now = (await readFile(join(stateDir, 'identity.token'), 'utf8').catch(() => '')).trim();
    return now && now !== oldToken && (await relayStatus()).remote_run.connections === 1 ? true : undefined;
  }, 'the agent to renew and reconnect', 20_000);
  const fresh = (await readFile(join(stateDir, 'identity.token'), 'utf8')).trim();
  t.not((await fetch(shared, { headers: { authorization: `Bearer ${fresh}` } })).status, 401, 'the renewed token opens the relay');
});
