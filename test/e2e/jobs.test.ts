/**
 * Jobs end to end with the real programs: a server, a relay registered as a relay and linked to
 * it for remote runs with its relay token (`[remote_run] link_upstream`), three agents enrolled and accepted the normal way (so they hold
 * identity tokens) and holding `capstan-agent listen` connections to the relay. A job on static
 * nodes reaches exactly those agents and records their output; an inventory job makes the agent
 * send its inventory; a job with a manager selector reaches exactly the nodes the manager holds
 * — an aws-ec2 manager discovering a local EC2 endpoint, whose instances b and c enrolled on (their
 * agents read the cloud identity from cloud-init's instance data and join the discovered rows),
 * and one instance without agent (failed no_agent); a node whose agent went away ends failed
 * (offline) with its reason instead of hanging.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { adminClient, BIN, registerRelay, runProgram, startProgram, waitFor, programDir, programCommand, startServer } from '../helpers/programs.js';
import { startFakeEc2 } from '../providers/fake-ec2.js';

// Inherited by the server: the manager names these variables, never the values.
process.env.CAPSTAN_E2E_AWS_KEY = 'AKIDE2EFAKE';
process.env.CAPSTAN_E2E_AWS_SECRET = 'e2e-secret-for-the-local-endpoint';
const ACCOUNT = '444455556666';

interface Agent {
  id: string;
  proc: ChildProcess;
  log: string[];
  /** How many remote runs this agent started (its `remote run` log lines). */
  runs(): number;
}

t.test('jobs reach exactly their agents through the relay, and record outcome and output', async (t) => {
  const dir = programDir(t);
  const serverDir = join(dir, 'server');
  await writeFile(join(dir, 'server.toml'), '[jobs]\nsweep_interval = "200ms"\n');
  // The account the manager discovers: b and c will get agents, d never does.
  await writeFile(join(dir, 'ec2.json'), JSON.stringify({ account: ACCOUNT, regions: { 'eu-west-1': [
    [{ id: 'i-b', state: 'running', privateIp: '10.0.0.2', tags: { role: 'web' } }],
    [{ id: 'i-c', state: 'running', privateIp: '10.0.0.3', tags: { role: 'web' } }],
    [{ id: 'i-d', state: 'running', privateIp: '10.0.0.4', tags: { role: 'web' } }],
  ] } }));
  const ec2 = await startFakeEc2(join(dir, 'ec2.json'));
  t.teardown(() => ec2.close());
  const { server, api } = await startServer(t, serverDir, { config: join(dir, 'server.toml') });
  await writeFile(join(dir, 'relayd.toml'), '[remote_run]\nlink_upstream = true\nconnect_wait = "1s"\n\n[nodes_sync]\ninterval = "1s"\n');
  // The relay links with its relay token: an admin registers it first, with its certificate.
  const relayArgs = ['-c', join(dir, 'relayd.toml'), '--spool-dir', join(dir, 'relay'), '--upstream', server.url, '--node-id', 'relay-1'];
  await registerRelay(api, relayArgs);
  const relay = await startProgram(BIN.relayd, [...relayArgs, '--listen', '127.0.0.1:0', '--log-level', 'warn']);
  t.teardown(() => relay.stop());
  await waitFor(async () => {
    const s = await api('GET', '/api/1/system/status');
    return s.json?.data?.remote_run?.relays?.includes('relay-1') ? true : undefined;
  }, 'the relay to link to the server');

  t.equal((await api('POST', '/api/1/managers', {
    id: 'm1', type: 'aws-ec2', credentials: { source: 'env', vars: { access_key_id: 'CAPSTAN_E2E_AWS_KEY', secret_access_key: 'CAPSTAN_E2E_AWS_SECRET' } },
    config: { regions: ['eu-west-1'], endpoint: ec2.url },
  })).status, 201);
  t.same((await api('POST', '/api/1/managers/m1/poll')).json.data.last_poll_error, null);

  // Enrolment as an admin does it: first run → pending node; accept; the next run gets a token.
  // b and c run on discovered instances: cloud-init's instance data says which.
  const agents: Agent[] = [];
  for (const [name, instance] of [['a', null], ['b', 'i-b'], ['c', 'i-c']] as const) {
    const stateDir = join(dir, `agent-${name}`);
    const config = join(dir, `agent-${name}.toml`);
    const instanceData = join(dir, `instance-data-${name}.json`);
    await writeFile(instanceData, instance === null ? '{}' : JSON.stringify({
      v1: { cloud_name: 'aws', instance_id: instance, region: 'eu-west-1' },
      ds: { dynamic: { 'instance-identity': { document: { accountId: ACCOUNT } } } },
    }));
    await writeFile(config, `[inventory]\ncloud_instance_data = ${JSON.stringify(instanceData)}\n`);
    const first = await runProgram(BIN.agent, ['run', '-c', config, '--relay', relay.url, '--state-dir', stateDir, '--log-level', 'warn']);
    t.equal(first.code, 5, `agent ${name}: first run waits for acceptance (${first.code === 5 ? 'ok' : first.stderr})`);
    const id = (await readFile(join(stateDir, 'node-id'), 'utf8')).trim();
    await waitFor(async () => ((await api('GET', `/api/1/nodes/${id}`)).status === 200 ? true : undefined), `node ${name} registered`);
    // Its claim on the discovered instance, confirmed (docs/providers.md, Claims).
    if (instance !== null) t.equal((await api('POST', `/api/1/nodes/${id}/claim/confirm`)).status, 200, `node ${name} joins instance ${instance}`);
    t.equal((await api('POST', `/api/1/nodes/${id}/accept`)).status, 200);
    const second = await runProgram(BIN.agent, ['run', '-c', config, '--relay', relay.url, '--state-dir', stateDir, '--log-level', 'warn']);
    t.equal(second.code, 0, `agent ${name}: run once accepted (${second.code === 0 ? 'ok' : second.stderr})`);
    t.ok((await readFile(join(stateDir, 'identity.token'), 'utf8')).trim().length > 0, `agent ${name} holds a token`);
    const proc = spawn(...programCommand(BIN.agent, ['listen', '-c', config, '--relay', relay.url, '--state-dir', stateDir, '--log-level', 'info']), { stdio: ['ignore', 'ignore', 'pipe'] });
    t.teardown(() => proc.kill('SIGKILL'));
    const log: string[] = [];
    proc.stderr!.on('data', (d: Buffer) => log.push(d.toString()));
    agents.push({ id, proc, log, runs: () => log.join('').split('\n').filter((l) => l.includes('"msg":"remote run"')).length });
  }
  const [a, b, c] = agents as [Agent, Agent, Agent];
  const relayStatus = async () => ((await (await fetch(`${relay.url}/rudder/relay-api/1/system/status`)).json()) as any).data;
  await waitFor(async () => ((await relayStatus()).remote_run.connections === 3 ? true : undefined), 'the three agents to connect', 60_000);

  const finished = (id: string) => waitFor(async () => {
    const r = await api('GET', `/api/1/jobs/${id}`);
    return r.json.data.state === 'finished' ? r.json.data : undefined;
  }, `job ${id} to finish`, 60_000);
  const byNode = (job: { tasks: Array<{ node_id: string }> }) => Object.fromEntries(job.tasks.map((x) => [x.node_id, x])) as Record<string, any>;

  // Static nodes: exactly a and b run, c does not.
  const created = await api('POST', '/api/1/jobs', { name: 'static', type: 'run', nodes: [a.id, b.id], keep_output: true, conditions: ['from_job'] });
  t.equal(created.status, 201);
  const job1 = await finished(created.json.data.id);
  t.same(Object.keys(byNode(job1)).sort(), [a.id, b.id].sort(), 'one task per static node');
  for (const ag of [a, b]) {
    const task = byNode(job1)[ag.id];
    t.match(task, { state: 'done', reason: 'completed', exit_code: 0, relay: 'relay-1' });
    t.match(task.output, /config [^:]+: \d+ success, \d+ repaired, 0 errors; sent \d+, queued \d+/, 'the run summary came back as output');
    t.equal(ag.runs(), 1, 'the agent ran once');
  }
  t.equal(c.runs(), 0, 'the agent not targeted did not run');
  t.match(job1.progress, { total: 2, done: 2 });
  // The output as the console's "run now" reads it: from a line on, the stored output once final.
  const stored = byNode(job1)[a.id].output as string;
  const out = await api('GET', `/api/1/jobs/${job1.id}/tasks/${a.id}/output`);
  t.match(out.json.data, { state: 'done', final: true, lines: stored.split('\n'), next: stored.split('\n').length });
  t.same((await api('GET', `/api/1/jobs/${job1.id}/tasks/${a.id}/output?after=1`)).json.data.lines, stored.split('\n').slice(1), 'from line 1 on');
  t.match(await api('GET', `/api/1/jobs/${job1.id}/tasks/${a.id}/output?after=-1`), { status: 400, json: { error: { code: 'ERR_BAD_REQUEST' } } });

  // Inventory: the agent sends its inventory although it is not due.
  const before = (await api('GET', `/api/1/nodes/${a.id}`)).json.data.last_inventory_at as string;
  const inv = await finished((await api('POST', '/api/1/jobs', { name: 'inventory', type: 'inventory', nodes: [a.id], keep_output: true })).json.data.id);
  t.match(byNode(inv)[a.id], { state: 'done', output: /inventory sent/ });
  await waitFor(async () => {
    const now = (await api('GET', `/api/1/nodes/${a.id}`)).json.data.last_inventory_at as string;
    return Date.parse(now) > Date.parse(before) ? true : undefined;
  }, 'the forced inventory to reach the server', 30_000);

  // A manager selector: the manager holds b and c (their agents joined the discovered rows) and d
  // (discovered, no agent).
  const held = (await api('GET', `/api/1/nodes?per_page=10&filter=${encodeURIComponent(JSON.stringify({ key: 'managed_by', values: ['m1'] }))}`)).json.data as Array<{ id: string; source_id: string; has_agent: boolean }>;
  t.same(held.map((n) => [n.source_id, n.has_agent]).sort(), [['i-b', true], ['i-c', true], ['i-d', false]], 'b and c joined their discovered rows');
  t.same(held.filter((n) => n.has_agent).map((n) => n.id).sort(), [b.id, c.id].sort());
  const d = held.find((n) => n.source_id === 'i-d')!.id;
  const runsBefore = agents.map((x) => x.runs());
  const sel = await finished((await api('POST', '/api/1/jobs', { name: 'selector', type: 'run', node_selectors: [{ manager_id: 'm1' }], keep_output: true })).json.data.id);
  t.same(Object.keys(byNode(sel)).sort(), [b.id, c.id, d].sort(), 'exactly the nodes the manager holds');
  for (const ag of [b, c]) t.match(byNode(sel)[ag.id], { state: 'done', output: /config [^:]+: \d+ success/ });
  t.match(byNode(sel)[d], { state: 'failed', reason: 'no_agent' }, 'the instance without agent is not run, and says why');
  t.same(agents.map((x) => x.runs() - runsBefore[agents.indexOf(x)]!), [0, 1, 1], 'b and c ran, a did not');
  const narrowed = await api('POST', '/api/1/jobs', { name: 'narrowed', type: 'run', node_selectors: [{ manager_id: 'm1', filters: [{ key: 'has_agent', values: ['true'] }, { key: 'id', values: [b.id], exclude: true }] }] });
  t.same((await finished(narrowed.json.data.id)).tasks.map((x: { node_id: string }) => x.node_id), [c.id], 'a selector filter narrows the manager\'s nodes');
  t.match(await api('POST', '/api/1/jobs', { name: 'nobody', type: 'run', node_selectors: [{ manager_id: 'no-such-manager' }] }), { status: 400, json: { error: { code: 'ERR_JOB_NO_TARGETS' } } });

  // An agent that went away: its task ends failed (offline) with its reason, within the relay's wait.
  const exited = new Promise((r) => c.proc.once('exit', r));
  c.proc.kill('SIGTERM');
  await exited;
  await waitFor(async () => ((await relayStatus()).remote_run.connections === 2 ? true : undefined), 'c\'s connection to go');
  const t0 = Date.now();
  const off = await finished((await api('POST', '/api/1/jobs', { name: 'offline', type: 'run', nodes: [c.id] })).json.data.id);
  t.match(byNode(off)[c.id], { state: 'failed', reason: 'offline', message: /no relay reached/ });
  t.ok(Date.now() - t0 < 15_000, `settled in ${Date.now() - t0} ms`);
  const history = (await api('GET', `/api/1/jobs/${off.id}/tasks/${c.id}`)).json.data.transitions as Array<{ to: string; reason: string }>;
  t.same(history.map((h) => `${h.to}:${h.reason}`), ['pending:created', 'scheduled:dispatched', 'failed:offline']);
  t.match((await api('GET', '/api/1/jobs')).json, { total: 5 }, 'five jobs recorded (the one without targets was refused)');
});
