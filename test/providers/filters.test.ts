/**
 * Discovery filters (AWS wildcard semantics, region prefixes), the static driver's host file,
 * and the agent's cloud identity read from cloud-init's instance data.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { applyFilters, checkDiscoveryFilters, checkManager, discover, wildcard, type DiscoveredInstance } from '@capstan/toolkit/providers/index';
import { cloudFromInstanceData } from '@capstan/agent/inventory/collect';

t.test('tag values use AWS wildcards: * any run, ? one character, \\ escapes', async (t) => {
  t.ok(wildcard('prod*').test('prod'));
  t.ok(wildcard('prod*').test('production'));
  t.notOk(wildcard('prod*').test('preprod'));
  t.ok(wildcard('we?').test('web'));
  t.notOk(wildcard('we?').test('we'));
  t.notOk(wildcard('we?').test('webs'));
  t.ok(wildcard('a\\*b').test('a*b'));
  t.notOk(wildcard('a\\*b').test('axb'));
  t.ok(wildcard('a.b').test('a.b'));
  t.notOk(wildcard('a.b').test('axb'), 'regex characters are literal');
  t.ok(wildcard('*').test(''));
});

t.test('include and exclude by region prefix and tag; values ORed, include filters ANDed', async (t) => {
  const i = (source_id: string, region: string, tags: Record<string, string>): DiscoveredInstance =>
    ({ source_id, region, account_id: '1', hostname: source_id, address: null, state: 'running', tags });
  const all = [
    i('a', 'eu-west-1', { env: 'prod', team: 'web' }),
    i('b', 'eu-south-1', { env: 'prod', team: 'web' }),
    i('c', 'us-east-1', { env: 'prod', team: 'db' }),
    i('d', 'eu-west-2', { env: 'staging', team: 'web' }),
    i('e', 'eu-west-3', { env: 'prod' }),
    i('f', 'eu-west-1', { env: 'prod', team: 'web', scratch: '1' }),
  ];
  const f = checkDiscoveryFilters({
    regions: { include: ['eu-', 'us-'], exclude: ['eu-south'] },
    tags: { include: [{ key: 'env', values: ['prod', 'stag*'] }, { key: 'team', values: ['w?b', 'db'] }], exclude: [{ key: 'scratch', values: ['*'] }] },
  });
  t.same(applyFilters(f, all).map((x) => x.source_id), ['a', 'c', 'd']);
  t.same(applyFilters(checkDiscoveryFilters(undefined), all).length, all.length, 'no filters keep everything');
});

t.test('filters and manager bodies are refused with codes', async (t) => {
  t.throws(() => checkDiscoveryFilters({ tags: { include: [{ key: 'env' }] } }), { code: 'ERR_MANAGER_FILTER' });
  t.throws(() => checkDiscoveryFilters({ tags: { include: [{ key: 'env', values: ['x'], op: 'eq' }] } }), { code: 'ERR_MANAGER_FILTER' });
  t.throws(() => checkDiscoveryFilters({ regions: { include: 'eu-' } }), { code: 'ERR_MANAGER_FILTER' });
  t.throws(() => checkDiscoveryFilters({ tags: { include: [{ key: 'env', values: ['a'] }], exclude: [{ key: 'env', values: ['b'] }] } }), { code: 'ERR_FILTER_CONFLICT' });
  t.throws(() => checkManager({ id: 'g', type: 'gcp', config: { project: 'p' }, credentials: { source: 'profile', profile: 'x' } }), { code: 'ERR_MANAGER_INVALID' });
  t.throws(() => checkManager({ id: 'z', type: 'azure-vm', config: { subscription_id: 's' }, credentials: { source: 'env', vars: { tenant_id: 'T', client_id: 'C', client_secret: '-----BEGIN PRIVATE KEY-----' } } }), { code: 'ERR_MANAGER_SECRET' });
  t.throws(() => checkManager({ id: 'z', type: 'azure-vm', config: { subscription_id: 's' }, password: 'x' }), { code: 'ERR_MANAGER_SECRET' });
  t.match(checkManager({ id: 's', type: 'static', config: { hosts: [{ hostname: 'h', tags: { password_policy: 'strict' } }] } }).config,
    { hosts: [{ tags: { password_policy: 'strict' } }] }, 'a tag named like a secret field is a tag');
  t.throws(() => checkManager({ id: 's', type: 'static', config: { hosts: [{ hostname: 'h', tags: { k: '-----BEGIN RSA PRIVATE KEY-----' } }] } }), { code: 'ERR_MANAGER_SECRET' });
  t.match(checkManager({ id: 'z', type: 'azure-vm', config: { subscription_id: 's' }, credentials: { source: 'env', vars: { tenant_id: 'T', client_id: 'C', client_secret: 'AZ_SECRET' } } }),
    { credentials: { source: 'env', vars: { client_secret: 'AZ_SECRET' } }, poll_interval_ms: 300_000 });
});

t.test('a static host file is re-read at each poll: JSON or one host per line', async (t) => {
  const dir = t.testdir();
  const file = join(dir, 'hosts');
  await writeFile(file, 'web1 # front\n\nweb2\nweb1\n');
  const spec = checkManager({ id: 'lab', type: 'static', config: { file, region: 'dc1' } });
  t.same((await discover(spec)).map((i) => [i.source_id, i.region, i.account_id, i.state]), [['web1', 'dc1', 'static', 'running'], ['web2', 'dc1', 'static', 'running']]);
  await writeFile(file, JSON.stringify([{ hostname: 'db1', address: '10.0.0.9', tags: { role: 'db' } }, 'web2']));
  t.match(await discover(spec), [{ source_id: 'db1', address: '10.0.0.9', tags: { role: 'db' } }, { source_id: 'web2' }]);
  await writeFile(file, '[not json');
  await t.rejects(discover(spec), { code: 'ERR_PROVIDER' });
  const inline = checkManager({ id: 'l2', type: 'static', config: { hosts: ['a', { hostname: 'b', tags: { x: 'y' } }] }, filters: { tags: { include: [{ key: 'x', values: ['y'] }] } } });
  t.same((await discover(inline)).map((i) => i.source_id), ['b']);
});

t.test("the agent reads its cloud identity from cloud-init's instance data", async (t) => {
  t.same(cloudFromInstanceData({
    v1: { cloud_name: 'aws', instance_id: 'i-0abc', region: 'eu-west-1' },
    ds: { dynamic: { 'instance-identity': { document: { accountId: '111122223333' } } } },
  }), { provider: 'aws', instance_id: 'i-0abc', region: 'eu-west-1', account_id: '111122223333' });
  t.same(cloudFromInstanceData({
    v1: { cloud_name: 'azure', instance_id: 'x', region: 'westeurope' },
    ds: { meta_data: { imds: { compute: { vmId: 'vm-uuid', location: 'westeurope', subscriptionId: 'sub-1' } } } },
  }), { provider: 'azure', instance_id: 'vm-uuid', region: 'westeurope', account_id: 'sub-1' });
  t.same(cloudFromInstanceData({ v1: { cloud_name: 'gce', instance_id: 1234, availability_zone: 'europe-west1-b' }, ds: { meta_data: { project: { projectId: 'proj' } } } }),
    { provider: 'gcp', instance_id: '1234', region: 'europe-west1-b', account_id: 'proj' });
  t.equal(cloudFromInstanceData({ v1: { cloud_name: 'aws', instance_id: 'i-1', region: 'eu-west-1' } }), null, 'no account: no identity');
  t.equal(cloudFromInstanceData({ v1: { cloud_name: 'nocloud' } }), null);
});
