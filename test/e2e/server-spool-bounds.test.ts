/**
 * What an unauthenticated client can make the server keep on disk. Uploads with a well-formed
 * name are acknowledged and, once the ingest refuses them, kept in <data-dir>/spool/failed/;
 * that directory used to grow for ever (no retention, no bound) and the server kept no free-space
 * reserve. Now failed/ is bounded in files and bytes (the oldest go first), uploads are refused
 * with 507 below spool.min_free_space, and /metrics counts refusals by code.
 */
import { readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { BATCH_CONTENT_TYPE, encodeBatch } from '@capstan/shared';
import { BIN, startProgram, waitFor, programDir, startServer } from '../helpers/programs.js';
import { codeOf, rawHttp } from '../helpers/raw-http.js';

const NODE = 'e745a140-40bc-4b86-b6dc-084488fc906b';
const name = (i: number) => encodeURIComponent(`2026-11-25T10:${String(Math.floor(i / 60)).padStart(2, '0')}:${String(i % 60).padStart(2, '0')}+00:00@${NODE}.log`);
const put = (url: string, path: string, body: string) =>
  rawHttp(url, [`PUT ${path} HTTP/1.1\r\nHost: capstan\r\nConnection: close\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`]);

async function metric(url: string, re: RegExp): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  let sum = 0;
  for (const m of text.matchAll(re)) sum += Number(m[1]);
  return sum;
}

t.test('failed/ stays within spool.failed_max_files; refusals are counted by code', async (t) => {
  const dir = programDir(t, { 'server.toml': '[spool]\nfailed_max_files = 4\n' });
  const { server } = await startServer(t, join(dir, 'data'), { config: join(dir, 'server.toml'), logLevel: 'error' });
  const failedDir = join(dir, 'data', 'spool', 'failed', 'reports');
  const N = 20;
  for (let i = 0; i < N; i++) t.equal((await put(server.url, `/reports/${name(i)}`, `not a signed run log ${i}`)).status, 201);
  await waitFor(async () => ((await metric(server.url, /^capstan_server_failed_files_total\{kind="reports",[^}]*\} (\d+)$/gm)) === N ? true : undefined), `all ${N} refused by the ingest`);
  const kept = (await readdir(failedDir)).filter((n) => !n.endsWith('.reason'));
  t.ok(kept.length <= 4, `failed/ holds ${kept.length} files, at most 4`);
  t.ok(kept.length > 0, 'the newest are kept for an admin to look at');
  t.equal(await metric(server.url, /^capstan_server_spool_failed_files (\d+)$/gm), kept.length, 'gauge of failed files');
  t.equal(await metric(server.url, /^capstan_server_spool_failed_evicted_total (\d+)$/gm), N - kept.length, 'evictions counted');

  // Refusals at the door, by code.
  t.equal(codeOf(await put(server.url, '/reports/toto', 'x')), 'ERR_RUNINFO_NAME');
  t.equal(codeOf(await put(server.url, '/inventories/bob.json', 'x')), 'ERR_INVENTORY_NAME');
  t.equal(codeOf(await put(server.url, `/reports/${name(99)}`, '')), 'ERR_BAD_REQUEST');
  t.equal(await metric(server.url, /^capstan_server_refused_uploads_total\{kind="reports",code="ERR_RUNINFO_NAME"\} (\d+)$/gm), 1);
  t.equal(await metric(server.url, /^capstan_server_refused_uploads_total\{kind="inventories",code="ERR_INVENTORY_NAME"\} (\d+)$/gm), 1);
  t.equal(await metric(server.url, /^capstan_server_refused_uploads_total\{kind="reports",code="ERR_BAD_REQUEST"\} (\d+)$/gm), 1);
});

t.test('below spool.min_free_space uploads are refused with 507, nothing written', async (t) => {
  // A reserve larger than any disk here: every upload would eat into it.
  const dir = programDir(t);
  await writeFile(join(dir, 'server.toml'), '[spool]\nmin_free_space = "1000000GB"\n');
  const { server } = await startServer(t, join(dir, 'data'), { config: join(dir, 'server.toml'), logLevel: 'error' });
  const a = await put(server.url, `/reports/${name(1)}`, 'body');
  t.equal(a.status, 507);
  t.equal(codeOf(a), 'ERR_SPOOL_FULL');
  t.equal(a.headers['retry-after'], '60');
  t.same(await readdir(join(dir, 'data', 'spool', 'incoming', 'reports')), []);
  t.same(await readdir(join(dir, 'data', 'spool', 'tmp')), []);
  t.equal(await metric(server.url, /^capstan_server_refused_uploads_total\{kind="reports",code="ERR_SPOOL_FULL"\} (\d+)$/gm), 1);
  // The same refusal for a file of a relay's batch, counted the same (it used not to be).
  const res = await fetch(`${server.url}/batch/reports`, { method: 'POST', headers: { 'content-type': BATCH_CONTENT_TYPE }, body: encodeBatch([{ name: decodeURIComponent(name(2)), body: Buffer.from('body') }]) });
  const files = ((await res.json()) as { data: { files: Array<{ status: number; error?: { code: string } }> } }).data.files;
  t.same(files.map((f) => [f.status, f.error?.code]), [[507, 'ERR_SPOOL_FULL']], 'a batch file refused with 507 ERR_SPOOL_FULL');
  t.equal(await metric(server.url, /^capstan_server_refused_uploads_total\{kind="reports",code="ERR_SPOOL_FULL"\} (\d+)$/gm), 2, 'and counted');
});
