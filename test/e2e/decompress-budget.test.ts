/**
 * All decompression in flight at the server stays within one byte budget, whatever arrives. Each
 * file was refused alone past max_decompressed_size, but a flood of small bombs (~2 kB of zstd or
 * gzip each, inflating to the 64 MiB limit) named for an accepted node (node ids are public),
 * by PUT or in relay batches, cost that limit times the files in flight: gigabytes. The server's
 * peak RSS is measured here (VmHWM) under such a flood, and its answers and other work go on.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import t from 'tap';
import { BATCH_CONTENT_TYPE, encodeBatch, zstdCompress } from '@capstan/shared';
import { adminClient, BIN, programDir, registerRelay, startProgram, waitFor, startServer } from '../helpers/programs.js';

async function peakMb(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/^VmHWM:\s+(\d+) kB$/m.exec(status)![1]) / 1024;
}

const LIMIT = 64 * 1024 * 1024;
const BUDGET_MB = 256;

t.test('a flood of compression bombs keeps the server within its decompression budget', { timeout: 300_000, skip: process.platform !== 'linux' && 'needs /proc' }, async (t) => {
  const dir = programDir(t, { 'server.toml': `[processing]\ndecompress_budget = "${BUDGET_MB}MiB"\n` });
  const { server, api } = await startServer(t, join(dir, 'server'), { config: join(dir, 'server.toml'), logLevel: 'error' });
  // An accepted node with a pinned certificate: its run logs are decompressed before they are verified.
  const { node_id: node } = await registerRelay(api, ['--spool-dir', join(dir, 'relay')]);
  // A little past the limit: each is refused as it inflates (ERR_DECOMPRESSED_TOO_LARGE), its whole
  // reservation taken meanwhile, and never parsed (parsing 64 MiB of junk was most of this test's time).
  const zero = Buffer.alloc(LIMIT + 4096);
  const zst = await zstdCompress(zero, 19);
  const gz = gzipSync(zero, { level: 9 });
  t.ok(zst.length < 64 * 1024 && gz.length < 128 * 1024, `bombs of ${zst.length} and ${gz.length} bytes`);
  const before = await peakMb(server.proc.pid!);
  const name = (i: number, ext: string) => `${new Date(Date.now() - 60_000 + i).toISOString().replace(/\.\d{3}Z$/, `.${String(i % 1000).padStart(3, '0')}Z`)}@${node}.log${ext}`;
  // 48 by PUT (some refused 429 by the per-client bound) and 96 in batches, all at once.
  const puts = Array.from({ length: 48 }, (_, i) => fetch(`${server.url}/reports/${encodeURIComponent(name(i, i % 2 ? '.zst' : '.gz'))}`, { method: 'PUT', body: i % 2 ? zst : gz })
    .then(async (r) => { await r.arrayBuffer(); return [r.status]; }));
  const batches = Array.from({ length: 4 }, (_, b) => fetch(`${server.url}/batch/reports`, {
    method: 'POST', headers: { 'content-type': BATCH_CONTENT_TYPE },
    body: encodeBatch(Array.from({ length: 24 }, (_, k) => ({ name: name(100 + b * 24 + k, '.zst'), body: zst }))),
  }).then(async (r) => (r.status === 200 ? ((await r.json()) as { data: { files: Array<{ status: number }> } }).data.files.map((f) => f.status) : [r.status])));
  const statuses = (await Promise.all([...puts, ...batches])).flat();
  t.ok(statuses.every((s) => s === 201 || s === 429 || s === 409), `every upload answered (${[...new Set(statuses)].join(', ')})`);
  const acked = statuses.filter((s) => s === 201).length;
  t.ok(acked >= 24, `${acked} bombs acknowledged`);
  // The API answers meanwhile.
  t.equal((await api('GET', '/api/1/nodes')).status, 200, 'the API answers during the flood');
  // Every acknowledged bomb ends refused in failed/ (none retried forever, none lost).
  const failedDir = join(dir, 'server', 'spool', 'failed', 'reports');
  await waitFor(async () => ((await readdir(failedDir)).filter((n) => !n.endsWith('.reason')).length >= acked ? true : undefined), `all ${acked} bombs in failed/`, 120_000);
  const reasons = await Promise.all((await readdir(failedDir)).filter((n) => n.endsWith('.reason')).map((n) => readFile(join(failedDir, n), 'utf8')));
  t.ok(reasons.every((r) => /ERR_DECOMPRESSED_TOO_LARGE|ERR_SMIME_FORMAT/.test(r)), `each refused (${[...new Set(reasons.map((r) => r.split(' ')[1]))].join(', ')})`);
  const after = await peakMb(server.proc.pid!);
  t.comment(`server peak RSS: ${before.toFixed(0)} MB before the flood, ${after.toFixed(0)} MB after (budget ${BUDGET_MB} MiB)`);
  // Parse and copies come on top of the budget; without it the flood peaked at several GB.
  t.ok(after < before + 3 * BUDGET_MB, `peak RSS ${after.toFixed(0)} MB stays within a few budgets of the start (${before.toFixed(0)} MB)`);
  t.equal((await api('GET', '/api/1/nodes')).status, 200, 'the server is still up');
});
