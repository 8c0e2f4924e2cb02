/**
 * Filters and exports under a budget (server/src/api/read-budget.ts): which reads are dear, the
 * places per caller and in all, 429 ERR_READ_BUSY with Retry-After before any work, and places
 * given back when an answer finishes or its client goes away. The hook is driven on a Fastify
 * instance whose route waits for the test; the server's own API is then checked to answer its
 * filtered and CSV reads with the budget installed.
 */
import { request as httpRequest } from 'node:http';
import Fastify from 'fastify';
import t from 'tap';
import { installErrorHandler } from '@capstan/toolkit/http/app';
import { silentLogger } from '@capstan/shared';
import { installReadBudget, isExpensiveRead, ReadBudget } from '@capstan/server/api/read-budget';
import { adminApp } from '../helpers/admin-app.js';

t.test('which reads are dear', async (t) => {
  const req = (method: string, query: Record<string, unknown>, accept?: string) => ({ method, query, headers: accept ? { accept } : {} }) as never;
  t.ok(isExpensiveRead(req('GET', { q: 'os.name = debian' })), 'a filter expression');
  t.ok(isExpensiveRead(req('GET', { format: 'csv' })), 'a CSV export');
  t.ok(isExpensiveRead(req('GET', {}, 'text/csv')), 'CSV by Accept');
  t.notOk(isExpensiveRead(req('GET', { format: 'json' }, 'text/csv')), 'format wins over Accept');
  t.notOk(isExpensiveRead(req('GET', { q: '  ' })), 'an empty q');
  t.notOk(isExpensiveRead(req('GET', { limit: '10' })), 'a page of a list');
  t.notOk(isExpensiveRead(req('POST', { q: 'x' })), 'writes are not reads');
});

t.test('places per caller and in all, given back once', async (t) => {
  const b = new ReadBudget({ perCaller: 2, total: 3 });
  const a1 = b.take('alice');
  const a2 = b.take('alice');
  t.throws(() => b.take('alice'), { code: 'ERR_READ_BUSY', message: /expensive_reads_per_caller 2/ }, 'a third of one caller');
  const b1 = b.take('bob');
  t.throws(() => b.take('carol'), { code: 'ERR_READ_BUSY', message: /expensive_reads_total 3/ }, 'one past the server\'s places');
  a1();
  a1();
  t.equal(b.inProgress, 2, 'a place is given back once, however often its release is called');
  const c1 = b.take('carol');
  for (const r of [a2, b1, c1]) r();
  t.equal(b.inProgress, 0);
  const free = new ReadBudget({ perCaller: 0, total: 0 });
  for (let i = 0; i < 100; i++) free.take('x');
  t.equal(free.inProgress, 100, '0: no limit');
});

t.test('the hook: 429 with Retry-After before the work, places back on finish and on a client gone', async (t) => {
  const app = Fastify();
  installErrorHandler(app, silentLogger);
  app.addHook('onRequest', async (req) => {
    (req as { principal?: unknown }).principal = { name: String(req.headers['x-user']), role: 'viewer' };
  });
  const budget = new ReadBudget({ perCaller: 1, total: 2 });
  installReadBudget(app, budget);
  let started = 0;
  const gates: Array<() => void> = [];
  app.get('/rows', async () => {
    started++;
    await new Promise<void>((r) => gates.push(r));
    return { data: [] };
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const port = (app.server.address() as { port: number }).port;
  const get = (user: string, path: string) => new Promise<{ status: number; body: string; retry?: string; abort: () => void }>((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, headers: { 'x-user': user } }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, body, retry: res.headers['retry-after'] as string | undefined, abort: () => req.destroy() }));
    });
    req.on('error', reject);
    req.end();
  });
  const held = new Promise<void>((r) => { const i = setInterval(() => { if (started === 1) { clearInterval(i); r(); } }, 5); });

  const first = get('alice', '/rows?q=os.name%20%3D%20debian');
  await held;
  const refused = await get('alice', '/rows?format=csv');
  t.equal(refused.status, 429, 'the same caller, a second dear read');
  t.equal(JSON.parse(refused.body).error.code, 'ERR_READ_BUSY');
  t.equal(refused.retry, '2', 'with Retry-After');
  t.equal(started, 1, 'refused before its work started');
  // A plain read of the same caller is not counted: it starts beside the held one.
  const plain = get('alice', '/rows');
  await new Promise<void>((r) => { const i = setInterval(() => { if (started === 2) { clearInterval(i); r(); } }, 5); });
  for (const g of gates.splice(0)) g();
  t.equal((await plain).status, 200, 'a plain read is not counted');
  t.equal((await first).status, 200);
  t.equal(budget.inProgress, 0, 'the place is back once the answer finished');

  // A client that goes away while its read waits gives its place back too.
  const c = httpRequest({ host: '127.0.0.1', port, path: '/rows?q=x', headers: { 'x-user': 'bob' } });
  c.on('error', () => undefined);
  c.end();
  await new Promise<void>((r) => { const i = setInterval(() => { if (budget.inProgress === 1) { clearInterval(i); r(); } }, 5); });
  c.destroy();
  await new Promise<void>((r) => { const i = setInterval(() => { if (budget.inProgress === 0) { clearInterval(i); r(); } }, 5); });
  t.pass('the place of a client gone is back');
  for (const g of gates.splice(0)) g();
});

t.test('the server answers its filtered and CSV reads with the budget installed', async (t) => {
  const { api, send } = await adminApp(t, { overrides: { 'limits.expensive_reads_per_caller': 1, 'limits.expensive_reads_total': 1 } });
  for (let i = 0; i < 3; i++) {
    t.equal((await api('GET', `/api/1/nodes?q=${encodeURIComponent('os.name = debian')}`)).status, 200, `filtered read ${i + 1}, one after another`);
    t.equal((await send('GET', '/api/1/compliance/nodes?format=csv')).status, 200, `CSV export ${i + 1}`);
  }
});
