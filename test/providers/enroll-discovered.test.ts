/**
 * An agent enrolling on a discovered instance: its signed inventory carries the instance's cloud
 * identity (from instance metadata, as `cloud` or `facts.cloud`), and the real inventory ingest
 * makes it take over the discovered row instead of creating a second node.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { compressSync, createNodeIdentity, inventoryFileName, signSmime } from '@capstan/shared';
import { ingestInventory } from '@capstan/server/ingest/inventory';
import type { IngestDeps } from '@capstan/server/ingest/runlog';
import { sqliteBackend } from './backends.js';
import { INGEST_LIMITS } from '../helpers/ingest.js';
import { registryOn } from '../helpers/node-changes.js';

const CLOCK = () => new Date('2026-01-01T10:00:00Z');

async function setup(t: Test) {
  const dir = t.testdir();
  const store = await sqliteBackend(t, { now: CLOCK });
  const deps: IngestDeps = { store, nodes: registryOn(store), limits: INGEST_LIMITS, now: CLOCK };
  await store.managers.createManager({ id: 'aws', name: 'aws', type: 'aws-ec2', provider: 'server', spec: {} }, '2026-01-01T09:00:00Z');
  await store.managers.applyDiscovery('aws', [
    { source_id: 'i-1', region: 'eu-west-1', account_id: '111122223333', hostname: 'ip-10-0-0-1', address: '10.0.0.1', state: 'running', tags: { env: 'prod' } },
    { source_id: 'i-2', region: 'eu-west-1', account_id: '111122223333', hostname: 'ip-10-0-0-2', address: '10.0.0.2', state: 'running', tags: {} },
  ], '2026-01-01T09:30:00Z');
  let n = 0;
  const send = async (id: string, extra: Record<string, unknown>) => {
    const idn = createNodeIdentity(id);
    const doc = { node_id: id, hostname: `${id}.example.com`, certificate: idn.certPem, agent_version: '0.1.0', policy_server: 'relay', os: { name: 'debian', version: '12', kernel: '6.1', arch: 'x86_64' }, ...extra };
    const name = inventoryFileName(id, new Date(Date.UTC(2026, 0, 1, 0, 0, n++)), 'zstd');
    const path = join(dir, name);
    await writeFile(path, compressSync(signSmime(Buffer.from(JSON.stringify(doc)), idn), 'zstd'));
    return ingestInventory(deps, path, name);
  };
  return { store, send };
}

t.test('an agent naming a discovered instance does not join its row: the claim waits for proof', async (t) => {
  const { store, send } = await setup(t);
  const before = (await store.listNodes({ page: 1, per_page: 10, sort: 'hostname' })).data;
  t.equal(before.length, 2);
  const node = await send('10000000-0000-4000-8000-00000000000a', { cloud: { provider: 'aws', instance_id: 'i-1', region: 'eu-west-1', account_id: '111122223333' } });
  t.match(node, { id: '10000000-0000-4000-8000-00000000000a', source_id: null, accepted: 'pending', tags: {} }, 'registered on its own, nothing inherited');
  const rows = (await store.listNodes({ page: 1, per_page: 10, sort: 'hostname' })).data;
  t.equal(rows.length, 3, 'a node of its own beside the discovered row');
  t.match(rows.find((r) => r.source_id === 'i-1'), { id: before.find((r) => r.source_id === 'i-1')!.id, tags: { env: 'prod' } }, 'the discovered row is untouched');
  // Under facts.cloud, and an instance no manager discovered: new nodes alike.
  t.equal((await send('10000000-0000-4000-8000-00000000000b', { facts: { cloud: { instance_id: 'i-2', region: 'eu-west-1', account_id: '111122223333' } } })).source_id, null);
  t.equal((await send('10000000-0000-4000-8000-00000000000c', { cloud: { instance_id: 'i-9', region: 'eu-west-1', account_id: '111122223333' } })).source_id, null);
  t.equal((await store.listNodes({ page: 1, per_page: 10 })).total, 5);
});
