import { readdir, utimes } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { capstanError, silentLogger, type SpoolKind } from '@capstan/shared';
import { Outbox } from '@capstan/agent/queue/outbox';
import type { RelayClient } from '@capstan/agent/queue/upload';

function fakeClient(fail: (name: string) => Error | null, sent: string[]): RelayClient {
  return {
    upload: async (_kind: SpoolKind, name: string) => {
      const err = fail(name);
      if (err) throw err;
      sent.push(name);
    },
  } as unknown as RelayClient;
}

async function filled(t: { testdir: () => string }) {
  const dir = t.testdir();
  const box = new Outbox(dir, silentLogger);
  await box.init();
  const base = Date.now() / 1000 - 100;
  const add = async (kind: SpoolKind, name: string, age: number) => {
    await box.add(kind, name, Buffer.from(name));
    await utimes(join(dir, kind, name), base + age, base + age);
  };
  await add('reports', 'r2', 20);
  await add('reports', 'r1', 10);
  await add('inventories', 'i1', 30);
  return { dir, box };
}

t.test('flush sends inventories first, then reports oldest first, and empties the outbox', async (t) => {
  const { box } = await filled(t);
  const sent: string[] = [];
  const r = await box.flush(fakeClient(() => null, sent));
  t.same(sent, ['i1', 'r1', 'r2']);
  t.same(r, { sent: 3, rejected: 0, remaining: 0 });
  t.same(await box.list(), []);
});

t.test('a transient failure stops the flush and keeps the rest in order', async (t) => {
  const { box } = await filled(t);
  const sent: string[] = [];
  const r = await box.flush(fakeClient((n) => (n === 'r1' ? capstanError('ERR_UPSTREAM', 'down') : null), sent));
  t.same(sent, ['i1']);
  t.equal(r.remaining, 2);
  t.match(r.error, { code: 'ERR_UPSTREAM' });
  t.same((await box.list()).map((e) => e.name), ['r1', 'r2']);
});

t.test('a permanent refusal moves that file aside and goes on', async (t) => {
  const { dir, box } = await filled(t);
  const sent: string[] = [];
  const r = await box.flush(fakeClient((n) => (n === 'r1' ? capstanError('ERR_UPSTREAM_REJECTED', '400') : null), sent));
  t.same(sent, ['i1', 'r2']);
  t.equal(r.rejected, 1);
  t.same(await readdir(join(dir, 'rejected')), ['r1']);
});

t.test('caps drop the oldest files beyond the count and anything too old', async (t) => {
  const { box } = await filled(t);
  t.equal(await box.enforceCaps(2, 1e9), 1);
  t.same((await box.list()).map((e) => e.name).sort(), ['i1', 'r2'], 'the oldest (r1) went');
  t.equal(await box.enforceCaps(10, 1000, Date.now() + 10_000_000), 2, 'everything is too old');
});
