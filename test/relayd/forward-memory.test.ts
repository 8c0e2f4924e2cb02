/**
 * Bounded memory on the relay's upload path: bodies kept in memory for the forwarder are bounded
 * across all uploads in progress (past the bound an upload is only written, and its forward reads
 * the file), and a kept body is the bytes written, durable before the caller hears of it.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { Spool } from '@capstan/toolkit';
import { programDir } from '../helpers/programs.js';

/** A body that yields its first half, then waits for `release` before the rest. */
function gated(data: Buffer): { body: AsyncIterable<Buffer>; release: () => void } {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  return {
    release,
    body: (async function* () {
      yield data.subarray(0, data.length / 2);
      await gate;
      yield data.subarray(data.length / 2);
    })(),
  };
}

t.test('kept bodies are bounded across concurrent uploads; past the bound a body is only written', async (t) => {
  const spool = new Spool({ root: programDir(t), maxFileBytes: 1 << 20, maxKeptBytes: 100 });
  await spool.init();
  t.teardown(() => spool.close());
  const a = gated(Buffer.alloc(80, 'a'));
  const b = gated(Buffer.alloc(80, 'b'));
  const seen: string[] = [];
  const pa = spool.accept('reports', 'a.log', a.body, 80, { keepBytes: 1000, onWritten: () => seen.push('a') });
  const pb = spool.accept('reports', 'b.log', b.body, 80, { keepBytes: 1000, onWritten: () => seen.push('b') });
  a.release();
  b.release();
  const [ra, rb] = await Promise.all([pa, pb]);
  t.same(ra.data, Buffer.alloc(80, 'a'), 'the first upload keeps its body');
  t.equal(rb.data, undefined, 'the second would go over the bound: not kept');
  t.same(seen, ['a']);
  t.same(await readFile(join(spool.incomingDir('reports'), 'b.log')), Buffer.alloc(80, 'b'), 'but written whole');

  // Once the first is done its share is free again.
  const rc = await spool.accept('reports', 'c.log', [Buffer.alloc(80, 'c')], 80, { keepBytes: 1000 });
  t.same(rc.data, Buffer.alloc(80, 'c'));
});

t.test('a body in several chunks is kept as one buffer equal to the file', async (t) => {
  const spool = new Spool({ root: programDir(t), maxFileBytes: 1 << 20 });
  await spool.init();
  t.teardown(() => spool.close());
  const chunks = [Buffer.from('one '), Buffer.from('two '), Buffer.from('three')];
  const r = await spool.accept('reports', 'x.log', chunks, 13, { keepBytes: 1000 });
  t.same(r.data, await readFile(r.path));
  const single = await spool.accept('reports', 'y.log', [Buffer.from('only')], 4, { keepBytes: 1000 });
  t.same(single.data, Buffer.from('only'));
});
