/**
 * Remote-run with the real programs: `capstan-agent listen` holds its outbound connection to a
 * real relayd, with the node token it got from the real server (relays require one); a trigger
 * on the relay API starts a real agent run at once, its output streams back, its run log
 * reaches the server; once the agent is gone the node is reported offline after the bounded wait.
 */
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { adminClient, BIN, runProgram, startProgram, waitFor, programDir, programCommand, startServer } from '../helpers/programs.js';
import { startRelayd } from '../relayd/helpers/proc.js';
import { until } from '../relayd/helpers/upstream.js';

t.test('a trigger runs a listening agent at once and streams its output', async (t) => {
  const dir = programDir(t);
  const serverDir = join(dir, 'server');
  const { server, api } = await startServer(t, serverDir);
  // The node is registered by an admin with the certificate the agent made (`info`): accepted,
  // so it can have a token; and known to the relay's node list from the relay's start.
  const info = await runProgram(BIN.agent, ['info', '--state-dir', join(dir, 'agent'), '--relay', 'http://127.0.0.1:9']);
  t.equal(info.code, 0, info.stderr);
  const { node_id: nodeId, certificate } = JSON.parse(info.stdout) as { node_id: string; certificate: string };
  t.equal((await api('POST', '/api/1/nodes', { id: nodeId, hostname: 'remote-run.test', certificate })).status, 201);
  const relay = await startRelayd(['--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'spool'), '--upstream', server.url, '--log-level', 'error']);
  t.teardown(() => relay.signal('SIGTERM'));
  const agent = spawn(...programCommand(BIN.agent, ['listen', '--relay', relay.url, '--state-dir', join(dir, 'agent'), '--log-level', 'warn']), { stdio: ['ignore', 'pipe', 'pipe'] });
  const agentLog: string[] = [];
  agent.stdout!.on('data', (d: Buffer) => agentLog.push(d.toString()));
  agent.stderr!.on('data', (d: Buffer) => agentLog.push(d.toString()));
  const agentExit = new Promise<number | null>((r) => agent.once('exit', (code) => r(code)));
  t.teardown(() => agent.kill('SIGKILL'));
  const status = async () => ((await (await fetch(`${relay.url}/rudder/relay-api/1/system/status`)).json()) as any).data;
  await until(async () => ((await status()).remote_run.connections === 1 ? true : undefined), 'the agent connection').catch((err: Error) => {
    throw new Error(`${err.message}: ${agentLog.join('')}`);
  });
  const token = (await readFile(join(dir, 'agent', 'identity.token'), 'utf8')).trim();
  t.equal(JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()).capstan_node_id, nodeId, 'the listener renewed its token by signed request');

  const started = Date.now();
  const res = await fetch(`${relay.url}/rudder/relay-api/1/remote-run/nodes/${nodeId}`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: 'asynchronous=true&keep_output=true&conditions=from_test',
  });
  t.equal(res.status, 200);
  const reader = res.body!.getReader();
  let text = '';
  let firstAt = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += Buffer.from(value).toString();
    if (!firstAt && text.includes('[started]')) firstAt = Date.now();
  }
  // The listener's run starts on the trigger, not at its timer (which is not running here).
  t.ok(firstAt > 0 && firstAt - started < 10_000, `the agent started ${firstAt - started} ms after the trigger`);
  t.match(text, new RegExp(`^${nodeId}: \\[started\\]\\n`));
  t.match(text, new RegExp(`${nodeId}: config [^:]+: \\d+ success, \\d+ repaired, 0 errors; sent \\d+, queued \\d+\\n`), 'the run summary came back');
  t.match(text, new RegExp(`${nodeId}: \\[done, exit 0\\]\\n$`));
  await waitFor(async () => {
    const r = await api('GET', `/api/1/nodes/${nodeId}/runs`);
    return r.json.total >= 1 ? true : undefined;
  }, 'the run log of the remote run to reach the server');

  agent.kill('SIGTERM');
  t.equal(await agentExit, 0, 'the listener stops cleanly on SIGTERM');
  await until(async () => ((await status()).remote_run.connections === 0 ? true : undefined), 'the connection to go');
  const t0 = Date.now();
  const offline = await (await fetch(`${relay.url}/rudder/relay-api/1/remote-run/nodes/${nodeId}`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'keep_output=true' })).text();
  t.equal(offline, `${nodeId}: [offline]\n`);
  t.ok(Date.now() - t0 < 15_000, `reported offline in ${Date.now() - t0} ms (remote_run.connect_wait)`);
});
