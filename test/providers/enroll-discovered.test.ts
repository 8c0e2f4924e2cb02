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

t.test('an agent enrolling on a discovered instance joins its row; one elsewhere is a new node', async (t) => {
  const { store, send } = await setup(t);
  const before = (await store.listNodes({ page: 1, per_page: 10, sort: 'hostname' })).data;
  t.equal(before.length, 2);
  const node = await send('10000000-0000-4000-8000-00000000000a', { cloud: { provider: 'aws', instance_id: 'i-1', region: 'eu-west-1', account_id: '111122223333' } });
  t.match(node, { id: '10000000-0000-4000-8000-00000000000a', source_id: 'i-1', accepted: 'pending', status: 'reachable', tags: { env: 'prod' } });
  const rows = (await store.listNodes({ page: 1, per_page: 10, sort: 'hostname' })).data;
  t.equal(rows.length, 2, 'still two nodes: the agent joined the discovered row');
  t.match(rows.find((r) => r.source_id === 'i-1'), { id: node.id, managers: ['aws'], has_agent: true });
  t.equal(await store.getNode(before.find((r) => r.source_id === 'i-1')!.id), null, 'the discovered id is gone');

  // Under facts.cloud too.
  const viaFacts = await send('10000000-0000-4000-8000-00000000000b', { facts: { cloud: { instance_id: 'i-2', region: 'eu-west-1', account_id: '111122223333' } } });
  t.equal(viaFacts.source_id, 'i-2');
  // An instance no manager discovered, and a claim on a row that already has its agent: new nodes.
  const stranger = await send('10000000-0000-4000-8000-00000000000c', { cloud: { instance_id: 'i-9', region: 'eu-west-1', account_id: '111122223333' } });
  t.equal(stranger.source_id, null);
  const claim = await send('10000000-0000-4000-8000-00000000000d', { cloud: { instance_id: 'i-1', region: 'eu-west-1', account_id: '111122223333' } });
  t.match(claim, { source_id: null, accepted: 'pending' }, 'a row with an agent is never taken over');
  t.equal((await store.listNodes({ page: 1, per_page: 10 })).total, 4);
});
