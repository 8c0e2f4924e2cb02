/**
 * The server's run-log pipeline (RunLogIngest): CPU work on worker threads, inserts grouped per
 * transaction. In process against a real SQLite store, with real signed run logs.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { compressSync, createNodeIdentity, formatReport, isTransient, runLogFileName, signSmime, type NodeIdentity } from '@capstan/shared';
import type { Store } from '@capstan/server/store/index';
import { RunLogIngest } from '@capstan/server/ingest/runlog';
import { complianceClock } from '@capstan/server/registry/compliance';
import { INGEST_LIMITS, ingestStore } from '../helpers/ingest.js';
import { registryOn } from '../helpers/node-changes.js';

const ids = Array.from({ length: 6 }, (_, i) => `11111111-2222-4333-8444-${String(i).padStart(12, '0')}`);
const keys = new Map(ids.map((id) => [id, createNodeIdentity(id)]));

async function setup(t: Test, opts: { batchSize?: number; batchWindowMs?: number } = {}) {
  const { dir, store } = await ingestStore(t);
  for (const id of ids) {
    const k = keys.get(id)!;
    await store.createNode({ id, hostname: `${id}.example.com`, certificate: k.certPem, certificate_fingerprint: 'f'.repeat(64) });
  }
  const ingest = new RunLogIngest({ store, nodes: registryOn(store), limits: INGEST_LIMITS, workers: 2, batchSize: opts.batchSize ?? 4, batchWindowMs: opts.batchWindowMs ?? 50 });
  t.teardown(() => ingest.close());
  let n = 0;
  const file = async (nodeId: string, signer: NodeIdentity, second = 0, directive = 'd1') => {
    const start = new Date(Date.UTC(2026, 0, 1, 12, 0, second));
    const stamp = `${start.toISOString().slice(0, 19)}+00:00`;
    const line = (type: string, component: string, key: string, msg: string) =>
      formatReport({ policy: 'Common', event_type: type, rule_id: 'r1', directive_id: directive, report_id: '0', component, key_value: key, msg, node_id: nodeId, start_datetime: stamp, execution_datetime: stamp });
    const text = [line('control', 'start', 'cfg1', 'Start execution'), line('result_success', 'File', '/etc/motd', 'ok'), line('control', 'end', 'cfg1', 'End execution')].join('\n') + '\n';
    const name = runLogFileName(nodeId, start, 'zstd');
    const path = join(dir, `${n++}-${name}`);
    await writeFile(path, compressSync(signSmime(Buffer.from(text), signer), 'zstd'));
    return { path, name };
  };
  return { store, ingest, file };
}

const settle = (ps: Array<Promise<unknown>>) => Promise.allSettled(ps);

t.test('run logs ingested together are all stored, each with its own run id', async (t) => {
  const { store, ingest, file } = await setup(t);
  const files = await Promise.all(ids.map((id) => file(id, keys.get(id)!)));
  const results = await Promise.all(files.map((f) => ingest.ingest(f.path, f.name)));
  t.ok(results.every((r) => r.inserted));
  t.equal(new Set(results.map((r) => r.runId)).size, ids.length);
  for (const id of ids) {
    const runs = await store.listRuns(id, 1, 10);
    t.equal(runs.total, 1, `${id} has its run`);
    t.same(runs.data[0]!.counts, { control: 2, result_success: 1 }, 'parsed on a worker, summarised as before');
    t.same(runs.data[0]!.outcomes, [{ rule_id: 'r1', directive_id: 'd1', component: 'File', outcome: 'result_success', count: 1 }], 'outcomes packed on a worker read back');
  }
  t.equal((await store.complianceByRule('directive', complianceClock({ runIntervalMs: 300_000, missedRuns: 3, applyingGraceMs: 300_000 })))[0]!.nodes, ids.length, 'compliance written for every node');
});

t.test('a run log refused in a batch fails alone, with its code, and the others are stored', async (t) => {
  const { store, ingest, file } = await setup(t, { batchSize: 8, batchWindowMs: 200 });
  const impostor = createNodeIdentity(ids[1]!);
  const files = [await file(ids[0]!, keys.get(ids[0]!)!), await file(ids[1]!, impostor), await file(ids[2]!, keys.get(ids[2]!)!)];
  const results = await settle(files.map((f) => ingest.ingest(f.path, f.name)));
  t.same(results.map((r) => r.status), ['fulfilled', 'rejected', 'fulfilled']);
  const err = (results[1] as PromiseRejectedResult).reason as { code: string };
  t.equal(err.code, 'ERR_SMIME_SIGNER_NOT_FOUND', 'the worker’s error keeps its code across the thread');
  t.notOk(isTransient(err), 'a bad signature is permanent: the file goes to failed/');
  t.equal((await store.listRuns(ids[1]!, 1, 10)).total, 0);
  t.equal((await store.listRuns(ids[2]!, 1, 10)).total, 1);
});

t.test('the same run log twice in flight is stored once; the copy is a duplicate', async (t) => {
  const { store, ingest, file } = await setup(t);
  const a = await file(ids[0]!, keys.get(ids[0]!)!, 7);
  const b = await file(ids[0]!, keys.get(ids[0]!)!, 7);
  const results = await Promise.all([ingest.ingest(a.path, a.name), ingest.ingest(b.path, b.name)]);
  t.same(results.map((r) => r.inserted).sort(), [false, true]);
  t.equal(results[0]!.runId, results[1]!.runId, 'the duplicate names the stored run');
  t.equal((await store.listRuns(ids[0]!, 1, 10)).total, 1);
});

t.test('a lone run log does not wait for the batch window', async (t) => {
  const { ingest, file } = await setup(t, { batchSize: 64, batchWindowMs: 60_000 });
  const f = await file(ids[3]!, keys.get(ids[3]!)!);
  const t0 = Date.now();
  t.ok((await ingest.ingest(f.path, f.name)).inserted);
  t.ok(Date.now() - t0 < 30_000, 'written without waiting a minute for others');
});

t.test('under a backlog each batch is written in a turn of its own: the event loop serves others between them', async (t) => {
  const { store, ingest, file } = await setup(t, { batchSize: 2, batchWindowMs: 0 });
  const files = await Promise.all(ids.map((id) => file(id, keys.get(id)!)));
  // Every write noted with the turns of the event loop counted so far: a timer ticking every
  // turn (an HTTP request's callback would wait the same way) must move between two writes.
  let turns = 0;
  let ticking = true;
  const tick = () => {
    turns++;
    if (ticking) setImmediate(tick);
  };
  setImmediate(tick);
  const seen: number[] = [];
  const batches: number[] = [];
  const s = store as Store & { insertRuns: Store['insertRuns'] };
  const original = s.insertRuns.bind(store);
  s.insertRuns = (runs) => {
    seen.push(turns);
    batches.push(runs.length);
    return original(runs);
  };
  const results = await Promise.all(files.map((f) => ingest.ingest(f.path, f.name)));
  ticking = false;
  t.ok(results.every((r) => r.inserted));
  t.equal(batches.reduce((a, b) => a + b, 0), ids.length, 'every run log written');
  t.ok(batches.length >= 3, `in batches of at most 2 (${batches.join(', ')})`);
  for (let i = 1; i < seen.length; i++) t.ok(seen[i]! > seen[i - 1]!, `batch ${i + 1} written in a later turn than batch ${i}`);
});

t.test('a batch the database cannot commit fails every run log of it as transient (the files are retried)', async (t) => {
  const { store, ingest, file } = await setup(t);
  const files = await Promise.all(ids.slice(0, 3).map((id) => file(id, keys.get(id)!)));
  // Node lookups succeed; the database then goes away before the batch is written.
  const broken = store as Store & { insertRuns: Store['insertRuns'] };
  const original = broken.insertRuns.bind(store);
  broken.insertRuns = async (runs) => {
    await store.close();
    return original(runs);
  };
  const results = await settle(files.map((f) => ingest.ingest(f.path, f.name)));
  t.ok(results.every((r) => r.status === 'rejected'));
  for (const r of results) {
    const reason = (r as PromiseRejectedResult).reason as { code: string };
    t.equal(reason.code, 'ERR_STORE');
    t.ok(isTransient(reason));
  }
});

t.test("a node-day's later runs are encoded against its base in the workers, and read back exactly", async (t) => {
  const { store, ingest, file } = await setup(t);
  // What the store is asked for and what it is handed, seen from outside.
  const bases: Array<number | null> = [];
  const against: Array<number | undefined> = [];
  const getRunBase = store.getRunBase.bind(store);
  const insertRuns = store.insertRuns.bind(store);
  store.getRunBase = async (node, day) => {
    const b = await getRunBase(node, day);
    bases.push(b && b.id);
    return b;
  };
  store.insertRuns = async (runs) => {
    against.push(...runs.map((r) => r.against?.base_id));
    return insertRuns(runs);
  };
  const first = await file(ids[0]!, keys.get(ids[0]!)!, 1);
  await ingest.ingest(first.path, first.name);
  const later = [await file(ids[0]!, keys.get(ids[0]!)!, 2), await file(ids[0]!, keys.get(ids[0]!)!, 3)];
  for (const f of later) await ingest.ingest(f.path, f.name);
  const base = await getRunBase(ids[0]!, '2026-01-01');
  t.same(bases, [null, base!.id, base!.id], 'the first run has no base yet; the later ones are given it');
  t.same(against, [undefined, base!.id, base!.id], 'and arrive encoded against it');
  for (const r of (await store.listRuns(ids[0]!, 1, 10)).data) {
    t.match((await store.getRunLogText(r.id, 1 << 20))!.toString(), /Start execution/, `run ${r.id} reads back`);
  }
});
