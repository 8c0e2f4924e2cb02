import t from 'tap';
import { Slots } from '@capstan/toolkit/slots';

/** A promise and the function that settles it. */
function gate(): { done: Promise<void>; open: () => void } {
  let open = () => {};
  const done = new Promise<void>((r) => (open = r));
  return { done, open };
}

const settle = () => new Promise((r) => setImmediate(r));

t.test('a pass asks for the free slots only, and an ended piece of work frees its slot for the next pass', async (t) => {
  const asked: number[] = [];
  const gates = [gate(), gate(), gate()];
  let next = 0;
  const slots: Slots = new Slots({
    slots: 2,
    pass: async (free) => {
      asked.push(free);
      for (let i = 0; i < free && next < gates.length; i++) {
        const g = gates[next++]!;
        slots.run(() => g.done, () => {});
      }
    },
    passFailed: () => {},
    whileBusy: 'rerun',
  });
  slots.kick();
  await settle();
  t.same(asked, [2], 'two slots free at first');
  slots.kick();
  await settle();
  t.same(asked, [2], 'no pass while every slot is taken');
  gates[0]!.open();
  await settle();
  t.same(asked, [2, 1], 'the freed slot is offered at once');
  gates[1]!.open();
  gates[2]!.open();
  await slots.stop();
});

t.test('a kick during a pass passes once more after it (rerun), or waits for the next kick (skip)', async (t) => {
  for (const whileBusy of ['rerun', 'skip'] as const) {
    let passes = 0;
    let running = 0;
    let overlapped = false;
    const hold = gate();
    const slots = new Slots({
      slots: 1,
      pass: async () => {
        passes++;
        running++;
        if (running > 1) overlapped = true;
        if (passes === 1) await hold.done;
        running--;
      },
      passFailed: () => {},
      whileBusy,
    });
    slots.kick();
    slots.kick();
    slots.kick();
    hold.open();
    await settle();
    await settle();
    t.notOk(overlapped, `${whileBusy}: passes never overlap`);
    t.equal(passes, whileBusy === 'rerun' ? 2 : 1, `${whileBusy}: kicks during a pass`);
    await slots.stop();
  }
});

t.test('a failed pass is reported and the next kick passes again', async (t) => {
  const failures: unknown[] = [];
  let passes = 0;
  const slots = new Slots({
    slots: 1,
    pass: async () => {
      passes++;
      if (passes === 1) throw new Error('upstream down');
    },
    passFailed: (err) => failures.push(err),
    whileBusy: 'skip',
  });
  slots.kick();
  await settle();
  slots.kick();
  await settle();
  t.equal(failures.length, 1);
  t.equal(passes, 2);
  await slots.stop();
});

t.test('stop aborts the signal, passes no more, and waits for the work in slots and the work tracked', async (t) => {
  let passes = 0;
  const slots: Slots = new Slots({
    slots: 1,
    pass: async () => {
      passes++;
      slots.run(() => new Promise<void>((r) => slots.signal.addEventListener('abort', () => setTimeout(r, 20))), () => {});
    },
    passFailed: () => {},
    whileBusy: 'rerun',
  });
  let trackedEnded = false;
  slots.track(new Promise<void>((r) => setTimeout(() => {
    trackedEnded = true;
    r();
  }, 30)));
  slots.kick();
  await settle();
  await slots.stop();
  t.ok(slots.signal.aborted);
  t.ok(trackedEnded, 'stop waited for the tracked work');
  t.equal(slots.free, 1, 'the slot was freed');
  slots.kick();
  await settle();
  t.equal(passes, 1, 'no pass after stop');
});
