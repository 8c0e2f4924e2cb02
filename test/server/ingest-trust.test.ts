/**
 * The root's trust decisions on ingest, in process against a real SQLite store: who may register,
 * whose signature counts, and what a refusal looks like.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { compressSync, createNodeIdentity, formatReport, inventoryFileName, runLogFileName, signSmime, type NodeIdentity } from '@capstan/shared';
import { ingestInventory } from '@capstan/server/ingest/inventory';
import { ingestRunLog, type IngestDeps } from '@capstan/server/ingest/runlog';
import { INGEST_LIMITS, ingestStore } from '../helpers/ingest.js';
import { setAcceptance } from '../helpers/node-changes.js';
import { registryOn } from '../helpers/node-changes.js';

const NODE = '11111111-2222-4333-8444-555555555555';
const OTHER = '99999999-2222-4333-8444-555555555555';
const node = createNodeIdentity(NODE);
const impostor = createNodeIdentity(NODE); // same node id, another key
const other = createNodeIdentity(OTHER);

function inventory(nodeId: string, cert: string, extra: Record<string, unknown> = {}) {
  return {
    node_id: nodeId, hostname: 'web1', certificate: cert, agent_version: '0.1.0', policy_server: 'relay',
    os: { name: 'debian', version: '12', kernel: '6.1', arch: 'x86_64' }, ...extra,
  };
}

async function setup(t: { testdir: () => string; teardown: (f: () => unknown) => void }) {
  const { dir, store } = await ingestStore(t);
  const deps: IngestDeps = { store, nodes: registryOn(store), limits: INGEST_LIMITS };
  let n = 0;
  const put = async (name: string, body: Buffer) => {
    const path = join(dir, `${n++}-${name}`);
    await writeFile(path, body);
    return path;
  };
  const sendInventory = async (id: NodeIdentity, doc: unknown, nameNode = NODE) => {
    const name = inventoryFileName(nameNode, new Date(Date.UTC(2026, 0, 1, 0, 0, n)), 'zstd');
    return ingestInventory(deps, await put(name, compressSync(signSmime(Buffer.from(JSON.stringify(doc)), id), 'zstd')), name);
  };
  const sendRun = async (id: NodeIdentity, nodeId = NODE, second = 0) => {
    const start = new Date(Date.UTC(2026, 0, 1, 12, 0, second));
    const stamp = `${start.toISOString().slice(0, 19)}+00:00`;
    const line = (type: string, component: string, key: string, msg: string) =>
      formatReport({ policy: 'Common', event_type: type, rule_id: 'r1', directive_id: 'd1', report_id: '0', component, key_value: key, msg, node_id: nodeId, start_datetime: stamp, execution_datetime: stamp });
    const text = [line('control', 'start', 'cfg1', 'Start execution'), line('result_success', 'File', '/etc/motd', 'ok'), line('control', 'end', 'cfg1', 'End execution')].join('\n') + '\n';
    const name = runLogFileName(nodeId, start, 'zstd');
    return ingestRunLog(deps, await put(name, compressSync(signSmime(Buffer.from(text), id), 'zstd')), name);
  };
  return { store, sendInventory, sendRun };
}

t.test('a first inventory registers the node as pending with the certificate it carries', async (t) => {
  const { store, sendInventory, sendRun } = await setup(t);
  const n = await sendInventory(node, inventory(NODE, node.certPem, { custom: { kept: true } }));
  t.equal(n.accepted, 'pending');
  t.equal(n.certificate, node.certPem);
  t.same(((await store.getInventory(NODE))!.inventory as { custom: unknown }).custom, { kept: true }, 'unknown fields are kept');
  await t.rejects(sendRun(node), { code: 'ERR_NODE_PENDING' });
  await t.rejects(sendRun(other, OTHER), { code: 'ERR_NODE_UNKNOWN' });
});

t.test('once accepted, only the pinned key counts', async (t) => {
  const { store, sendInventory, sendRun } = await setup(t);
  await sendInventory(node, inventory(NODE, node.certPem));
  await setAcceptance(store, NODE, 'accepted', new Date().toISOString());
  t.same(await sendRun(node), { inserted: true, runId: 1 });
  t.equal((await sendRun(node)).inserted, false, 'the same run again is a duplicate');
  await t.rejects(sendRun(impostor, NODE, 5), { code: 'ERR_SMIME_SIGNER_NOT_FOUND' }, 'another key claiming the node id');
  await t.rejects(sendInventory(impostor, inventory(NODE, impostor.certPem)), { code: 'ERR_SMIME_SIGNER_NOT_FOUND' }, 'an inventory cannot swap the key');
  t.equal((await store.getNode(NODE))!.certificate, node.certPem, 'the pinned certificate is unchanged');
  const runs = await store.listRuns(NODE, 1, 10);
  t.equal(runs.total, 1);
  t.same(runs.data[0]!.counts, { control: 2, result_success: 1 });
});

t.test('inventories that lie about who they are are refused', async (t) => {
  const { sendInventory } = await setup(t);
  await t.rejects(sendInventory(other, inventory(OTHER, other.certPem), NODE), { code: 'ERR_NODE_MISMATCH' }, 'body names another node than the file');
  await t.rejects(sendInventory(other, inventory(NODE, other.certPem)), { code: 'ERR_NODE_MISMATCH' }, 'certificate UID is another node');
  await t.rejects(sendInventory(node, inventory(NODE, other.certPem)), { code: 'ERR_SMIME_SIGNER_NOT_FOUND' }, 'signed by a key other than the one it carries');
  await t.rejects(sendInventory(node, { node_id: NODE }), { code: 'ERR_INVENTORY_INVALID' });
  await t.rejects(sendInventory(node, inventory(NODE, node.certPem, { os: { name: 'debian' } })), { code: 'ERR_INVENTORY_INVALID' });
});

t.test('a refused node stays refused', async (t) => {
  const { store, sendInventory, sendRun } = await setup(t);
  await sendInventory(node, inventory(NODE, node.certPem));
  await setAcceptance(store, NODE, 'refused', new Date().toISOString());
  await t.rejects(sendInventory(node, inventory(NODE, node.certPem)), { code: 'ERR_NODE_REFUSED' });
  await t.rejects(sendRun(node), { code: 'ERR_NODE_REFUSED' });
});

t.test('another key claiming a pending node is a conflict: refused, recorded, and the genuine node keeps its certificate', async (t) => {
  // An inventory signed by another key with another UID=<id> certificate used to replace the
  // pending node's certificate and hostname; once accepted, the genuine node's runs were refused.
  const { store, sendInventory, sendRun } = await setup(t);
  await sendInventory(node, inventory(NODE, node.certPem));
  await t.rejects(sendInventory(impostor, inventory(NODE, impostor.certPem, { hostname: 'evil' })), { code: 'ERR_CERTIFICATE_CONFLICT' });
  const n = (await store.getNode(NODE))!;
  t.match(n, { hostname: 'web1', certificate: node.certPem, conflict_certificate: impostor.certPem });
  t.not(n.conflict_fingerprint, n.certificate_fingerprint);
  t.match((await store.getHistory(NODE, 1, 10)).data[0], { field: 'certificate', from: n.certificate_fingerprint, to: n.conflict_fingerprint });
  // The admin chooses the genuine certificate: its runs are stored, the impostor's refused.
  await t.rejects(setAcceptance(store, NODE, 'accepted', new Date().toISOString()), { code: 'ERR_CERTIFICATE_CONFLICT' });
  await setAcceptance(store, NODE, 'accepted', new Date().toISOString(), 'admin', n.certificate_fingerprint!);
  t.match(await sendRun(node), { inserted: true });
  await t.rejects(sendRun(impostor, NODE, 7), { code: 'ERR_SMIME_SIGNER_NOT_FOUND' });
});

t.test('a run dated beyond the allowed clock skew is refused and shows on the node; genuine runs still move it', async (t) => {
  // One signed run dated years ahead used to become the node's last run and compliance base for
  // good: later genuine runs changed neither, and retention never removed it.
  const { dir, store } = await ingestStore(t);
  const now = new Date('2026-06-01T12:00:00Z');
  const deps: IngestDeps = { store, nodes: registryOn(store), limits: { ...INGEST_LIMITS, maxClockSkewMs: 5 * 60_000 }, now: () => now };
  await store.createNode({ id: NODE, hostname: 'web1', certificate: node.certPem });
  const send = async (start: Date) => {
    const stamp = `${start.toISOString().slice(0, 19)}+00:00`;
    const line = (type: string, component: string, msg: string) =>
      formatReport({ policy: 'Common', event_type: type, rule_id: 'r1', directive_id: 'd1', report_id: '0', component, key_value: 'cfg1', msg, node_id: NODE, start_datetime: stamp, execution_datetime: stamp });
    const name = runLogFileName(NODE, start, 'zstd');
    const path = join(dir, name.replace(/:/g, '_'));
    await writeFile(path, compressSync(signSmime(Buffer.from(`${line('control', 'start', 'Start')}\n${line('control', 'end', 'End')}\n`), node), 'zstd'));
    return ingestRunLog(deps, path, name);
  };
  await t.rejects(send(new Date('2029-06-01T12:00:00Z')), { code: 'ERR_RUN_IN_FUTURE', details: { clock_skew: 94_694_400 } });
  t.match(await store.getNode(NODE), { last_run_at: null, clock_skew: 94_694_400, clock_skew_at: now.toISOString() });
  t.equal((await store.listRuns(NODE, 1, 10)).total, 0);
  await t.rejects(send(new Date(now.getTime() + 6 * 60_000)), { code: 'ERR_RUN_IN_FUTURE' }, 'just past the configured skew');
  t.match(await send(new Date(now.getTime() + 4 * 60_000)), { inserted: true }, 'within the skew');
  t.match(await send(new Date(now.getTime() - 60_000)), { inserted: true });
  t.match(await store.getNode(NODE), { last_run_at: new Date(now.getTime() + 4 * 60_000).toISOString(), clock_skew: 240 });
  t.equal((await store.getComplianceBase(NODE))!.run!.started_at.slice(0, 16), '2026-06-01T12:04');
});
