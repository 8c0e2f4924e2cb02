/**
 * Lifecycle hooks of the inventory ingest, in process against a real SQLite store: auto-accept
 * by rule or enrollment secret (never kept with the inventory), a deleted node that sends again
 * is pending, a refused node's uploads are refused; and one lifecycle sweep over real nodes.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { compressSync, createNodeIdentity, formatReport, inventoryFileName, runLogFileName, signSmime, silentLogger, type NodeIdentity } from '@capstan/shared';
import { ingestInventory } from '@capstan/server/ingest/inventory';
import { ingestRunLog, type IngestDeps } from '@capstan/server/ingest/runlog';
import { enrollmentRules } from '@capstan/server/registry/enrollment';
import { Sweeper, sweep, type LifecyclePolicy } from '@capstan/server/registry/lifecycle';
import { INGEST_LIMITS, ingestStore } from '../helpers/ingest.js';
import { setAcceptance } from '../helpers/node-changes.js';
import { registryOn } from '../helpers/node-changes.js';

const SECRET = 'correct horse battery staple';
const ids = ['10000000-0000-4000-8000-000000000001', '10000000-0000-4000-8000-000000000002', 'lab-0003'];
const identities = new Map<string, NodeIdentity>(ids.map((id) => [id, createNodeIdentity(id)]));

async function setup(t: Test, clock = () => new Date('2024-05-01T10:00:00Z')) {
  const { dir, store } = await ingestStore(t);
  const deps: IngestDeps = {
    store, nodes: registryOn(store), limits: INGEST_LIMITS, now: clock,
    enrollment: enrollmentRules({ auto_accept_node_ids: 'lab-*', auto_accept_hostnames: '', secret: SECRET }),
  };
  let n = 0;
  const file = async (name: string, body: Buffer) => {
    const path = join(dir, `${n++}-${name}`);
    await writeFile(path, body);
    return path;
  };
  const sendInventory = async (id: string, extra: Record<string, unknown> = {}) => {
    const idn = identities.get(id)!;
    const doc = { node_id: id, hostname: `${id}.example.com`, certificate: idn.certPem, agent_version: '0.1.0', policy_server: 'relay', os: { name: 'debian', version: '12', kernel: '6.1', arch: 'x86_64' }, ...extra };
    const name = inventoryFileName(id, new Date(Date.UTC(2024, 4, 1, 0, 0, n)), 'zstd');
    return ingestInventory(deps, await file(name, compressSync(signSmime(Buffer.from(JSON.stringify(doc)), idn), 'zstd')), name);
  };
  const sendRun = async (id: string, minute = 0) => {
    const start = new Date(Date.UTC(2024, 4, 1, 9, minute));
    const stamp = `${start.toISOString().slice(0, 19)}+00:00`;
    const line = (type: string, component: string) => formatReport({ policy: 'p', event_type: type, rule_id: 'r1', directive_id: 'd1', report_id: '0', component, key_value: 'k', msg: 'm', node_id: id, start_datetime: stamp, execution_datetime: stamp });
    const text = [line('control', 'start'), line('result_success', 'File'), line('control', 'end')].join('\n') + '\n';
    const name = runLogFileName(id, start, 'zstd');
    return ingestRunLog(deps, await file(name, compressSync(signSmime(Buffer.from(text), identities.get(id)!), 'zstd')), name);
  };
  return { store, sendInventory, sendRun };
}

t.test('the enrollment secret accepts a node; it is not stored with the inventory', async (t) => {
  const { store, sendInventory, sendRun } = await setup(t);
  const node = await sendInventory(ids[0]!, { enrollment_secret: SECRET, custom: 1 });
  t.equal(node.accepted, 'accepted');
  const inv = (await store.getInventory(ids[0]!))!.inventory as Record<string, unknown>;
  t.equal(inv.enrollment_secret, undefined, 'the secret is gone');
  t.equal(inv.custom, 1, 'the rest is kept');
  t.match((await store.getHistory(ids[0]!, 1, 10)).data.find((h) => h.field === 'accepted'), { cause: 'auto-accept: enrollment secret' });
  t.equal((await sendRun(ids[0]!)).inserted, true, 'its runs count at once');
  t.equal((await sendInventory(ids[1]!, { enrollment_secret: 'wrong wrong wrong wrong' })).accepted, 'pending');
  t.equal((await sendInventory(ids[2]!)).accepted, 'accepted', 'node-id rule');
});

t.test('a deleted node that sends again is pending, not silently accepted; refused stays refused', async (t) => {
  const { store, sendInventory, sendRun } = await setup(t);
  t.equal((await sendInventory(ids[2]!)).accepted, 'accepted');
  await store.deleteNode(ids[2]!);
  await t.rejects(sendRun(ids[2]!), { code: 'ERR_NODE_UNKNOWN' }, 'its runs are refused at once');
  t.equal((await sendInventory(ids[2]!)).accepted, 'pending', 'the rule matches, the revoked certificate does not pass');
  await t.rejects(sendRun(ids[2]!, 1), { code: 'ERR_NODE_PENDING' });
  await setAcceptance(store, ids[2]!, 'refused', '2024-05-01T10:00:00Z');
  await t.rejects(sendInventory(ids[2]!, { enrollment_secret: SECRET }), { code: 'ERR_NODE_REFUSED' });
  await t.rejects(sendRun(ids[2]!, 2), { code: 'ERR_NODE_REFUSED' });
  t.equal((await store.getNode(ids[2]!))!.accepted, 'refused');
});

t.test('a sweep marks, purges and trims by the policy; the sweeper stops after its batch', async (t) => {
  let now = new Date('2024-05-01T10:00:00Z');
  const { store, sendInventory, sendRun } = await setup(t, () => now);
  await sendInventory(ids[2]!);
  await sendRun(ids[2]!);
  const policy: LifecyclePolicy = {
    runIntervalMs: 5 * 60_000, missedRuns: 3, missingAfterMs: 86_400_000, purgeAfterMs: 30 * 86_400_000,
    runsRetentionMs: 7 * 86_400_000, historyRetentionMs: 90 * 86_400_000, changesRetentionMs: 90 * 86_400_000, eventsRetentionMs: 30 * 86_400_000, findingsRetentionMs: 90 * 86_400_000, batchSize: 2, purgeBatchSize: 1,
  };
  t.match(await sweep(store, registryOn(store), policy, new Date('2024-05-01T10:14:00Z')), { unreachable: 0, missing: 0 });
  t.match(await sweep(store, registryOn(store), policy, new Date('2024-05-01T10:16:00Z')), { unreachable: 1, missing: 0 }, 'three missed runs');
  t.match(await sweep(store, registryOn(store), policy, new Date('2024-05-02T10:01:00Z')), { missing: 1 });
  t.match(await sweep(store, registryOn(store), policy, new Date('2024-05-09T00:00:00Z')), { runs_deleted: 1, runs_before: '2024-05-02T00:00:00.000Z' });
  t.match(await sweep(store, registryOn(store), policy, new Date('2024-06-02T10:02:00Z')), { purged: 1 });
  t.equal(await store.getNode(ids[2]!), null);
  const sweeper = new Sweeper({ store, nodes: registryOn(store), policy, intervalMs: 3_600_000, log: silentLogger, now: () => now });
  sweeper.start();
  now = new Date('2024-06-03T00:00:00Z');
  const r = await sweeper.runOnce();
  t.match(r, { purged: 0 });
  t.equal(sweeper.last, r);
  await sweeper.stop();
});
