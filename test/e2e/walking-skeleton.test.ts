/**
 * The walking skeleton, end to end with the real programs: an agent's signed, zstd-compressed run
 * log travels agent → relayd → server → registry; a tampered copy and one from an unaccepted node
 * land in failed/, never in the registry.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { decompress, parseRunInfo, runLogFileName } from '@capstan/shared';
import { all } from '../helpers/concurrently.js';
import { adminClient, BIN, runProgram, startProgram, waitFor, programDir, serverAndRelay, startServer } from '../helpers/programs.js';

// The first test is a chain of program starts, each waiting on the one before; the others, on
// servers and directories of their own, run beside it.
t.jobs = 2;

t.test('a run log travels agent → relay → server → registry', async (t) => {
  const dir = programDir(t);
  const { server, relay, api } = await serverAndRelay(t, dir);
  const agentArgs = ['run', '--relay', relay.url, '--state-dir', join(dir, 'agent'), '--log-level', 'warn'];

  // First run: inventory registers the node as pending; its run log is refused (not accepted yet).
  const first = await runProgram(BIN.agent, agentArgs);
  // Exit 5: the node waits for acceptance (it said so on stdout).
  t.equal(first.code, 5, `agent run exits 5 (${first.stderr})`);
  t.match(first.stdout, /is waiting for acceptance/);
  t.match(first.stdout, /sent 2, queued 0, inventory sent/);
  const nodeId = (await readFile(join(dir, 'agent', 'node-id'), 'utf8')).trim();

  const pending = await waitFor(async () => {
    const r = await api('GET', '/api/1/nodes/pending');
    return r.json.total === 1 ? r.json : undefined;
  }, 'the node to be pending');
  t.equal(pending.data[0].id, nodeId);
  t.equal(pending.data[0].accepted, 'pending');

  const failedDir = join(dir, 'server', 'spool', 'failed', 'reports');
  const failed = await waitFor(async () => {
    const names = await readdir(failedDir);
    return names.some((n) => n.endsWith('.reason')) ? names : undefined;
  }, 'the unaccepted run log to land in failed/');
  const reason = await readFile(join(failedDir, failed.find((n) => n.endsWith('.reason'))!), 'utf8');
  // The relay forwards both files at once, so the run log may reach the server before the
  // inventory is ingested: unknown or pending, it is refused either way.
  t.match(reason, /ERR_NODE_PENDING|ERR_NODE_UNKNOWN/, 'failed/ says why');
  t.equal((await api('GET', `/api/1/nodes/${nodeId}/runs`)).json.total, 0, 'nothing stored for a pending node');

  // Unauthenticated admin calls are refused.
  const anon = await fetch(`${server.url}/api/1/nodes`);
  t.equal(anon.status, 401);
  t.equal(((await anon.json()) as { error: { code: string } }).error.code, 'ERR_UNAUTHORIZED');

  // Accept it with the admin verb (works on the store directly, beside the running server).
  const accept = await runProgram(BIN.server, ['nodes', 'accept', nodeId, '--data-dir', join(dir, 'server')]);
  t.equal(accept.code, 0, accept.stderr);
  t.equal((await api('GET', `/api/1/nodes/${nodeId}`)).json.data.accepted, 'accepted');

  const second = await runProgram(BIN.agent, agentArgs);
  t.equal(second.code, 0, second.stderr);
  const runs = await waitFor(async () => {
    const r = await api('GET', `/api/1/nodes/${nodeId}/runs?reports=true`);
    return r.json.total === 1 ? r.json.data : undefined;
  }, 'the run to be stored');
  t.equal(runs[0].node_id, nodeId);
  t.equal(runs[0].complete, true);
  t.equal(runs[0].config_id, 'none');
  t.same(runs[0].counts, { control: 2, result_success: 3 }, 'state directory, node key and policy checks pass');
  t.equal(runs[0].report_count, 5);
  t.equal(runs[0].reports.length, 5);
  t.equal(runs[0].reports[1].component, 'State directory');

  const node = (await api('GET', `/api/1/nodes/${nodeId}`)).json.data;
  t.equal(node.status, 'reachable');
  t.ok(node.last_run_at, 'last_run_at is set');
  t.match(node.certificate, /BEGIN CERTIFICATE/);

  // A tampered copy of a real, signed run log: one byte changed inside the signed text.
  const stored = await api('GET', `/api/1/nodes/${nodeId}/runs`);
  t.equal(stored.json.total, 1);
  const signedRun = await waitFor(async () => {
    // Make a fresh signed run log with the agent, but keep it from leaving by pointing it nowhere.
    const r = await runProgram(BIN.agent, ['run', '--relay', 'http://127.0.0.1:9', '--state-dir', join(dir, 'agent'), '--log-level', 'error']);
    const names = await readdir(join(dir, 'agent', 'outbox', 'reports'));
    return r.code === 0 && names.length > 0 ? names[0] : undefined;
  }, 'a queued run log');
  const original = await decompress(await readFile(join(dir, 'agent', 'outbox', 'reports', signedRun)), 'zstd', { maxBytes: 1 << 20 });
  const tampered = Buffer.from(original.toString('latin1').replace('result_success', 'result_sucCess'), 'latin1');
  t.not(tampered.toString('latin1'), original.toString('latin1'), 'one byte changed');
  const tamperedName = runLogFileName(nodeId, new Date(Date.UTC(2030, 0, 1)), 'none');
  const put = await fetch(`${relay.url}/reports/${encodeURIComponent(tamperedName)}`, { method: 'PUT', body: tampered });
  t.equal(put.status, 201, 'the relay spools it (relays never verify)');
  const tamperedReason = await waitFor(async () => {
    const text = await readFile(join(failedDir, `${tamperedName}.reason`), 'utf8').catch(() => undefined);
    return text;
  }, 'the tampered run log to land in failed/');
  t.match(tamperedReason, /ERR_SMIME_DIGEST|ERR_SMIME_SIGNATURE/);
  t.equal(parseRunInfo(tamperedName).nodeId, nodeId);

  // The queued run log is back-filled by the next run once the relay is reachable again.
  const third = await runProgram(BIN.agent, agentArgs);
  t.equal(third.code, 0, third.stderr);
  t.match(third.stdout, /sent 2, queued 0/, 'the queued run log and the new one are both sent');
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${nodeId}/runs`)).json.total === 3 ? true : undefined), 'three stored runs');
});

t.test('bad uploads get coded errors and leave the spool clean', async (t) => {
  const dir = programDir(t, { 'relayd.toml': '[spool]\nmax_file_size = "1KiB"\n' });
  const relay = await startProgram(BIN.relayd, ['--config', join(dir, 'relayd.toml'), '--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'), '--upstream', 'http://127.0.0.1:9', '--log-level', 'error']);
  t.teardown(() => relay.stop());
  const bad = await fetch(`${relay.url}/reports/bob.log`, { method: 'PUT', body: 'x' });
  t.equal(bad.status, 400);
  t.equal(((await bad.json()) as { error: { code: string } }).error.code, 'ERR_RUNINFO_NAME');
  const escape = await fetch(`${relay.url}/reports/..%2F..%2Fetc%2Fpasswd`, { method: 'PUT', body: 'x' });
  t.equal(escape.status, 400);

  // No Content-Length (chunked body) → 411, as RUDDER answers.
  const chunked = await fetch(`${relay.url}/reports/${encodeURIComponent('2018-08-24T15:55:01+00:00@root.log')}`, {
    method: 'PUT',
    body: new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode('abc')); c.close(); } }),
    duplex: 'half',
  } as RequestInit);
  t.equal(chunked.status, 411);
  t.equal(((await chunked.json()) as { error: { code: string } }).error.code, 'ERR_LENGTH_REQUIRED');

  const tooBig = await fetch(`${relay.url}/reports/${encodeURIComponent('2018-08-24T15:55:01+00:00@root.log')}`, { method: 'PUT', body: Buffer.alloc(1025) });
  t.equal(tooBig.status, 413);
  t.equal(((await tooBig.json()) as { error: { code: string } }).error.code, 'ERR_BODY_TOO_LARGE');
  const empty = await fetch(`${relay.url}/reports/${encodeURIComponent('2018-08-24T15:55:01+00:00@root.log')}`, { method: 'PUT', body: '' });
  t.equal(empty.status, 400);

  const incoming = await readdir(join(dir, 'relay', 'incoming', 'reports'));
  const tmp = await readdir(join(dir, 'relay', 'tmp'));
  t.same(incoming, [], 'nothing half-written reached incoming/');
  t.same(tmp, [], 'no partial file left behind');
});

t.test('configuration errors exit 2 and --test checks a file', async (t) => {
  const dir = programDir(t, { 'bad.toml': '[upstream]\ntimeout = "soon"\n', 'good.toml': '[upstream]\nurl = "http://127.0.0.1:3031"\n' });
  // Four program starts, none depending on another: at once. (Each program's --version is
  // checked in usage-exit-codes.test.ts.)
  const [bad, good, server, agent] = await all([
    () => runProgram(BIN.relayd, ['--config', join(dir, 'bad.toml'), '--test']),
    () => runProgram(BIN.relayd, ['--config', join(dir, 'good.toml'), '--test']),
    () => runProgram(BIN.server, ['serve', '--listen', 'nowhere', '--data-dir', dir]),
    () => runProgram(BIN.agent, ['run', '--relay', 'ftp://x', '--state-dir', join(dir, 'agent')]),
  ]);
  t.equal(bad!.code, 2);
  t.match(bad!.stderr, /upstream.timeout must be a duration/);
  t.equal(good!.code, 0);
  t.equal(server!.code, 2);
  t.equal(agent!.code, 2);
});

t.test('an agent with the shared enrollment secret is accepted without an admin', async (t) => {
  const secret = 'correct horse battery staple';
  const dir = programDir(t, {
    'server.toml': `[enrollment]\nsecret = "${secret}"\n`,
    'agent.toml': `[agent]\nenrollment_secret = "${secret}"\n`,
    'wrong.toml': `[agent]\nenrollment_secret = "not the secret at all"\n`,
  });
  const { server, api } = await startServer(t, join(dir, 'server'), { config: join(dir, 'server.toml') });
  const run = (cfg: string, state: string) => runProgram(BIN.agent, ['run', '--config', join(dir, cfg), '--relay', server.url, '--state-dir', join(dir, state), '--log-level', 'error']);
  // Two agents, each with a state directory of its own: at once.
  const [right, wrong] = await all([() => run('agent.toml', 'a'), () => run('wrong.toml', 'b')]);
  t.equal(right!.code, 0);
  t.equal(wrong!.code, 5, 'a wrong secret: waiting for acceptance');
  const a = (await readFile(join(dir, 'a', 'node-id'), 'utf8')).trim();
  const b = (await readFile(join(dir, 'b', 'node-id'), 'utf8')).trim();
  const nodeA = await waitFor(async () => {
    const r = await api('GET', `/api/1/nodes/${a}`);
    return r.status === 200 ? r.json.data : undefined;
  }, 'node a to register');
  t.equal(nodeA.accepted, 'accepted', 'the right secret accepts');
  const nodeB = await waitFor(async () => {
    const r = await api('GET', `/api/1/nodes/${b}`);
    return r.status === 200 ? r.json.data : undefined;
  }, 'node b to register');
  t.equal(nodeB.accepted, 'pending', 'a wrong secret leaves the node pending');
  const inv = await api('GET', `/api/1/nodes/${a}/inventory`);
  t.notOk(JSON.stringify(inv.json).includes(secret), 'the secret is not stored with the inventory');
  t.equal((await run('agent.toml', 'a')).code, 0);
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${a}/runs`)).json.total >= 1 ? true : undefined), 'a run of the auto-accepted node');
});
