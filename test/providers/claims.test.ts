/**
 * Claims on discovered instances, on both backends: an inventory naming a discovered instance's
 * cloud identity registers the node on its own and records the claim (shown, nothing moves); an
 * admin's confirmation joins it — the node takes the row's cloud identity, address, manager, tags,
 * groups and history, and the discovered row is gone; a joined row cannot be claimed twice. Then
 * the API: GET /api/1/nodes/<id>/claim for any role, confirm for the admin role only.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { compressSync, createNodeIdentity, inventoryFileName, signSmime } from '@capstan/shared';
import { ingestInventory } from '@capstan/server/ingest/inventory';
import type { IngestDeps } from '@capstan/server/ingest/runlog';
import { confirmClaim, nodeClaim } from '@capstan/server/providers/claims';
import type { Store } from '@capstan/server/store/index';
import { postgresBackend, sqliteBackend, type Open } from './backends.js';
import { INGEST_LIMITS } from '../helpers/ingest.js';
import { registryOn, TEST_ADMIN } from '../helpers/node-changes.js';
import { adminApp } from '../helpers/admin-app.js';

const CLOCK = () => new Date('2026-01-01T10:00:00Z');
const CLOUD = (id: string) => ({ cloud: { provider: 'aws', instance_id: id, region: 'eu-west-1', account_id: '111122223333' } });

async function discover(store: Store) {
  await store.managers.createManager({ id: 'aws', name: 'aws', type: 'aws-ec2', provider: 'server', spec: {} }, '2026-01-01T09:00:00Z');
  await store.managers.applyDiscovery('aws', [
    { source_id: 'i-1', region: 'eu-west-1', account_id: '111122223333', hostname: 'ip-10-0-0-1', address: '10.0.0.1', state: 'running', tags: { env: 'prod' } },
  ], '2026-01-01T09:30:00Z');
  return (await store.listNodes({ page: 1, per_page: 10 })).data[0]!;
}

function sender(store: Store, dir: string, nodes: IngestDeps['nodes']) {
  const deps: IngestDeps = { store, nodes, limits: INGEST_LIMITS, now: CLOCK };
  let n = 0;
  return async (id: string, extra: Record<string, unknown>) => {
    const idn = createNodeIdentity(id);
    const doc = { node_id: id, hostname: `${id}.example.com`, certificate: idn.certPem, agent_version: '0.1.0', policy_server: 'relay', os: { name: 'debian', version: '12', kernel: '6.1', arch: 'x86_64' }, ...extra };
    const name = inventoryFileName(id, new Date(Date.UTC(2026, 0, 1, 0, 0, n++)), 'zstd');
    await writeFile(join(dir, name), compressSync(signSmime(Buffer.from(JSON.stringify(doc)), idn), 'zstd'));
    return ingestInventory(deps, join(dir, name), name);
  };
}

async function suite(t: Test, open: Open) {
  const store = await open(t, { now: CLOCK });
  const nodes = registryOn(store);
  const send = sender(store, t.testdir(), nodes);
  const row = await discover(store);
  const A = '10000000-0000-4000-8000-0000000000a1';
  const node = await send(A, CLOUD('i-1'));
  t.match(node, { id: A, source_id: null, address: null, tags: {} }, 'the claim moved nothing');
  t.match(await store.getNode(row.id), { source_id: 'i-1', address: '10.0.0.1', tags: { env: 'prod' } }, 'the discovered row is intact');
  const claim = await nodeClaim(store, A);
  t.match(claim, { node_id: A, cloud: { source_id: 'i-1' }, discovered: { id: row.id, address: '10.0.0.1', manager: 'aws', tags: { env: 'prod' } }, proved: false }, 'the claim is shown');
  t.equal(await nodeClaim(store, row.id), null, 'the discovered row itself claims nothing');

  const joined = await confirmClaim(store, nodes, A, TEST_ADMIN);
  t.match(joined, { id: A, source_id: 'i-1', region: 'eu-west-1', account_id: '111122223333', address: '10.0.0.1', manager: 'aws', tags: { env: 'prod' } }, 'confirmed: the node took the row over');
  t.equal(await store.getNode(row.id), null, 'the discovered row is gone');
  t.match((await store.listNodes({ page: 1, per_page: 10 })).data, [{ id: A, managers: ['aws'], has_agent: true }], 'one node, linked to its manager');
  t.ok((await store.getHistory(A, 1, 50)).data.some((h) => /claim confirmed by admin: joined discovered node/.test(h.cause ?? '')), 'the history says why');
  t.equal(await nodeClaim(store, A), null, 'nothing left to claim');
  await t.rejects(confirmClaim(store, nodes, A, TEST_ADMIN), { code: 'ERR_NODE_CLAIM_NONE' }, 'not twice');

  const B = '10000000-0000-4000-8000-0000000000b2';
  await send(B, CLOUD('i-1'));
  t.match(await nodeClaim(store, B), { discovered: null }, 'a second claim on a joined instance matches no row');
  await t.rejects(confirmClaim(store, nodes, B, TEST_ADMIN), { code: 'ERR_NODE_CLAIM_NONE' });
  t.equal((await store.getNode(A))!.source_id, 'i-1', 'the first stays joined');
  await t.rejects(nodeClaim(store, 'nobody'), { code: 'ERR_NODE_UNKNOWN' });
}

t.test('sqlite', (t) => suite(t, sqliteBackend));
t.test('postgresql', async (t) => {
  const pg = await postgresBackend();
  if (typeof pg === 'string') return void t.pass(`skipped: ${pg}`);
  await suite(t, pg);
});

t.test('the API: any role sees a claim, only an admin confirms it', async (t) => {
  const { store, domain, api } = await adminApp(t);
  const row = await discover(store);
  const send = sender(store, t.testdir(), domain.nodes);
  const A = '10000000-0000-4000-8000-0000000000a1';
  await send(A, CLOUD('i-1'));
  const claim = await api('GET', `/api/1/nodes/${A}/claim`);
  t.match(claim, { status: 200, json: { data: { discovered: { id: row.id } } } });
  t.match(await api('GET', `/api/1/nodes/${row.id}/claim`), { status: 404, code: 'ERR_NOT_FOUND' });
  const made = await api('POST', '/api/1/admins', { name: 'ops', role: 'operator' });
  const op = await api('POST', `/api/1/nodes/${A}/claim/confirm`, undefined, {}, `Bearer ${made.json.data.token}`);
  t.match(op, { status: 403, code: 'ERR_FORBIDDEN' }, 'an operator may not confirm');
  t.match(await api('POST', `/api/1/nodes/${A}/claim/confirm`), { status: 200, json: { data: { id: A, source_id: 'i-1', address: '10.0.0.1' } } });
  t.match(await api('POST', `/api/1/nodes/${A}/claim/confirm`), { status: 409, code: 'ERR_NODE_CLAIM_NONE' });
});
