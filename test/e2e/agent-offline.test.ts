/**
 * The agent's outage case with the real programs: the relay stops, the agent's run completes from
 * its cached policy and queues its run log; the relay comes back on the same address and the next
 * run sends both, and the server holds both runs, in order.
 */
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { adminClient, BIN, runProgram, startProgram, waitFor, programDir, startServer } from '../helpers/programs.js';

t.test('relay down: cached policy, queued run log, back-filled in order', async (t) => {
  const dir = programDir(t);
  const { server } = await startServer(t, join(dir, 'server'));
  const relayArgs = (listen: string) => ['--listen', listen, '--spool-dir', join(dir, 'relay'), '--upstream', server.url, '--log-level', 'warn'];
  let relay = await startProgram(BIN.relayd, relayArgs('127.0.0.1:0'));
  // Stopped on a failure too (a relay left running held the test until tap's timeout).
  const firstRelay = relay;
  t.teardown(() => firstRelay.stop());
  const relayUrl = relay.url;
  const api = adminClient(server.url, (await readFile(join(dir, 'server', 'admin.token'), 'utf8')).trim());
  const target = join(dir, 'motd');
  const agent = () => runProgram(BIN.agent, ['run', '--relay', relayUrl, '--state-dir', join(dir, 'agent'), '--log-level', 'error']);

  t.equal((await agent()).code, 5, 'waiting for acceptance');
  const nodeId = (await readFile(join(dir, 'agent', 'node-id'), 'utf8')).trim();
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${nodeId}`)).status === 200 ? true : undefined), 'the node to register');
  // The first run log (of a node not accepted yet) is refused at the server. Accepting the node
  // before it got there let it in (it was still on its way through the relay): a race that
  // made this test count one run too many now and then.
  const failedDir = join(dir, 'server', 'spool', 'failed', 'reports');
  await waitFor(async () => ((await readdir(failedDir)).some((n) => n.endsWith('.reason')) ? true : undefined), 'the unaccepted run log to be refused');
  t.equal((await api('POST', `/api/1/nodes/${nodeId}/accept`)).status, 200);
  t.equal((await api('POST', '/api/1/directives', { id: 'motd', name: 'motd', method: 'file_content', params: { path: target, content: 'v1\n' } })).status, 201);
  t.equal((await api('POST', '/api/1/groups', { id: 'all', name: 'all', nodes: [nodeId] })).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'base', name: 'base', directives: ['motd'], groups: ['all'] })).status, 201);

  const online = await agent();
  t.match(online.stdout, /1 repaired, 0 errors/);
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${nodeId}/runs`)).json.total === 1 ? true : undefined), 'the first policy run');

  await relay.stop();
  await writeFile(target, 'drift\n');
  const offline = await agent();
  t.equal(offline.code, 0, offline.stderr);
  t.match(offline.stdout, /1 repaired, 0 errors.*; sent 0, queued 1/, 'applied from the cached policy, run log queued');
  t.equal(await readFile(target, 'utf8'), 'v1\n');

  relay = await startProgram(BIN.relayd, relayArgs(new URL(relayUrl).host));
  t.teardown(() => relay.stop());
  const back = await agent();
  t.match(back.stdout, /sent 2, queued 0/, 'the queued run log and the new one');
  const runs = await waitFor(async () => {
    const r = await api('GET', `/api/1/nodes/${nodeId}/runs`);
    return r.json.total === 3 ? r.json.data : undefined;
  }, 'all three runs stored');
  const starts = runs.map((r: { started_at: string }) => r.started_at);
  t.same([...starts].sort().reverse(), starts, 'newest first, each once');
  t.equal(runs[1].counts.result_repaired, 1, 'the offline run is stored with its repair');
});
