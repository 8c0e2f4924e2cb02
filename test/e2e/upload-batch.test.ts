/**
 * `POST /batch/<kind>` at the real server: each file answered as its own PUT would be, run logs
 * stored before the answer (the commit is the 2xx), refused ones kept in failed/ with their
 * reason, and a batch that is itself wrong refused whole with a code.
 */
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import {
  BATCH_CONTENT_TYPE, compressSync, createNodeIdentity, encodeBatch, formatReport, inventoryFileName, runLogFileName, signSmime, type NodeIdentity,
} from '@capstan/shared';
import { adminClient, BIN, programDir, startProgram, waitFor } from '../helpers/programs.js';

const NODE = 'batch-node-1';
const node = createNodeIdentity(NODE, { bits: 1024 });
const impostor = createNodeIdentity(NODE, { bits: 1024 });

function runLog(id: NodeIdentity, second: number): { name: string; body: Buffer } {
  const start = new Date(Date.UTC(2026, 0, 1, 12, 0, second));
  const stamp = `${start.toISOString().slice(0, 19)}+00:00`;
  const line = (type: string, component: string, key: string, msg: string) => formatReport({
    policy: 'Common', event_type: type, rule_id: 'r1', directive_id: 'd1', report_id: '0', component, key_value: key, msg,
    node_id: NODE, start_datetime: stamp, execution_datetime: stamp,
  });
  const text = [line('control', 'start', 'cfg1', 'Start execution'), line('result_success', 'File', '/etc/motd', 'ok'), line('control', 'end', 'cfg1', 'End execution')].join('\n') + '\n';
  return { name: runLogFileName(NODE, start, 'zstd'), body: compressSync(signSmime(Buffer.from(text), id), 'zstd') };
}

async function post(url: string, kind: string, body: Buffer, headers: Record<string, string> = {}) {
  const res = await fetch(`${url}/batch/${kind}`, { method: 'POST', headers: { 'content-type': BATCH_CONTENT_TYPE, ...headers }, body });
  return { status: res.status, json: await res.json() as any };
}

async function server(t: Test, config = '') {
  const dir = programDir(t);
  await writeFile(join(dir, 'server.toml'), config);
  const s = await startProgram(BIN.server, ['serve', '--config', join(dir, 'server.toml'), '--listen', '127.0.0.1:0', '--data-dir', join(dir, 'data'), '--log-level', 'warn']);
  t.teardown(() => s.stop());
  const api = adminClient(s.url, (await readFile(join(dir, 'data', 'admin.token'), 'utf8')).trim());
  const created = await api('POST', '/api/1/nodes', { id: NODE, hostname: 'batch1', certificate: node.certPem });
  t.equal(created.status, 201, 'node registered with its certificate');
  return { url: s.url, api, dir: join(dir, 'data') };
}

t.test('each file is answered as its PUT would be; run logs are stored before the answer', async (t) => {
  const { url, api, dir } = await server(t);
  const a = runLog(node, 1);
  const b = runLog(node, 2);
  const forged = runLog(impostor, 3);
  const files = [a, { name: 'not-a-run-log.txt', body: Buffer.from('x') }, b, forged, { ...runLog(node, 4), body: Buffer.alloc(0) }];
  const r = await post(url, 'reports', encodeBatch(files));
  t.equal(r.status, 200);
  const results = r.json.data.files as Array<{ file: string; status: number; error?: { code: string }; refused?: { code: string } }>;
  t.same(results.map((x) => x.file), files.map((f) => f.name), 'one result per file, in order');
  t.same(results.map((x) => x.status), [201, 400, 201, 201, 400]);
  t.equal(results[1]!.error?.code, 'ERR_RUNINFO_NAME', 'a name no PUT would take');
  t.equal(results[4]!.error?.code, 'ERR_BAD_REQUEST', 'an empty body');
  t.match(results[3]!.refused?.code, /^ERR_SMIME_/, 'a forged signature: taken, and refused for good at the root');
  // Stored when answered: no waiting for a spool to be drained.
  const runs = await api('GET', `/api/1/nodes/${NODE}/runs`);
  t.equal(runs.json.total, 2, 'both good runs are in the registry as the answer arrives');
  const failed = await readdir(join(dir, 'spool', 'failed', 'reports'));
  t.ok(failed.includes(forged.name), 'the forged run log is kept in failed/');
  t.match(await readFile(join(dir, 'spool', 'failed', 'reports', `${forged.name}.reason`), 'utf8'), /ERR_SMIME_/, 'with the reason');
  t.same(await readFile(join(dir, 'spool', 'failed', 'reports', forged.name)), forged.body, 'byte for byte');

  const again = await post(url, 'reports', encodeBatch([a, b]));
  t.same(again.json.data.files.map((x: { status: number }) => x.status), [201, 201], 'sent again (a relay that did not hear the answer): taken, stored once');
  t.equal((await api('GET', `/api/1/nodes/${NODE}/runs`)).json.total, 2);
});

t.test('a batch that is itself wrong is refused whole, with a code', async (t) => {
  const { url } = await server(t, '[http]\nmax_batch_files = 3\nmax_batch_size = "4KiB"\nmax_batch_memory = "4KiB"\n');
  const one = encodeBatch([runLog(node, 1)]);
  const bad = (await post(url, 'reports', Buffer.concat([one, Buffer.from([0, 5, 65])])));
  t.equal(bad.status, 400);
  t.equal(bad.json.error.code, 'ERR_BATCH_FORMAT', 'a truncated frame');
  const many = await post(url, 'reports', encodeBatch(Array.from({ length: 4 }, (_, i) => runLog(node, 10 + i))));
  t.same([many.status, many.json.error.code], [413, 'ERR_BATCH_TOO_LARGE'], 'more files than max_batch_files');
  const big = await post(url, 'reports', encodeBatch([{ name: runLog(node, 20).name, body: Buffer.alloc(5000) }]));
  t.same([big.status, big.json.error.code], [413, 'ERR_BATCH_TOO_LARGE'], 'more bytes than max_batch_size');
  const type = await post(url, 'reports', one, { 'content-type': 'application/octet-stream' });
  t.same([type.status, type.json.error.code], [415, 'ERR_UNSUPPORTED_MEDIA'], 'another media type');
  const kind = await post(url, 'secrets', one);
  t.same([kind.status, kind.json.error.code], [404, 'ERR_NOT_FOUND'], 'no such kind');
  const ok = await post(url, 'reports', one);
  t.equal(ok.status, 200, 'and the server still takes a good one');

  // Two batches at once that do not fit in max_batch_memory together: the second waits its turn.
  const half = encodeBatch([{ name: runLog(node, 30).name, body: Buffer.alloc(2500) }]);
  let finish!: () => void;
  const released = new Promise<void>((resolve) => (finish = resolve));
  const slow = new Promise<number>((resolve, reject) => {
    const req = request(`${url}/batch/reports`, { method: 'POST', headers: { 'content-type': BATCH_CONTENT_TYPE, 'content-length': half.length } }, (res) => {
      res.resume();
      resolve(res.statusCode!);
    });
    req.on('error', reject);
    req.write(half.subarray(0, 10)); // held, unfinished, while the second comes
    void released.then(() => req.end(half.subarray(10)));
  });
  // Until the server has the first one's head, the second may still be taken: ask until it is not.
  const busy = await waitFor(async () => {
    const r = await post(url, 'reports', encodeBatch([{ name: runLog(node, 31).name, body: Buffer.alloc(2500) }]));
    return r.status === 503 ? r : undefined;
  }, 'a batch refused while another holds the memory');
  t.same(busy.json.error.code, 'ERR_BUSY', 'past max_batch_memory: come back later');
  finish();
  t.equal(await slow, 200, 'the first is taken');
});

t.test('past max_in_memory run logs are spooled first and ingested from incoming/; inventories are spooled', async (t) => {
  const { url, api } = await server(t, '[processing]\nmax_in_memory = 0\n');
  const r = await post(url, 'reports', encodeBatch([runLog(node, 1)]));
  t.same(r.json.data.files.map((x: { status: number }) => x.status), [201]);
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${NODE}/runs`)).json.total === 1 ? true : undefined), 'the spooled run');
  const other = createNodeIdentity('batch-node-2', { bits: 1024 });
  const inv = {
    node_id: 'batch-node-2', hostname: 'batch2', certificate: other.certPem, agent_version: '0.1.0', policy_server: 'root',
    os: { name: 'debian', version: '12', kernel: '6.1', arch: 'x86_64' },
  };
  const name = inventoryFileName('batch-node-2', new Date(), 'zstd');
  const i = await post(url, 'inventories', encodeBatch([{ name, body: compressSync(signSmime(Buffer.from(JSON.stringify(inv)), other), 'zstd') }]));
  t.same(i.json.data.files.map((x: { status: number }) => x.status), [201]);
  const pending = await waitFor(async () => {
    const n = await api('GET', '/api/1/nodes/batch-node-2');
    return n.status === 200 ? n.json.data : undefined;
  }, 'the inventory');
  t.equal(pending.accepted, 'pending', 'an inventory from a batch registers its node as a PUT does');
});
