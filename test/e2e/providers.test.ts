/**
 * Providers with the real programs: the managers API (validation with codes, credentials only
 * by reference), a server-hosted aws-ec2 manager polled against a local EC2 endpoint, a static
 * manager, the three delete choices, an aws-ec2 manager hosted by a relay below another
 * relay (registered as a relay, fetched from and posted to the server with its relay token through
 * the top relay, outbound only), and the real agent enrolling on a discovered instance joining its
 * row.
 */
import { writeFileSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { adminClient, BIN, registerRelay, runProgram, startProgram, waitFor, programDir } from '../helpers/programs.js';
import { startFakeEc2, type Ec2Fixture } from '../providers/fake-ec2.js';

// Inherited by the programs started below: the managers name these variables, never the values.
process.env.CAPSTAN_E2E_AWS_KEY = 'AKIDE2EFAKE';
process.env.CAPSTAN_E2E_AWS_SECRET = 'e2e-secret-for-the-local-endpoint';
const CREDS = { source: 'env', vars: { access_key_id: 'CAPSTAN_E2E_AWS_KEY', secret_access_key: 'CAPSTAN_E2E_AWS_SECRET' } };

const FIXTURE: Ec2Fixture = {
  account: '444455556666',
  regions: {
    'eu-west-1': [
      [{ id: 'i-a', state: 'running', privateIp: '10.0.0.1', tags: { Name: 'a', env: 'prod' } }],
      [{ id: 'i-b', state: 'stopped', privateIp: '10.0.0.2', tags: { Name: 'b', env: 'prod' } }],
      [{ id: 'i-c', state: 'terminated', tags: { env: 'prod' } }],
    ],
    'eu-central-1': [[{ id: 'i-d', state: 'running', privateIp: '10.2.0.1', tags: { env: 'test' } }]],
  },
};

async function server(t: Test, dir: string) {
  const s = await startProgram(BIN.server, ['serve', '--listen', '127.0.0.1:0', '--data-dir', join(dir, 'server'), '--log-level', 'warn']);
  t.teardown(() => s.stop());
  const token = (await readFile(join(dir, 'server', 'admin.token'), 'utf8')).trim();
  return { url: s.url, api: adminClient(s.url, token) };
}

const nodesOf = async (api: ReturnType<typeof adminClient>, manager: string) =>
  (await api('GET', `/api/1/nodes?per_page=100&sort=id&filter=${encodeURIComponent(JSON.stringify({ key: 'managed_by', values: [manager] }))}`)).json;

t.test('the managers API validates with codes and never takes a credential in clear', async (t) => {
  const { api } = await server(t, programDir(t));
  const post = (body: unknown) => api('POST', '/api/1/managers', body);
  const aws = { id: 'aws', type: 'aws-ec2', config: { regions: ['eu-west-1'] }, credentials: CREDS };
  const cases: Array<[string, unknown, number, string]> = [
    ['unknown type', { ...aws, type: 'vsphere' }, 400, 'ERR_MANAGER_INVALID'],
    ['bad id', { ...aws, id: '../x' }, 400, 'ERR_MANAGER_INVALID'],
    ['unknown field', { ...aws, colour: 'red' }, 400, 'ERR_MANAGER_INVALID'],
    ['poll too fast', { ...aws, poll_interval: '10ms' }, 400, 'ERR_MANAGER_INVALID'],
    ['no regions', { ...aws, config: {} }, 400, 'ERR_MANAGER_INVALID'],
    ['filter typo', { ...aws, filters: { region: { include: ['eu-'] } } }, 400, 'ERR_MANAGER_FILTER'],
    ['tag filter without values', { ...aws, filters: { tags: { include: [{ key: 'env', values: [] }] } } }, 400, 'ERR_MANAGER_FILTER'],
    ['lone escape', { ...aws, filters: { tags: { include: [{ key: 'env', values: ['prod\\'] }] } } }, 400, 'ERR_MANAGER_FILTER'],
    ['include and exclude', { ...aws, filters: { regions: { include: ['eu-'], exclude: ['eu-'] } } }, 400, 'ERR_FILTER_CONFLICT'],
    ['secret in clear', { ...aws, credentials: { source: 'env', vars: { access_key_id: 'AKIAIOSFODNN7EXAMPLE', secret_access_key: 'S' } } }, 400, 'ERR_MANAGER_SECRET'],
    ['secret value', { ...aws, credentials: { source: 'env', vars: { access_key_id: 'K', secret_access_key: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY' } } }, 400, 'ERR_MANAGER_SECRET'],
    ['secret field', { ...aws, config: { regions: ['eu-west-1'], secret_access_key: 'x' } }, 400, 'ERR_MANAGER_SECRET'],
    ['endpoint with password', { ...aws, config: { regions: ['eu-west-1'], endpoint: 'http://u:p@127.0.0.1:1' } }, 400, 'ERR_MANAGER_SECRET'],
    ['static with both', { id: 's', type: 'static', config: { hosts: ['a'], file: '/x' } }, 400, 'ERR_MANAGER_INVALID'],
  ];
  for (const [what, body, status, code] of cases) {
    const r = await post(body);
    t.equal(r.status, status, `${what}: ${status}`);
    t.equal(r.json?.error?.code, code, `${what}: ${code}`);
  }
  const created = await post({ ...aws, filters: { regions: { include: ['eu-'] }, tags: { include: [{ key: 'env', values: ['prod*', 'stag?'] }] } } });
  t.equal(created.status, 201);
  t.match(created.json.data, { id: 'aws', name: 'aws', provider: 'server', poll_interval: '300s', credentials: CREDS, last_poll_at: null });
  t.notMatch(JSON.stringify(created.json), /e2e-secret/, 'only the reference is shown');
  t.equal((await post(aws)).json.error.code, 'ERR_CONFLICT');
  t.equal((await api('PUT', '/api/1/managers/aws', { type: 'static', config: { hosts: ['x'] } })).json.error.code, 'ERR_CONFLICT', 'a type never changes');
  const put = await api('PUT', '/api/1/managers/aws', { ...aws, name: 'Prod account', poll_interval: '2m' });
  t.match(put.json.data, { name: 'Prod account', poll_interval: '120s' });
  t.equal((await api('GET', '/api/1/managers/ghost')).json.error.code, 'ERR_MANAGER_UNKNOWN');
  t.same((await api('GET', '/api/1/managers')).json.data.map((m: { id: string }) => m.id), ['aws']);
  t.equal((await api('DELETE', '/api/1/managers/aws')).status, 200, 'no nodes yet: no choice needed');
  t.equal((await api('DELETE', '/api/1/managers/aws?nodes=maybe')).json.error.code, 'ERR_MANAGER_NODES_CHOICE');
});

t.test('a server-hosted aws-ec2 manager discovers the account; the test endpoint reports the cloud error', async (t) => {
  const dir = programDir(t);
  const file = join(dir, 'ec2.json');
  writeFileSync(file, JSON.stringify(FIXTURE));
  const ec2 = await startFakeEc2(file);
  t.teardown(() => ec2.close());
  const { api } = await server(t, dir);
  const body = { id: 'aws', type: 'aws-ec2', provider: 'server', credentials: CREDS, config: { regions: ['eu-west-1', 'eu-central-1'], endpoint: ec2.url },
    filters: { tags: { exclude: [{ key: 'env', values: ['te*'] }] } } };
  t.equal((await api('POST', '/api/1/managers', body)).status, 201);
  t.same((await api('POST', '/api/1/managers/aws/test')).json.data, { reachable: true });
  ec2.throttle([503]);
  const polled = await api('POST', '/api/1/managers/aws/poll');
  t.equal(polled.status, 200);
  t.equal(polled.json.data.last_poll_error, null);
  const list = await nodesOf(api, 'aws');
  t.same(list.data.map((n: { source_id: string; state: string; status: string }) => [n.source_id, n.state, n.status]).sort(),
    [['i-a', 'running', 'unknown'], ['i-b', 'stopped', 'unreachable'], ['i-c', 'terminated', 'unreachable']]);
  t.ok(list.data.every((n: { managers: string[]; has_agent: boolean }) => n.managers[0] === 'aws' && !n.has_agent));
  const noAgent = await api('GET', `/api/1/nodes?filter=${encodeURIComponent(JSON.stringify({ key: 'has_agent', values: ['false'] }))}`);
  t.equal(noAgent.json.total, 3, 'discovered but no agent: one filter away');

  // The same manager against a region the account does not have: unreachable with AWS's error.
  t.equal((await api('PUT', '/api/1/managers/aws', { ...body, config: { regions: ['sa-east-1'], endpoint: ec2.url } })).status, 200);
  const refused = (await api('POST', '/api/1/managers/aws/test')).json.data;
  t.equal(refused.reachable, false);
  t.match(refused.error, /AuthFailure/);
  const failed = await api('POST', '/api/1/managers/aws/poll');
  t.match(failed.json.data.last_poll_error, /AuthFailure/);
  t.equal((await nodesOf(api, 'aws')).total, 3, 'a failed poll changes no node');
});

t.test('deleting a manager needs one explicit choice for the nodes only it holds', async (t) => {
  const dir = programDir(t);
  const { api } = await server(t, dir);
  const hostsFile = join(dir, 'hosts.txt');
  await writeFile(hostsFile, '# lab\nkeep-1\nkeep-2\n');
  const mk = async (id: string, hosts: string[]) => {
    t.equal((await api('POST', '/api/1/managers', { id, type: 'static', config: { hosts, region: 'lab' } })).status, 201);
    t.equal((await api('POST', `/api/1/managers/${id}/poll`)).status, 200);
  };
  t.equal((await api('POST', '/api/1/managers', { id: 'keep', type: 'static', config: { file: hostsFile, region: 'lab' } })).status, 201);
  t.equal((await api('POST', '/api/1/managers/keep/poll')).status, 200);
  await mk('del', ['del-1', 'del-2']);
  await mk('state', ['st-1']);
  t.equal((await nodesOf(api, 'keep')).total, 2, 'hosts read from the file');

  const refused = await api('DELETE', '/api/1/managers/keep');
  t.equal(refused.status, 400);
  t.equal(refused.json.error.code, 'ERR_MANAGER_NODES_CHOICE');
  t.equal((await api('GET', '/api/1/managers/keep')).status, 200, 'nothing deleted without a choice');

  t.match((await api('DELETE', '/api/1/managers/keep?nodes=keep')).json.data, { nodes: 2, choice: 'keep' });
  const kept = await api('GET', `/api/1/nodes?per_page=100&filter=${encodeURIComponent(JSON.stringify({ key: 'region', values: ['lab'] }))}&sort=hostname`);
  t.same(kept.json.data.filter((n: { hostname: string }) => n.hostname.startsWith('keep')).map((n: { hostname: string; managers: string[]; state: string }) => [n.hostname, n.managers, n.state]),
    [['keep-1', [], 'running'], ['keep-2', [], 'running']], 'kept, no longer managed');

  t.match((await api('DELETE', '/api/1/managers/del?nodes=delete')).json.data, { nodes: 2, choice: 'delete' });
  t.equal((await api('GET', '/api/1/nodes?hostname=del-')).json.total, 0, 'deleted with their manager');

  t.match((await api('DELETE', '/api/1/managers/state?nodes=state:decommissioned')).json.data, { nodes: 1, choice: 'state' });
  const st = (await api('GET', '/api/1/nodes?hostname=st-1')).json.data[0];
  t.match(st, { state: 'decommissioned', status: 'unreachable', managers: [] });
  t.equal((await api('GET', '/api/1/managers')).json.data.length, 0);
});

t.test('a relay below another relay hosts an aws-ec2 manager: fetched and posted through the top relay', async (t) => {
  const dir = programDir(t);
  const file = join(dir, 'ec2.json');
  const fx = structuredClone(FIXTURE);
  writeFileSync(file, JSON.stringify(fx));
  const ec2 = await startFakeEc2(file);
  t.teardown(() => ec2.close());
  const { url, api } = await server(t, dir);
  await writeFile(join(dir, 'top.toml'), '[general]\nnode_id = "relay-top"\n');
  const top = await startProgram(BIN.relayd, ['--config', join(dir, 'top.toml'), '--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'top'), '--upstream', url, '--log-level', 'warn']);
  t.teardown(() => top.stop());
  await writeFile(join(dir, 'edge.toml'), '[general]\nnode_id = "relay-edge"\n[providers]\nenabled = true\nrefresh_interval = "200ms"\n');
  // The edge relay shows its relay token to the server (through the top relay, which passes it
  // on): an admin registers it first, with its certificate. The top relay only forwards.
  const edgeArgs = ['--config', join(dir, 'edge.toml'), '--spool-dir', join(dir, 'edge'), '--upstream', top.url];
  await registerRelay(api, edgeArgs);
  const edge = await startProgram(BIN.relayd, [...edgeArgs, '--listen', '127.0.0.1:0', '--log-level', 'warn']);
  t.teardown(() => edge.stop());

  const body = { id: 'aws-edge', type: 'aws-ec2', provider: 'relay-edge', poll_interval: '1s', credentials: CREDS, config: { regions: ['eu-west-1'], endpoint: ec2.url } };
  t.equal((await api('POST', '/api/1/managers', body)).status, 201);
  const found = await waitFor(async () => {
    const l = await nodesOf(api, 'aws-edge');
    return l.total === 3 ? l : undefined;
  }, 'the edge relay to discover the account and post it');
  t.same(found.data.map((n: { source_id: string; state: string }) => [n.source_id, n.state]).sort(), [['i-a', 'running'], ['i-b', 'stopped'], ['i-c', 'terminated']]);
  t.ok(ec2.requests.some((r) => r.accessKey === 'AKIDE2EFAKE'), 'the relay signed with the credentials its environment holds');
  t.match((await api('POST', '/api/1/managers/aws-edge/test')).json.data, { reachable: true, hosted_by: 'relay-edge' });

  // A state change is seen at a later poll.
  fx.regions['eu-west-1']![1]![0]!.state = 'running';
  writeFileSync(file, JSON.stringify(fx));
  await waitFor(async () => ((await nodesOf(api, 'aws-edge')).data.find((n: { source_id: string; state: string }) => n.source_id === 'i-b' && n.state === 'running') ? true : undefined),
    'i-b running after the next poll');

  // Changed upstream to a region the account lacks: the relay picks the change up, its poll fails
  // with AWS's error, and the connection test of a relay-hosted manager reports it.
  t.equal((await api('PUT', '/api/1/managers/aws-edge', { ...body, config: { regions: ['sa-east-1'], endpoint: ec2.url } })).status, 200);
  const failed = await waitFor(async () => {
    const r = (await api('POST', '/api/1/managers/aws-edge/test')).json.data;
    return r.reachable === false ? r : undefined;
  }, 'the relay to report the failed poll');
  t.match(failed, { hosted_by: 'relay-edge', error: /AuthFailure.*sa-east-1/ });
  t.equal((await nodesOf(api, 'aws-edge')).total, 3, 'a failed poll changes no node');

  // Only relay-edge, with its own relay token, speaks for relay-edge, and only for what it hosts.
  t.equal((await api('POST', '/api/1/managers', { id: 'lab', type: 'static', config: { hosts: ['h1'] } })).status, 201);
  const edgeToken = (await readFile(join(dir, 'edge', 'relay.token'), 'utf8')).trim();
  const discovery = (relay: string, manager: string, headers: Record<string, string>) =>
    fetch(`${url}/relay-api/1/providers/${relay}/managers/${manager}/discovery`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ instances: [] }) });
  t.equal((await discovery('relay-edge', 'aws-edge', {})).status, 401, 'no token');
  t.equal((await discovery('relay-top', 'aws-edge', { authorization: `Bearer ${edgeToken}` })).status, 403, 'for another relay');
  t.equal((await discovery('relay-edge', 'lab', { authorization: `Bearer ${edgeToken}` })).status, 404, 'a manager it does not host');
  t.equal((await fetch(`${url}/relay-api/1/providers/relay-top/managers`)).status, 401);
  t.same((await fetch(`${url}/relay-api/1/providers/relay-edge/managers`, { headers: { authorization: `Bearer ${edgeToken}` } }).then((r) => r.json()) as { data: Array<{ id: string }> }).data.map((m) => m.id), ['aws-edge']);
  t.equal((await nodesOf(api, 'aws-edge')).total, 3, 'the refused posts changed nothing');
});

t.test('the agent enrolling on a discovered instance joins its row once its claim is confirmed (cloud identity from cloud-init instance data)', async (t) => {
  const dir = programDir(t);
  const file = join(dir, 'ec2.json');
  writeFileSync(file, JSON.stringify(FIXTURE));
  const ec2 = await startFakeEc2(file);
  t.teardown(() => ec2.close());
  const { url, api } = await server(t, dir);
  t.equal((await api('POST', '/api/1/managers', { id: 'aws', type: 'aws-ec2', credentials: CREDS, config: { regions: ['eu-west-1'], endpoint: ec2.url } })).status, 201);
  t.equal((await api('POST', '/api/1/managers/aws/poll')).json.data.last_poll_error, null);
  const discovered = (await nodesOf(api, 'aws')).data.find((n: { source_id: string }) => n.source_id === 'i-a');
  t.match(discovered, { has_agent: false, accepted: 'accepted', state: 'running' });

  // cloud-init's copy of the instance metadata on that instance, as on EC2.
  const instanceData = join(dir, 'instance-data.json');
  await writeFile(instanceData, JSON.stringify({
    v1: { cloud_name: 'aws', instance_id: 'i-a', region: 'eu-west-1', availability_zone: 'eu-west-1a' },
    ds: { dynamic: { 'instance-identity': { document: { accountId: '444455556666', instanceId: 'i-a', region: 'eu-west-1' } } } },
  }));
  await writeFile(join(dir, 'agent.toml'), `[inventory]\ncloud_instance_data = ${JSON.stringify(instanceData)}\n`);
  const stateDir = join(dir, 'agent');
  const ran = await runProgram(BIN.agent, ['run', '-c', join(dir, 'agent.toml'), '--relay', url, '--state-dir', stateDir, '--log-level', 'warn']);
  // Exit 5: the row it joins is accepted, but the agent's own acceptance goes as for any newcomer.
  t.equal(ran.code, 5, `agent run waits for acceptance (${ran.code === 5 ? 'ok' : ran.stderr})`);
  const id = (await readFile(join(stateDir, 'node-id'), 'utf8')).trim();
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${id}`)).status === 200 ? true : undefined), 'the agent\'s inventory to be ingested');
  // Naming the instance proves nothing: a claim, shown, until an admin confirms it.
  t.match((await api('GET', `/api/1/nodes/${id}`)).json.data, { source_id: null }, 'not joined on the inventory\'s word');
  t.match(await api('GET', `/api/1/nodes/${id}/claim`), { status: 200, json: { data: { cloud: { source_id: 'i-a' }, discovered: { id: discovered.id } } } });
  t.equal((await api('POST', `/api/1/nodes/${id}/claim/confirm`)).status, 200, 'the admin confirms the claim');
  const joined = (await api('GET', `/api/1/nodes/${id}`)).json.data;
  t.match(joined, { id, source_id: 'i-a', region: 'eu-west-1', account_id: '444455556666', accepted: 'pending' },
    'the agent\'s node took the discovered row over; acceptance goes as for any newcomer');
  t.equal((await api('GET', `/api/1/nodes/${discovered.id}`)).status, 404, 'no second node: the discovered id is gone');
  const rows = await nodesOf(api, 'aws');
  t.equal(rows.total, 3);
  t.match(rows.data.find((n: { source_id: string }) => n.source_id === 'i-a'), { id, managers: ['aws'], has_agent: true });
  const agentNoInstance = await api('GET', `/api/1/nodes?filter=${encodeURIComponent(JSON.stringify({ key: 'has_agent', values: ['true'] }))}`);
  t.same(agentNoInstance.json.data.map((n: { id: string }) => n.id), [id]);

  // The next poll finds the same row by its cloud identity.
  t.equal((await api('POST', '/api/1/managers/aws/poll')).status, 200);
  t.equal((await nodesOf(api, 'aws')).total, 3);
  t.equal((await api('GET', `/api/1/nodes/${id}`)).json.data.source_id, 'i-a');

  // The instance is terminated: "agent but instance terminated" is one filter away.
  const fx = structuredClone(FIXTURE);
  fx.regions['eu-west-1']![0]![0]!.state = 'terminated';
  writeFileSync(file, JSON.stringify(fx));
  t.equal((await api('POST', '/api/1/managers/aws/poll')).status, 200);
  const f = (key: string, value: string) => `filter=${encodeURIComponent(JSON.stringify({ key, values: [value] }))}`;
  const gone = (await api('GET', `/api/1/nodes?${f('has_agent', 'true')}&${f('state', 'terminated')}`)).json;
  t.same(gone.data.map((n: { id: string; state: string; status: string }) => [n.id, n.state, n.status]), [[id, 'terminated', 'unreachable']]);
});
