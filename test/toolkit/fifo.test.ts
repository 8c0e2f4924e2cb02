/**
 * The spool processor's queue: first in, first out across its compactions, whatever the mix of
 * adds and takes, checked against an array's own push and shift (a random walk, fixed seed).
 */
import t from 'tap';
import { Fifo } from '@capstan/toolkit/spool/fifo';

t.test('a long queue taken whole, then refilled: the order of the adds', async (t) => {
  const q = new Fifo<number>();
  const n = Fifo.COMPACT_AFTER * 5 + 7;
  for (let i = 0; i < n; i++) q.push(i);
  t.equal(q.length, n);
  const out: number[] = [];
  for (let v = q.shift(); v !== undefined; v = q.shift()) out.push(v);
  t.equal(out.length, n, 'every item taken once');
  t.ok(out.every((v, i) => v === i), 'in the order they were added');
  t.equal(q.length, 0);
  t.equal(q.shift(), undefined, 'empty: nothing to take');
  q.push(-1);
  t.equal(q.shift(), -1, 'usable again once empty');
});

t.test('random adds and takes agree with an array', async (t) => {
  let seed = 0x5eed;
  const next = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32);
  const q = new Fifo<number>();
  const model: number[] = [];
  let counter = 0;
  let mismatches = 0;
  let longest = 0;
  for (let step = 0; step < 200_000; step++) {
    // Phases that grow the queue past several compactions, then drain it most of the way.
    const growing = Math.floor(step / 20_000) % 2 === 0;
    if (next() < (growing ? 0.7 : 0.3)) {
      q.push(counter);
      model.push(counter++);
    } else if (q.shift() !== model.shift()) mismatches++;
    if (q.length !== model.length) mismatches++;
    longest = Math.max(longest, model.length);
  }
  t.equal(mismatches, 0, 'every take and every length as an array gives them');
  t.ok(longest > Fifo.COMPACT_AFTER * 4, `the queue grew past its compactions (${longest} at most)`);
});
