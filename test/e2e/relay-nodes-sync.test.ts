/**
 * The node list a relay routes by, synced from the real server (no nodes_list_file): a node
 * accepted on the server becomes routable at the relay (its run log, which arrives after the
 * relay's last sync, makes the relay ask again rather than refuse it), a node the server has not
 * accepted is refused at the relay with `refuse_unknown`, and a restart with the server down
 * keeps routing by the cached list.
 */
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { spawn } from 'node:child_process';
import { adminClient, BIN, runProgram, startProgram, waitFor, programDir, programCommand, startServer } from '../helpers/programs.js';

interface Status {
  data: { nodes_list: { configured: boolean; nodes: number; synced?: { synced: boolean; nodes?: number; confirmed_at?: string } }; remote_run: { connections: number } };
}

t.test('a node accepted on the server is routable at a relay without a nodes_list_file, and stays so across a restart with the server down', async (t) => {
  const dir = programDir(t);
  const { server, token, api } = await startServer(t, join(dir, 'server'));
  await writeFile(join(dir, 'relayd.toml'), '[nodes_sync]\nrefuse_unknown = true\nmiss_refresh = "50ms"\n');
  const relayArgs = ['--config', join(dir, 'relayd.toml'), '--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'), '--upstream', server.url, '--log-level', 'warn'];
  let relay = await startProgram(BIN.relayd, relayArgs);
  t.teardown(() => relay.stop());
  const status = async () => (await (await fetch(`${relay.url}/rudder/relay-api/1/system/status`)).json()) as Status;

  await waitFor(async () => ((await status()).data.nodes_list.synced?.synced ? true : undefined), 'the relay to sync the (empty) list');
  t.equal((await status()).data.nodes_list.nodes, 0, 'no node is accepted yet');

  // First run: the inventory goes up (it registers the node); the run log of a node the server
  // has not accepted is refused at the relay, after asking the server again.
  const agentArgs = ['run', '--relay', relay.url, '--state-dir', join(dir, 'agent'), '--log-level', 'warn'];
  const first = await runProgram(BIN.agent, agentArgs);
  t.equal(first.code, 5, 'the first agent run exits 5: waiting for acceptance');
  const nodeId = (await readFile(join(dir, 'agent', 'node-id'), 'utf8')).trim();
  await waitFor(async () => ((await api('GET', '/api/1/nodes/pending')).json.total === 1 ? true : undefined), 'the node to be pending on the server');
  const failedDir = join(dir, 'relay', 'failed', 'reports');
  const reasonFile = await waitFor(async () => (await readdir(failedDir)).find((n) => n.endsWith('.reason')), 'the unaccepted run log refused at the relay');
  t.match(await readFile(join(failedDir, reasonFile), 'utf8'), /ERR_NODE_UNKNOWN: node .* not in the nodes list synced from the upstream/);

  // Accepted on the server: the next run log is newer than the relay's list, so the relay asks
  // again, finds the node and forwards the file.
  t.equal((await api('POST', `/api/1/nodes/${nodeId}/accept`)).status, 200);

  // Bug fixed: the relay answered 404 to the remote-run connection of a node accepted after its
  // last sync, for up to nodes_sync.interval. Now a miss asks the server again first.
  const listener = spawn(...programCommand(BIN.agent, ['listen', '--relay', relay.url, '--state-dir', join(dir, 'agent'), '--log-level', 'warn']), { stdio: 'ignore' });
  const listenerExit = new Promise<number | null>((resolve) => listener.once('exit', (code) => resolve(code)));
  t.teardown(() => void listener.kill('SIGTERM'));
  await waitFor(async () => ((await status()).data.remote_run.connections === 1 ? true : undefined), 'the newly accepted node to hold its remote-run connection');
  listener.kill('SIGTERM');
  t.equal(await listenerExit, 0, 'the listener stops cleanly');

  const second = await runProgram(BIN.agent, agentArgs);
  t.equal(second.code, 0, 'the second agent run exits 0');
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${nodeId}/runs`)).json.total === 1 ? true : undefined), 'the run log stored on the server');
  const synced = (await status()).data.nodes_list;
  t.equal(synced.nodes, 1, 'the relay routes by the synced list');
  t.ok(synced.synced?.confirmed_at, 'confirmed by the server');

  // The relay serves its copy to sub-relays, ETag-conditional.
  const served = await fetch(`${relay.url}/rudder/relay-api/1/nodes`);
  t.equal(served.status, 200);
  const etag = served.headers.get('etag');
  t.ok(etag, 'with an ETag');
  const list = (await served.json()) as { data: { nodes: Record<string, { 'policy-server': string; 'key-hash'?: string }> } };
  t.same(Object.keys(list.data.nodes), [nodeId]);
  t.match(list.data.nodes[nodeId]!['key-hash'], /^sha256:[0-9a-f]{64}$/, "RUDDER's key-hash of the pinned certificate");
  t.equal((await fetch(`${relay.url}/rudder/relay-api/1/nodes`, { headers: { 'if-none-match': etag! } })).status, 304);
  t.equal((await fetch(`${server.url}/rudder/relay-api/1/nodes`, { headers: { 'if-none-match': etag! } })).status, 304, 'the same ETag as the server');

  // Restart with the server down: the cached list still routes.
  t.equal(await server.stop(), 0);
  t.equal(await relay.stop(), 0);
  relay = await startProgram(BIN.relayd, relayArgs);
  const after = (await status()).data.nodes_list;
  t.equal(after.nodes, 1, 'the cached list is used');
  t.equal(after.synced?.synced, true);
  t.notOk(after.synced?.confirmed_at, 'not confirmed by an upstream in this run');
  const again = await fetch(`${relay.url}/rudder/relay-api/1/nodes`);
  t.equal(again.headers.get('etag'), etag, 'and served as it was received');
  t.same(Object.keys(((await again.json()) as typeof list).data.nodes), [nodeId]);
});
