/**
 * The ingest's worker pool (server/src/ingest/pool.ts): bounded work per worker, every job settled.
 */
import t from 'tap';
import { PrepareWorkerPool } from '@capstan/server/ingest/pool';
import { INGEST_LIMITS } from '../helpers/ingest.js';

const job = (i: number) => ({
  // Not a zstd frame: each job fails in the worker, quickly and with a coded error.
  raw: new Uint8Array(Buffer.from(`not a run log ${i}`)),
  compression: 'zstd' as const,
  nodeId: '11111111-2222-4333-8444-000000000000',
  timestamp: '2026-01-01T12:00:00+00:00',
  certificate: '',
  limits: INGEST_LIMITS,
});

t.test('sizes are positive integers', async (t) => {
  t.throws(() => new PrepareWorkerPool(0), RangeError);
  t.throws(() => new PrepareWorkerPool(1, 0), RangeError);
  t.throws(() => new PrepareWorkerPool(1, 1.5), RangeError);
});

t.test('a burst larger than the workers hold waits its turn and every job settles', async (t) => {
  const pool = new PrepareWorkerPool(1, 3);
  t.teardown(() => pool.close());
  const jobs = Array.from({ length: 30 }, (_, i) => pool.prepare(job(i)));
  t.equal(pool.pending, 30, 'all 30 pending');
  t.equal(pool.held[0]!.jobs, 3, '3 with the worker, the rest queued');
  const settled = await Promise.allSettled(jobs);
  t.equal(settled.filter((s) => s.status === 'rejected').length, 30, 'each refused');
  const codes = new Set(settled.map((s) => (s as PromiseRejectedResult).reason?.code));
  t.equal(codes.size, 1, 'with one coded error', { codes: [...codes] });
  t.match([...codes][0], /^ERR_/);
  t.equal(pool.pending, 0, 'nothing left outstanding');
});

t.test('what a worker holds is bounded in bytes beyond two jobs', async (t) => {
  const size = job(0).raw.byteLength;
  // Room for 64 jobs, but bytes for three of these only.
  const pool = new PrepareWorkerPool(2, 64, 3 * size);
  t.teardown(() => pool.close());
  const jobs = Array.from({ length: 20 }, (_, i) => pool.prepare(job(i % 10)));
  t.same(pool.held, [{ jobs: 3, bytes: 3 * size }, { jobs: 3, bytes: 3 * size }], 'three each, by bytes');
  await Promise.allSettled(jobs);
  t.same(pool.held, [{ jobs: 0, bytes: 0 }, { jobs: 0, bytes: 0 }], 'nothing held once all are answered');

  // A run log larger than the bound still goes, two at a time per worker.
  const big = new PrepareWorkerPool(1, 64, 1);
  t.teardown(() => big.close());
  const more = Array.from({ length: 5 }, (_, i) => big.prepare(job(i)));
  t.equal(big.held[0]!.jobs, 2);
  t.equal((await Promise.allSettled(more)).length, 5);
});

t.test('a closed pool refuses new jobs with a transient error', async (t) => {
  const pool = new PrepareWorkerPool(1, 64);
  await pool.close();
  await t.rejects(pool.prepare(job(0)), { code: 'ERR_INTERNAL', transient: true });
});
