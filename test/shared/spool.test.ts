import { createHash } from 'node:crypto';
import { readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { capstanError, silentLogger, Spool, SpoolProcessor, type ProcessedEvent } from '@capstan/shared';

async function newSpool(t: { testdir: () => string }, maxFileBytes = 1024) {
  const spool = new Spool({ root: t.testdir(), maxFileBytes });
  await spool.init();
  return spool;
}

function nextEvent(p: SpoolProcessor, name: string): Promise<ProcessedEvent> {
  return new Promise((res) => {
    const on = (e: ProcessedEvent) => {
      if (e.name === name) {
        p.off('processed', on);
        res(e);
      }
    };
    p.on('processed', on);
  });
}

for (const writerThreads of [2, 0]) t.test(`accept writes the whole body or nothing (writer threads: ${writerThreads})`, async (t) => {
  const spool = new Spool({ root: t.testdir(), maxFileBytes: 1024, writerThreads });
  await spool.init();
  t.teardown(() => spool.close());
  const a = await spool.acceptBuffer('reports', 'a.log', Buffer.from('hello'));
  t.equal(a.sha256, createHash('sha256').update('hello').digest('hex'));
  t.equal(a.bytes, 5);
  t.equal(await readFile(a.path, 'utf8'), 'hello');
  await t.rejects(spool.accept('reports', 'short.log', [Buffer.from('abc')], 5), { code: 'ERR_BAD_REQUEST' });
  await t.rejects(spool.accept('reports', 'long.log', [Buffer.from('abcdef')], 5), { code: 'ERR_BODY_TOO_LARGE' });
  await t.rejects(spool.accept('reports', 'big.log', [Buffer.alloc(10)], 2048), { code: 'ERR_BODY_TOO_LARGE' });
  for (const bad of ['../x', 'a/b', '.hidden', '', 'x.reason', 'a\\b']) {
    await t.rejects(spool.acceptBuffer('reports', bad, Buffer.from('x')), { code: 'ERR_BAD_PATH' }, `refuses ${JSON.stringify(bad)}`);
  }
  t.same(await spool.list('reports'), ['a.log']);
  t.same(await readdir(join(spool.root, 'tmp')), [], 'no partial file left');
});

t.test('writer threads: many bodies at once are all written, a re-sent name replaces its copy, a failed write leaves nothing', async (t) => {
  const spool = new Spool({ root: t.testdir(), maxFileBytes: 1 << 20, maxIncomingBytes: 1 << 30, writerThreads: 2 });
  await spool.init();
  t.teardown(() => spool.close());
  const bodies = Array.from({ length: 200 }, (_, i) => Buffer.alloc(1000 + i, i));
  const got = await Promise.all(bodies.map((b, i) => spool.acceptBuffer('reports', `f${i}.log`, b)));
  for (const [i, a] of got.entries()) t.equal(a.sha256, createHash('sha256').update(bodies[i]!).digest('hex'), `f${i}`);
  t.equal((await spool.list('reports')).length, 200);
  t.equal(spool.usage!.bytes, bodies.reduce((n, b) => n + b.length, 0));
  await spool.acceptBuffer('reports', 'f0.log', Buffer.from('again'));
  t.equal(await readFile(join(spool.incomingDir('reports'), 'f0.log'), 'utf8'), 'again');
  t.equal(spool.usage!.bytes, bodies.reduce((n, b) => n + b.length, 0) - 1000 + 5, 'the replaced copy no longer counts');
  // incoming/ gone: the rename fails, the client hears an error, nothing is left in tmp/.
  await rm(spool.incomingDir('inventories'), { recursive: true });
  await t.rejects(spool.acceptBuffer('inventories', 'n_2024-01-01T00:00:00+00:00.json', Buffer.from('{}')), { code: 'ENOENT' });
  t.same(await readdir(join(spool.root, 'tmp')), []);
  // A closed spool's writer starts again on the next write.
  await spool.close();
  t.equal((await spool.acceptBuffer('reports', 'after-close.log', Buffer.from('x'))).bytes, 1);
});

t.test('a minimum free space reserve refuses uploads with ERR_SPOOL_FULL', async (t) => {
  const spool = new Spool({ root: t.testdir(), maxFileBytes: 1024, minFreeBytes: Number.MAX_SAFE_INTEGER });
  await spool.init();
  await t.rejects(spool.acceptBuffer('reports', 'a.log', Buffer.from('x')), { code: 'ERR_SPOOL_FULL', statusCode: 507 });
});

t.test('processor: done deletes, permanent error fails with a reason, transient retries', async (t) => {
  const spool = await newSpool(t);
  let attempts = 0;
  const p = new SpoolProcessor({
    kind: 'reports',
    spool,
    log: silentLogger,
    retryMinMs: 20,
    retryMaxMs: 40,
    handle: async (_path, name) => {
      if (name.startsWith('bad')) throw capstanError('ERR_SMIME_SIGNATURE', 'signature does not verify');
      if (name.startsWith('flaky') && attempts++ < 2) throw capstanError('ERR_UPSTREAM', 'upstream down');
    },
  });
  await p.start();
  t.teardown(() => p.stop());

  const ok = nextEvent(p, 'good.log');
  await spool.acceptBuffer('reports', 'good.log', Buffer.from('x'));
  t.equal((await ok).outcome, 'done');
  t.same(await spool.list('reports'), []);

  const bad = nextEvent(p, 'bad.log');
  await spool.acceptBuffer('reports', 'bad.log', Buffer.from('x'));
  t.equal((await bad).outcome, 'failed');
  t.equal(await readFile(join(spool.failedDir('reports'), 'bad.log'), 'utf8'), 'x', 'the bytes are kept');
  t.match(await readFile(join(spool.failedDir('reports'), 'bad.log.reason'), 'utf8'), /ERR_SMIME_SIGNATURE: signature does not verify/);

  const outcomes: string[] = [];
  const done = new Promise<void>((res) => {
    p.on('processed', (e: ProcessedEvent) => {
      if (e.name !== 'flaky.log') return;
      outcomes.push(e.outcome);
      if (e.outcome === 'done') res();
    });
  });
  await spool.acceptBuffer('reports', 'flaky.log', Buffer.from('x'));
  await done;
  t.same(outcomes, ['retry', 'retry', 'done'], 'retried with backoff until it went through');
  await new Promise((r) => setImmediate(r));
  t.equal(p.pending, 0, 'nothing left waiting');
});

t.test('files spooled before a restart are processed by the start-up pass', async (t) => {
  const spool = await newSpool(t);
  await writeFile(join(spool.incomingDir('inventories'), 'left-over.json'), '{}');
  const seen: string[] = [];
  const p = new SpoolProcessor({ kind: 'inventories', spool, log: silentLogger, handle: async (_p, n) => void seen.push(n) });
  const ev = nextEvent(p, 'left-over.json');
  await p.start();
  t.teardown(() => p.stop());
  t.equal((await ev).outcome, 'done');
  t.same(seen, ['left-over.json']);
});

t.test('sweepTmp removes stale partial uploads only', async (t) => {
  const spool = await newSpool(t);
  await writeFile(join(spool.root, 'tmp', 'old.part'), 'x');
  t.equal(await spool.sweepTmp(60_000, Date.now() + 120_000), 1);
  await writeFile(join(spool.root, 'tmp', 'new.part'), 'x');
  t.equal(await spool.sweepTmp(60_000), 0);
});
