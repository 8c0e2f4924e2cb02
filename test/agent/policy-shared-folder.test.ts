/**
 * The agent's shared-folder download: sends the expected hash, retries a busy or cut-off relay
 * (429/502/503/504) a bounded number of times with jittered backoff that honours Retry-After,
 * and gives up with a coded error.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { fetchShared, retryDelay } from '@capstan/agent/policy/shared-folder';

async function relay(t: { teardown: (fn: () => unknown) => void }, answers: Array<{ status: number; retryAfter?: string; body?: string }>) {
  const seen: string[] = [];
  const server = createServer((req, res) => {
    seen.push(req.url ?? '');
    const a = answers[Math.min(seen.length - 1, answers.length - 1)]!;
    res.writeHead(a.status, a.retryAfter ? { 'retry-after': a.retryAfter } : {}).end(a.body ?? '');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  t.teardown(() => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

t.test('a busy relay is retried with jittered delays, then the file is returned', async (t) => {
  const r = await relay(t, [{ status: 503, retryAfter: '2' }, { status: 429 }, { status: 200, body: 'payload' }]);
  const waits: number[] = [];
  const hash = 'a'.repeat(64);
  const data = await fetchShared(r.url, 'dir/file name', 5000, undefined, { sha256: hash, wait: async (ms) => waits.push(ms), random: () => 0.5, baseDelayMs: 100 });
  t.equal(data.toString(), 'payload');
  t.same(r.seen, Array(3).fill(`/rudder/relay-api/1/shared-folder/dir/file%20name?hash=${hash}`), 'the expected hash goes along');
  t.same(waits, [1500, 150], 'Retry-After 2 s (jittered within its upper half), then exponential from the base');
});

t.test('retries are bounded and end in a coded error; a 404 is not retried', async (t) => {
  const busy = await relay(t, [{ status: 503 }]);
  const waits: number[] = [];
  await t.rejects(fetchShared(busy.url, 'f', 5000, undefined, { attempts: 4, wait: async (ms) => waits.push(ms) }), { code: 'ERR_UPSTREAM', message: /answered 503/ });
  t.equal(busy.seen.length, 4);
  t.equal(waits.length, 3);
  const missing = await relay(t, [{ status: 404 }]);
  await t.rejects(fetchShared(missing.url, 'f', 5000, undefined, { wait: async () => t.fail('no wait') }), { code: 'ERR_NOT_FOUND' });
  t.equal(missing.seen.length, 1);
});

t.test('a relay that drops connections is retried too, and given up on with a coded error', async (t) => {
  let calls = 0;
  const server = createServer((req, res) => {
    // The first two connections are cut before any answer, as a swamped relay does.
    if (++calls <= 2) return req.socket.destroy();
    res.writeHead(200).end('at last');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  t.teardown(() => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const waits: number[] = [];
  const data = await fetchShared(url, 'f', 5000, undefined, { wait: async (ms) => waits.push(ms), random: () => 1, baseDelayMs: 100 });
  t.equal(data.toString(), 'at last');
  t.same(waits, [100, 200], 'exponential backoff between the attempts');
  calls = -100;
  waits.length = 0;
  await t.rejects(fetchShared(url, 'f', 5000, undefined, { attempts: 3, wait: async (ms) => waits.push(ms), baseDelayMs: 100 }), { code: 'ERR_UPSTREAM', message: /unreachable/ });
  t.equal(waits.length, 2, 'bounded: three attempts, two waits');
});

t.test('retry delays: exponential, capped, never below half the ceiling, Retry-After honoured up to the cap', async (t) => {
  const o = (random: number) => ({ baseDelayMs: 1000, maxDelayMs: 15_000, random: () => random });
  t.same([1, 2, 3, 4, 5, 6].map((a) => retryDelay(a, undefined, o(1))), [1000, 2000, 4000, 8000, 15000, 15000]);
  t.same([1, 2, 3].map((a) => retryDelay(a, undefined, o(0))), [500, 1000, 2000]);
  t.equal(retryDelay(1, '60', o(1)), 15_000, 'a long Retry-After is capped');
  t.equal(retryDelay(1, '4', o(0)), 2000);
  t.equal(retryDelay(2, 'Wed, 21 Oct 2015 07:28:00 GMT', o(1)), 2000, 'an HTTP date is ignored');
  const spread = new Set(Array.from({ length: 50 }, () => retryDelay(3, undefined, { baseDelayMs: 1000, maxDelayMs: 15_000, random: Math.random })));
  t.ok(spread.size > 10, 'agents do not retry in lockstep');
});
