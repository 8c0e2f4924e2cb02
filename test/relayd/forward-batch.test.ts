/**
 * Run logs go up in batches (`POST /batch/reports`): many files per request, each with its own
 * fate; an upstream that takes no batches gets PUTs; `batch_files = 1` is one PUT per file; and
 * a relay takes a batch from a relay below it as that many PUTs.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { BATCH_CONTENT_TYPE, encodeBatch } from '@capstan/shared';
import { CountingUpstream, runName, sha256, until } from './helpers/upstream.js';
import { put, startTestRelay } from './helpers/relay.js';

const NODE = 'e745a140-40bc-4b86-b6dc-084488fc906b';

async function putMany(url: string, from: number, n: number): Promise<Set<string>> {
  const sent = new Set<string>();
  await Promise.all(Array.from({ length: n }, async (_, k) => {
    const body = `run ${from + k}`;
    const res = await put(url, 'reports', runName(NODE, from + k), body);
    if (res.status !== 201) throw new Error(`PUT answered ${res.status}`);
    sent.add(sha256(body));
  }));
  return sent;
}

t.test('run logs arriving together go up together, each file once', async (t) => {
  // Held until released, so that files pile up behind the first request.
  let hold = true;
  const waiting: Array<() => void> = [];
  const up = await new CountingUpstream(() => (hold ? new Promise<number>((res) => waiting.push(() => res(201))) : 201)).start();
  t.teardown(() => up.stop());
  const r = await startTestRelay(t, { 'upstream.url': up.url, 'upstream.concurrency': 1, 'upstream.batch_files': 16 });
  const sent = await putMany(r.url, 0, 40);
  await until(() => (waiting.length > 0 ? true : undefined), 'a first batch held');
  hold = false;
  waiting.splice(0).forEach((release) => release());
  await until(() => (up.received.length === 40 ? true : undefined), 'all 40 files');
  t.same(new Set(up.received.map((x) => x.sha256)), sent, 'every file arrived');
  t.ok([...up.counts.values()].every((n) => n === 1), 'exactly once');
  t.ok(up.batches.length < 40, `in ${up.batches.length} requests, not 40`);
  t.ok(Math.max(...up.batches) > 1 && Math.max(...up.batches) <= 16, `at most batch_files per request (largest ${Math.max(...up.batches)})`);
  t.equal(up.maxInFlight, 1, 'one request at a time on one connection');
  await until(async () => ((await readdir(join(r.spool, 'incoming', 'reports'))).length === 0 ? true : undefined), 'the spool to empty');
});

t.test('each file of a batch has its own fate', async (t) => {
  let tries = 0;
  const up = await new CountingUpstream((_req, path) => {
    if (path.includes('T00:00:01')) return 400;
    if (path.includes('T00:00:02')) return ++tries <= 2 ? 503 : 201;
    return 201;
  }).start();
  t.teardown(() => up.stop());
  const r = await startTestRelay(t, { 'upstream.url': up.url });
  await putMany(r.url, 1, 3);
  const reason = await until(() => readFile(join(r.spool, 'failed', 'reports', `${runName(NODE, 1)}.reason`), 'utf8').catch(() => undefined), 'the refused file in failed/');
  t.match(reason, /ERR_UPSTREAM_REJECTED: upstream refused the file with 400 ERR_BAD_REQUEST/);
  await until(() => (up.received.length === 2 ? true : undefined), 'the other two, one after its retries');
  t.equal(tries, 3, 'the 503 file was retried alone until taken');
});

t.test('an upstream that takes no batches is sent PUTs', async (t) => {
  const up = await new CountingUpstream(() => 201, { batches: false }).start();
  t.teardown(() => up.stop());
  const r = await startTestRelay(t, { 'upstream.url': up.url });
  const sent = await putMany(r.url, 0, 10);
  await until(() => (up.received.length === 10 ? true : undefined), 'all 10 files');
  t.same(new Set(up.received.map((x) => x.sha256)), sent);
  t.ok(up.received.every((x) => x.path.startsWith('/reports/')), 'by PUT');
  t.same(up.batches, [], 'no batch was taken');
});

// An upstream answering the batch POST with 501 (a plain HTTP or WebDAV server: method not
// implemented) was retried forever as a 5xx, and nothing reached it; 501 means "no batches here".
for (const status of [501, 405]) {
  t.test(`an upstream answering batches with ${status} is sent PUTs`, async (t) => {
    const up = await new CountingUpstream(() => 201, { batches: status }).start();
    t.teardown(() => up.stop());
    const r = await startTestRelay(t, { 'upstream.url': up.url, 'upstream.concurrency': 1 });
    const sent = await putMany(r.url, 0, 12);
    await until(() => (up.received.length === 12 ? true : undefined), `all 12 files despite ${status} to batches`, 15_000);
    t.same(new Set(up.received.map((x) => x.sha256)), sent, 'every file arrived');
    t.ok(up.received.every((x) => x.path.startsWith('/reports/')), 'by PUT');
    t.ok(up.refusedBatches >= 1 && up.refusedBatches <= 2, `batches were given up after ${up.refusedBatches}`);
  });
}

t.test('batch_files = 1 sends one PUT per file', async (t) => {
  const up = await new CountingUpstream().start();
  t.teardown(() => up.stop());
  const r = await startTestRelay(t, { 'upstream.url': up.url, 'upstream.batch_files': 1 });
  await putMany(r.url, 0, 5);
  await until(() => (up.received.length === 5 ? true : undefined), 'all 5 files');
  t.same(up.batches, [], 'no batch');
});

t.test('a relay takes a batch from a relay below it: each file spooled and sent on', async (t) => {
  const up = await new CountingUpstream().start();
  t.teardown(() => up.stop());
  const r = await startTestRelay(t, { 'upstream.url': up.url });
  const files = [
    { name: runName(NODE, 1), body: Buffer.from('one') },
    { name: 'bob.log', body: Buffer.from('not a run log name') },
    { name: runName(NODE, 2), body: Buffer.from('two') },
  ];
  const res = await fetch(`${r.url}/batch/reports`, { method: 'POST', headers: { 'content-type': BATCH_CONTENT_TYPE }, body: encodeBatch(files) });
  t.equal(res.status, 200);
  const answer = await res.json() as { data: { files: Array<{ file: string; status: number; error?: { code: string } }> } };
  t.same(answer.data.files.map((f) => [f.file, f.status, f.error?.code]), [
    [files[0]!.name, 201, undefined], ['bob.log', 400, 'ERR_RUNINFO_NAME'], [files[2]!.name, 201, undefined],
  ]);
  await until(() => (up.received.length === 2 ? true : undefined), 'both good files sent on');
  t.same(up.received.map((x) => x.sha256).sort(), [sha256('one'), sha256('two')].sort());
  const bad = await fetch(`${r.url}/batch/reports`, { method: 'POST', headers: { 'content-type': BATCH_CONTENT_TYPE }, body: Buffer.from([0, 9, 1]) });
  t.same([bad.status, ((await bad.json()) as { error: { code: string } }).error.code], [400, 'ERR_BATCH_FORMAT'], 'a malformed batch is refused whole');
});

t.test('batch memory smaller than one batch is a configuration error, at the relay and the server', async (t) => {
  const { loadRelaydConfig } = await import('@capstan/relayd');
  const { loadServerConfig } = await import('@capstan/server/config');
  const overrides = { 'http.max_batch_size': '32MiB', 'http.max_batch_memory': '16MiB' };
  t.throws(() => loadRelaydConfig({ overrides }), { code: 'ERR_CONFIG', message: 'http.max_batch_memory must be at least http.max_batch_size' });
  t.throws(() => loadServerConfig({ overrides }), { code: 'ERR_CONFIG', message: 'http.max_batch_memory must be at least http.max_batch_size' });
});
