/**
 * The aws-ec2 driver against a local EC2 endpoint speaking the Query XML protocol: two regions,
 * paginated, throttled, with filters and exclusions; then the same account polled into a
 * registry: states, a change seen at the next poll, a disappeared instance.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { checkManager, discover } from '@capstan/toolkit/providers/index';
import { applyPoll, recordToSpec, specToStored } from '@capstan/server/providers/managers';
import { sqliteBackend } from './backends.js';
import { startFakeEc2, type Ec2Fixture } from './fake-ec2.js';
import { programDir } from '../helpers/programs.js';
import { registryOn, TEST_ADMIN } from '../helpers/node-changes.js';
import { systemActor } from '@capstan/server/audit/actor';

const DISCOVERY = systemActor('discovery');

process.env.CAPSTAN_TEST_AWS_KEY = 'AKIDTESTFAKE';
process.env.CAPSTAN_TEST_AWS_SECRET = 'fake-secret-for-the-local-endpoint';

function fixture(): Ec2Fixture {
  return {
    account: '111122223333',
    regions: {
      'eu-west-1': [
        [{ id: 'i-web1', state: 'running', privateDns: 'ip-10-0-0-1.eu-west-1.compute.internal', privateIp: '10.0.0.1', tags: { Name: 'web1', env: 'prod', team: 'web' } }],
        [{ id: 'i-web2', state: 'stopped', privateIp: '10.0.0.2', tags: { Name: 'web2', env: 'prod' } },
          { id: 'i-old', state: 'terminated', tags: { env: 'prod' } }],
        [{ id: 'i-dev1', state: 'running', privateIp: '10.0.0.3', tags: { env: 'dev' } }],
        [{ id: 'i-scratch', state: 'running', privateIp: '10.0.0.4', tags: { env: 'prod-scratch', scratch: 'yes' } }],
      ],
      'us-east-1': [
        [{ id: 'i-api1', state: 'pending', privateIp: '10.1.0.1', tags: { env: 'production' } }],
        [{ id: 'i-api2', state: 'shutting-down', privateIp: '10.1.0.2', tags: { env: 'prod' } }],
        [{ id: 'i-api3', state: 'stopping', privateIp: '10.1.0.3', tags: { env: 'prod' } }],
      ],
      'ap-south-1': [[{ id: 'i-far', state: 'running', tags: { env: 'prod' } }]],
    },
  };
}

const manager = (endpoint: string, over: Record<string, unknown> = {}) => checkManager({
  id: 'aws-prod', type: 'aws-ec2', provider: 'server', poll_interval: '1m',
  config: { regions: ['eu-west-1', 'us-east-1', 'ap-south-1'], endpoint },
  credentials: { source: 'env', vars: { access_key_id: 'CAPSTAN_TEST_AWS_KEY', secret_access_key: 'CAPSTAN_TEST_AWS_SECRET' } },
  filters: {
    regions: { include: ['eu-', 'us-'] },
    tags: { include: [{ key: 'env', values: ['prod*'] }], exclude: [{ key: 'scratch', values: ['y?s'] }] },
  },
  ...over,
});

t.test('discovery lists two regions page by page through throttling, filters and exclusions applied', async (t) => {
  const dir = programDir(t);
  const file = join(dir, 'ec2.json');
  writeFileSync(file, JSON.stringify(fixture()));
  const ec2 = await startFakeEc2(file);
  t.teardown(() => ec2.close());
  ec2.throttle([503, 429]);
  const found = await discover(manager(ec2.url));
  const byId = Object.fromEntries(found.map((i) => [i.source_id, i]));
  t.same(Object.keys(byId).sort(), ['i-api1', 'i-api2', 'i-api3', 'i-old', 'i-web1', 'i-web2'],
    'dev (tag), scratch (excluded tag) and ap-south-1 (region not included) are left out');
  t.match(byId['i-web1'], {
    region: 'eu-west-1', account_id: '111122223333', hostname: 'ip-10-0-0-1.eu-west-1.compute.internal', name: 'web1',
    address: '10.0.0.1', state: 'running', tags: { env: 'prod', team: 'web' },
  });
  t.match(byId['i-web2'], { state: 'stopped', hostname: 'web2' });
  t.match(byId['i-old'], { state: 'terminated', hostname: 'i-old' });
  t.match(byId['i-api1'], { state: 'running', region: 'us-east-1' }, 'pending counts as running');
  t.match(byId['i-api2'], { state: 'terminated' });
  t.match(byId['i-api3'], { state: 'stopped' });
  const throttled = ec2.requests.filter((r) => r.status !== 200).map((r) => r.status);
  t.same(throttled, [503, 429], 'both throttling answers were retried');
  t.same(ec2.requests.filter((r) => r.status === 200).map((r) => `${r.region}:${r.token ?? '-'}`),
    ['eu-west-1:-', 'eu-west-1:page-2', 'us-east-1:-', 'us-east-1:page-2'], 'NextToken followed; the excluded region never called');
  t.ok(ec2.requests.every((r) => r.accessKey === 'AKIDTESTFAKE'), 'signed with the credentials the env references name');
});

t.test('an unreachable or refusing endpoint is reported with the cloud error', async (t) => {
  const dir = programDir(t);
  const file = join(dir, 'ec2.json');
  writeFileSync(file, JSON.stringify({ account: '1', regions: {} }));
  const ec2 = await startFakeEc2(file);
  t.teardown(() => ec2.close());
  const { driverFor } = await import('@capstan/toolkit/providers/index');
  const refused = await (await driverFor(manager(ec2.url))).test();
  t.equal(refused.reachable, false);
  t.match(refused.error, /AuthFailure.*region eu-west-1 is not enabled/);
  t.notMatch(refused.error, /fake-secret/, 'no credential in the error');
  await t.rejects(discover(manager(ec2.url)), { code: 'ERR_PROVIDER', message: /AuthFailure/ });
  const down = await (await driverFor(manager('http://127.0.0.1:1'))).test();
  t.equal(down.reachable, false);
  t.match(down.error, /ECONNREFUSED|connect/i);
  // Used to escape test() as a 502 instead of answering unreachable with the reason.
  const unset = manager(ec2.url, { credentials: { source: 'env', vars: { access_key_id: 'CAPSTAN_TEST_AWS_UNSET', secret_access_key: 'CAPSTAN_TEST_AWS_SECRET' } } });
  t.match(await (await driverFor(unset)).test(), { reachable: false, error: /access_key_id: environment variable CAPSTAN_TEST_AWS_UNSET is not set/ });
  await t.rejects(discover(unset), { code: 'ERR_PROVIDER', message: /CAPSTAN_TEST_AWS_UNSET is not set/ });
});

t.test('polls into the registry: states by instance, a change at the next poll, a disappeared instance missing', async (t) => {
  const dir = programDir(t);
  const file = join(dir, 'ec2.json');
  const fx = fixture();
  writeFileSync(file, JSON.stringify(fx));
  const ec2 = await startFakeEc2(file);
  t.teardown(() => ec2.close());
  const store = await sqliteBackend(t);
  const spec = manager(ec2.url);
  const rec = await store.managers.createManager({ id: spec.id, name: spec.name, type: spec.type, provider: spec.provider, spec: specToStored(spec) }, '2026-01-01T00:00:00Z');
  const poll = async (at: string) => applyPoll(store, registryOn(store), rec.id, { instances: await discover(recordToSpec(rec)) }, new Date(at), DISCOVERY);

  t.same(await poll('2026-01-01T10:00:00Z'), { created: 6, updated: 0, unchanged: 0, missing: 0 });
  const node = async (src: string) => (await store.listNodes({ page: 1, per_page: 50, filters: [{ key: 'managed_by', values: ['aws-prod'] }] }))
    .data.find((n) => n.source_id === src);
  t.match(await node('i-web1'), { state: 'running', status: 'unknown', region: 'eu-west-1', account_id: '111122223333', managers: ['aws-prod'], has_agent: false });
  t.match(await node('i-web2'), { state: 'stopped', status: 'unreachable' });
  t.match(await node('i-old'), { state: 'terminated' });

  // Next poll: web1 stopped, web2 started, i-api3 gone (deleted from the account), old still terminated.
  const regions = fx.regions;
  regions['eu-west-1']![0]![0]!.state = 'stopped';
  regions['eu-west-1']![1]![0]!.state = 'running';
  regions['us-east-1'] = regions['us-east-1']!.slice(0, 2);
  writeFileSync(file, JSON.stringify(fx));
  t.same(await poll('2026-01-01T10:05:00Z'), { created: 0, updated: 2, unchanged: 3, missing: 1 });
  t.match(await node('i-web1'), { state: 'stopped', status: 'unreachable', state_changed_at: '2026-01-01T10:05:00.000Z' });
  t.match(await node('i-web2'), { state: 'running' });
  t.match(await node('i-api3'), { state: 'missing' });
  t.match(await node('i-old'), { state: 'terminated' });
  // A failed poll keeps the nodes as they are and records the cloud's error.
  await applyPoll(store, registryOn(store), rec.id, { error: 'aws-ec2 eu-west-1: AuthFailure' }, new Date('2026-01-01T10:10:00Z'), DISCOVERY);
  t.match(await store.managers.getManager('aws-prod'), { last_poll_error: /AuthFailure/, last_poll_at: '2026-01-01T10:10:00.000Z' });
  t.match(await node('i-web2'), { state: 'running' });
});

t.test('a poll posted with the filters of before (a relay not refreshed yet) is filtered again as the manager stands now', async (t) => {
  const store = await sqliteBackend(t);
  const spec = manager('http://127.0.0.1:1', { filters: { regions: { include: ['eu-'] }, tags: { exclude: [{ key: 'scratch', values: ['*'] }] } } });
  await store.managers.createManager({ id: spec.id, name: spec.name, type: spec.type, provider: 'relay-1', spec: specToStored(spec) }, '2026-01-01T00:00:00Z');
  const inst = (id: string, region: string, tags: Record<string, string> = {}) =>
    ({ source_id: id, region, account_id: '111122223333', hostname: id, address: null, state: 'running', tags });
  const summary = await applyPoll(store, registryOn(store), spec.id, { instances: [inst('i-1', 'eu-west-1'), inst('i-2', 'us-east-1'), inst('i-3', 'eu-west-1', { scratch: 'yes' })] }, new Date('2026-01-01T10:00:00Z'), DISCOVERY);
  t.same(summary, { created: 1, updated: 0, unchanged: 0, missing: 0 });
  t.same((await store.listNodes({ page: 1, per_page: 10 })).data.map((n) => n.source_id), ['i-1']);
});
