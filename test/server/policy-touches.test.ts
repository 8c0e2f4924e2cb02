/**
 * The batches of touched nodes (server/src/policy/touches.ts): every touch is generated, also one
 * that arrives at any point while the last batch is finishing.
 */
import t from 'tap';
import { TouchBatcher } from '@capstan/server/policy/touches';

t.test('a touch arriving as the last batch ends is generated, whatever the microtask it lands in', async (t) => {
  for (let depth = 0; depth < 10; depth++) {
    const batches: string[][] = [];
    let first = true;
    const b: TouchBatcher = new TouchBatcher(async (batch) => {
      batches.push([...batch]);
      if (!first) return;
      first = false;
      // The late touch lands `depth` microtasks after this batch's generation resolves.
      let p = Promise.resolve();
      for (let i = 0; i < depth; i++) p = p.then(() => undefined);
      void p.then(() => b.touch('late'));
    }, 0);
    b.touch('a');
    await b.settled();
    // settled() may return before the late touch lands; it lands within a few microtasks.
    await new Promise((resolve) => setImmediate(resolve));
    await b.settled();
    t.same(batches, [['a'], ['late']], `late touch ${depth} microtasks after the batch`);
  }
});

t.test('touches within the window share one batch; settled() ends the window early', async (t) => {
  const batches: string[][] = [];
  const b = new TouchBatcher(async (batch) => {
    batches.push([...batch].sort());
  }, 60_000);
  b.touch('a');
  await new Promise((resolve) => setImmediate(resolve));
  b.touch('b');
  b.touch('a');
  await b.settled();
  t.same(batches, [['a', 'b']]);
});
