import { createHash } from 'node:crypto';
import { readdir, readFile, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { capstanError, silentLogger } from '@capstan/shared';
import { Spool, SpoolProcessor, type ProcessedEvent } from '@capstan/toolkit';
import { programDir } from '../helpers/programs.js';

async function newSpool(t: { testdir: () => string; teardown(fn: () => unknown): void }, maxFileBytes = 1024) {
  const spool = new Spool({ root: programDir(t), maxFileBytes });
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
  const spool = new Spool({ root: programDir(t), maxFileBytes: 1024, writerThreads });
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

t.test('writer threads: many bodies at once are all written, a re-sent name never replaces its copy, a failed write leaves nothing', async (t) => {
  const spool = new Spool({ root: programDir(t), maxFileBytes: 1 << 20, maxIncomingBytes: 1 << 30, writerThreads: 2 });
  await spool.init();
  t.teardown(() => spool.close());
  const bodies = Array.from({ length: 200 }, (_, i) => Buffer.alloc(1000 + i, i));
  const got = await Promise.all(bodies.map((b, i) => spool.acceptBuffer('reports', `f${i}.log`, b)));
  for (const [i, a] of got.entries()) t.equal(a.sha256, createHash('sha256').update(bodies[i]!).digest('hex'), `f${i}`);
  t.equal((await spool.list('reports')).length, 200);
  t.equal(spool.usage!.bytes, bodies.reduce((n, b) => n + b.length, 0));
  // Different bytes under a spooled name used to replace the acknowledged file.
  await t.rejects(spool.acceptBuffer('reports', 'f0.log', Buffer.from('again')), { code: 'ERR_SPOOL_CONFLICT', statusCode: 409 });
  t.same(await readFile(join(spool.incomingDir('reports'), 'f0.log')), bodies[0], 'the first copy is kept');
  await spool.acceptBuffer('reports', 'f0.log', bodies[0]!);
  t.equal(spool.usage!.bytes, bodies.reduce((n, b) => n + b.length, 0), 'a re-send of the same bytes is taken, and counted once');
  t.same(await readdir(join(spool.root, 'tmp')), [], 'neither left anything in tmp/');
  // incoming/ gone: the rename fails, the client hears an error, nothing is left in tmp/.
  await rm(spool.incomingDir('inventories'), { recursive: true });
  await t.rejects(spool.acceptBuffer('inventories', 'n_2024-01-01T00:00:00+00:00.json', Buffer.from('{}')), { code: 'ENOENT' });
  t.same(await readdir(join(spool.root, 'tmp')), []);
  // A closed spool's writer starts again on the next write.
  await spool.close();
  t.equal((await spool.acceptBuffer('reports', 'after-close.log', Buffer.from('x'))).bytes, 1);
});

for (const writerThreads of [0, 2]) t.test(`recycling: a removed file is kept in free/ and overwritten by the next upload (writer threads: ${writerThreads})`, async (t) => {
  const root = programDir(t);
  const spool = new Spool({ root, maxFileBytes: 1 << 20, maxIncomingBytes: 1 << 30, writerThreads, recycleFiles: 3, recycleBytes: 1 << 20 });
  await spool.init();
  t.teardown(() => spool.close());
  const big = Buffer.alloc(9000, 'a');
  await spool.acceptBuffer('reports', 'a.log', big);
  const { ino } = await stat(join(spool.incomingDir('reports'), 'a.log'));
  await spool.remove('reports', 'a.log');
  t.same(await spool.list('reports'), []);
  t.equal((await readdir(spool.freeDir)).length, 1, 'kept in free/');
  t.same(spool.recycling, { files: 1, bytes: 9000, reused: 0 });
  t.equal(spool.usage!.bytes, 0, 'no longer counts against the quota');

  // A shorter body reuses the same inode and is cut to its own length: no byte of the old one is left.
  const b = await spool.acceptBuffer('reports', 'b.log', Buffer.from('short body'));
  const st = await stat(b.path);
  t.equal(st.ino, ino, 'same file, overwritten');
  t.equal(await readFile(b.path, 'utf8'), 'short body');
  t.equal(b.sha256, createHash('sha256').update('short body').digest('hex'));
  t.same(spool.recycling, { files: 0, bytes: 0, reused: 1 });
  t.same(await readdir(spool.freeDir), []);

  // A longer body into a reused short file grows it.
  await spool.remove('reports', 'b.log');
  const c = await spool.acceptBuffer('reports', 'c.log', big);
  t.same(await readFile(c.path), big);

  // The pool keeps at most 3 files: the others are unlinked.
  for (let i = 0; i < 5; i++) await spool.acceptBuffer('reports', `n${i}.log`, Buffer.alloc(100 + i, i));
  for (let i = 0; i < 5; i++) await spool.remove('reports', `n${i}.log`);
  await spool.remove('reports', 'c.log');
  t.equal((await readdir(spool.freeDir)).length, 3);
  t.equal(spool.recycling.files, 3);

  // A failed write into a reused file leaves nothing in incoming/, and the file is not handed out again.
  await t.rejects(spool.accept('reports', 'bad.log', [Buffer.from('abc')], 5), { code: 'ERR_BAD_REQUEST' });
  t.same(await spool.list('reports'), []);
  t.equal((await readdir(spool.freeDir)).length, spool.recycling.files);

  // A restart adopts what free/ holds; a file removed behind the spool's back is replaced by a new one.
  await spool.close();
  const again = new Spool({ root, maxFileBytes: 1 << 20, writerThreads, recycleFiles: 3 });
  await again.init();
  t.teardown(() => again.close());
  const left = await readdir(again.freeDir);
  t.equal(again.recycling.files, left.length);
  for (const n of left) await rm(join(again.freeDir, n));
  const d = await again.acceptBuffer('reports', 'd.log', Buffer.from('still written'));
  t.equal(await readFile(d.path, 'utf8'), 'still written');
  t.same(await readdir(join(root, 'tmp')), []);
});

for (const writerThreads of [0, 2]) t.test(`recycling: overlapped uploads of one name: the second is refused, no old bytes in a reused file (writer threads: ${writerThreads})`, async (t) => {
  const spool = new Spool({ root: programDir(t), maxFileBytes: 1 << 20, writerThreads, recycleFiles: 4 });
  await spool.init();
  t.teardown(() => spool.close());
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const long = Buffer.alloc(20_000, 'L');
  async function* slowShort() {
    await gate;
    yield Buffer.from('s');
  }
  const a = spool.accept('reports', 'x.log', slowShort(), 1);
  await t.rejects(spool.acceptBuffer('reports', 'x.log', long), { code: 'ERR_SPOOL_CONFLICT' }, 'an upload of a name being received is refused');
  release();
  await a;
  const inPlace = await readFile(join(spool.incomingDir('reports'), 'x.log'));
  t.equal(inPlace.toString(), 's');
  await spool.remove('reports', 'x.log');
  t.equal(spool.recycling.files, 1);
  t.equal(spool.recycling.bytes, inPlace.length, 'the pool counts the size of the file that was moved');
  const c = await spool.acceptBuffer('reports', 'y.log', Buffer.from('tiny'));
  t.equal(await readFile(c.path, 'utf8'), 'tiny', 'no old bytes left after the new body');
});

t.test('recycling: a symbolic link planted in free/ is removed at start, never written through', async (t) => {
  const root = programDir(t, { 'target.txt': 'keep me' });
  const first = new Spool({ root: join(root, 'spool'), maxFileBytes: 1024, writerThreads: 0 });
  await first.init();
  await first.close();
  const { symlink } = await import('node:fs/promises');
  await symlink(join(root, 'target.txt'), join(first.freeDir, 'planted'));
  const spool = new Spool({ root: join(root, 'spool'), maxFileBytes: 1024, writerThreads: 0 });
  await spool.init();
  t.same(await readdir(spool.freeDir), [], 'the link is gone');
  t.equal(spool.recycling.files, 0);
  await spool.acceptBuffer('reports', 'a.log', Buffer.from('new body'));
  t.equal(await readFile(join(root, 'target.txt'), 'utf8'), 'keep me');
  // A link swapped in for a file already adopted is not followed either: that upload gets a new file.
  for (const writerThreads of [0, 2]) {
    const s2 = new Spool({ root: join(root, `spool${writerThreads}`), maxFileBytes: 1024, writerThreads });
    await s2.init();
    t.teardown(() => s2.close());
    await s2.acceptBuffer('reports', 'b.log', Buffer.from('first'));
    await s2.remove('reports', 'b.log');
    const [kept] = await readdir(s2.freeDir);
    await rm(join(s2.freeDir, kept!));
    await symlink(join(root, 'target.txt'), join(s2.freeDir, kept!));
    const c = await s2.acceptBuffer('reports', 'c.log', Buffer.from('second'));
    t.equal(await readFile(c.path, 'utf8'), 'second', `written to a new file (writer threads: ${writerThreads})`);
    t.equal(await readFile(join(root, 'target.txt'), 'utf8'), 'keep me');
  }
});

t.test('recycling off: free/ is emptied at start and removals unlink', async (t) => {
  const root = programDir(t);
  const first = new Spool({ root, maxFileBytes: 1024, writerThreads: 0 });
  await first.init();
  await first.acceptBuffer('reports', 'a.log', Buffer.from('x'));
  await first.remove('reports', 'a.log');
  t.equal((await readdir(first.freeDir)).length, 1);
  await first.close();
  const spool = new Spool({ root, maxFileBytes: 1024, writerThreads: 0, recycleFiles: 0 });
  await spool.init();
  t.same(await readdir(spool.freeDir), []);
  await spool.acceptBuffer('reports', 'b.log', Buffer.from('y'));
  await spool.remove('reports', 'b.log');
  t.same(await readdir(spool.freeDir), []);
  t.same(await spool.list('reports'), []);
});

t.test('disk space running short: the recycled files are released before an upload is refused', async (t) => {
  const root = programDir(t);
  const spool = new Spool({ root, maxFileBytes: 1 << 20, writerThreads: 0, recycleFiles: 8, recycleBytes: 8 << 20 });
  await spool.init();
  await spool.acceptBuffer('reports', 'a.log', Buffer.alloc(512 * 1024, 1));
  await spool.remove('reports', 'a.log');
  t.equal(spool.recycling.files, 1);
  await spool.close();
  // A reserve no file system can keep: free/ is given up first, then the upload is refused.
  const tight = new Spool({ root, maxFileBytes: 1 << 20, writerThreads: 0, recycleFiles: 8, minFreeBytes: Number.MAX_SAFE_INTEGER });
  await tight.init();
  t.equal(tight.recycling.files, 1, 'adopted at start');
  await t.rejects(tight.acceptBuffer('reports', 'b.log', Buffer.from('x')), { code: 'ERR_SPOOL_FULL' });
  t.equal(tight.recycling.files, 0, 'released');
  t.same(await readdir(tight.freeDir), []);
  t.same(await tight.list('reports'), []);
});

t.test('a minimum free space reserve refuses uploads with ERR_SPOOL_FULL', async (t) => {
  const spool = new Spool({ root: programDir(t), maxFileBytes: 1024, minFreeBytes: Number.MAX_SAFE_INTEGER });
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

t.test('catch-up: the start-up pass takes files oldest first; later passes stat only names not already held', async (t) => {
  const spool = await newSpool(t);
  const dir = spool.incomingDir('reports');
  // Written newest first, so directory order and age disagree.
  for (const [i, name] of ['c.log', 'b.log', 'a.log'].entries()) {
    await writeFile(join(dir, name), 'x');
    const when = new Date(Date.UTC(2026, 0, 1, 0, 0, 10 - i));
    await utimes(join(dir, name), when, when);
  }
  const fresh: string[][] = [];
  const scan = spool.scan.bind(spool);
  spool.scan = async (kind, known) => {
    const got = await scan(kind, known);
    fresh.push(got.fresh);
    return got;
  };
  const started: string[] = [];
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const p = new SpoolProcessor({ kind: 'reports', spool, log: silentLogger, concurrency: 1, catchupIntervalMs: 3_600_000, handle: async (_p, n) => { started.push(n); await gate; } });
  await p.start();
  t.teardown(() => p.stop());
  t.same(fresh[0], ['a.log', 'b.log', 'c.log'], 'the first pass orders every file by age');
  t.equal(p.pending, 3, 'one in flight, two queued');
  await p.catchUp();
  t.same(fresh.at(-1), [], 'a pass over files already held stats none of them');
  await writeFile(join(dir, 'd.log'), 'x');
  await p.catchUp();
  // The watcher may have queued the new file first; either way no held file is stat'd again.
  t.ok(fresh.at(-1)!.every((n) => n === 'd.log'), 'a later pass stats at most the new name');
  t.equal(p.pending, 4);
  release();
  const last = nextEvent(p, 'd.log');
  await last;
  t.same(started, ['a.log', 'b.log', 'c.log', 'd.log'], 'handled oldest first, the new one last');
});

t.test('sweepTmp removes stale partial uploads only', async (t) => {
  const spool = await newSpool(t);
  await writeFile(join(spool.root, 'tmp', 'old.part'), 'x');
  t.equal(await spool.sweepTmp(60_000, Date.now() + 120_000), 1);
  await writeFile(join(spool.root, 'tmp', 'new.part'), 'x');
  t.equal(await spool.sweepTmp(60_000), 0);
});

t.test('failed/ is bounded in files and bytes: the oldest go first, the newest stay', async (t) => {
  // failed/ used to grow without bound until its age-based sweep: anyone able to upload refused
  // files could fill the disk between two sweeps.
  const { utimes } = await import('node:fs/promises');
  const dir = programDir(t);
  const byFiles = new Spool({ root: join(dir, 'a'), maxFileBytes: 1024, failedMaxFiles: 10 });
  await byFiles.init();
  const base = Date.now() / 1000 - 1000;
  for (let i = 0; i < 25; i++) {
    const name = `f${String(i).padStart(2, '0')}.log`;
    await byFiles.acceptBuffer('reports', name, Buffer.from(`body ${i}`));
    // Distinct ages, oldest first, whatever the file system's timestamp granularity.
    await utimes(join(byFiles.incomingDir('reports'), name), base + i, base + i);
    await byFiles.fail('reports', name, 'ERR_TEST: refused');
    t.ok(byFiles.failedUsage.files <= 10, `never more than 10 failed files (${byFiles.failedUsage.files} after ${i + 1})`);
  }
  const left = (await readdir(byFiles.failedDir('reports'))).filter((n) => !n.endsWith('.reason')).sort();
  t.same(left, left.length ? Array.from({ length: left.length }, (_, k) => `f${String(25 - left.length + k).padStart(2, '0')}.log`) : [], 'the newest are kept');
  t.ok(left.includes('f24.log'), 'the last one is kept');
  const reasons = (await readdir(byFiles.failedDir('reports'))).filter((n) => n.endsWith('.reason'));
  t.equal(reasons.length, left.length, 'each removed file took its reason with it');
  t.equal(byFiles.failedUsage.evicted, 25 - left.length);

  const byBytes = new Spool({ root: join(dir, 'b'), maxFileBytes: 4096, failedMaxBytes: 10_000 });
  await byBytes.init();
  for (let i = 0; i < 12; i++) {
    await byBytes.acceptBuffer('inventories', `i${i}.json`, Buffer.alloc(3000, i));
    await utimes(join(byBytes.incomingDir('inventories'), `i${i}.json`), base + i, base + i);
    await byBytes.fail('inventories', `i${i}.json`, 'ERR_TEST: refused');
    t.ok(byBytes.failedUsage.bytes <= 10_000, `bytes bounded (${byBytes.failedUsage.bytes})`);
  }
  t.ok((await readdir(byBytes.failedDir('inventories'))).includes('i11.json'));

  // The bound also holds over what an earlier process left (counted at start).
  const again = new Spool({ root: byFiles.root, maxFileBytes: 1024, failedMaxFiles: 3 });
  await again.init();
  t.ok(again.failedUsage.files <= 3, 'trimmed at start');
  t.ok((await readdir(again.failedDir('reports'))).includes('f24.log'));
});
