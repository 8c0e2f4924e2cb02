/**
 * The background sweep of the kept compliance counters (server/src/registry/kept-sweep.ts): once
 * at start, then every interval, with the clock of the compliance settings; a failing sweep is
 * logged and the next one still runs; its step is the store's; stop waits for the sweep in flight; 0 turns it off.
 */
import t from 'tap';
import { KeptSweeper } from '@capstan/server/registry/kept-sweep';
import type { ComplianceClock, KeptSweep } from '@capstan/server/store/index';
import { silentLogger } from '@capstan/shared/log';

const SETTINGS = { runIntervalMs: 300_000, missedRuns: 3, applyingGraceMs: 300_000 };

t.test('sweeps at start and every interval, survives a failure, stops', async (t) => {
  const clocks: ComplianceClock[] = [];
  const steps: Array<number | undefined> = [];
  const warned: unknown[] = [];
  let fail = true;
  let next: () => void = () => undefined;
  const store = {
    async sweepCompliance(clock: ComplianceClock, step?: number): Promise<KeptSweep> {
      clocks.push(clock);
      steps.push(step);
      next();
      if (fail) {
        fail = false;
        throw new Error('database down');
      }
      return { checked: 3, folded: 0, done: true, steps: 1, longest_step_ms: 2 };
    },
  };
  const log = { ...silentLogger, warn: (o: unknown) => { warned.push(o); } };
  const sweeps = (n: number) => new Promise<void>((resolve) => {
    next = () => { if (clocks.length >= n) resolve(); };
    if (clocks.length >= n) resolve();
  });
  const sweeper = new KeptSweeper({ store, settings: SETTINGS, intervalMs: 20, step: 7, log, now: () => new Date('2024-05-01T10:00:00Z') });
  // The sweeper's timer does not hold the process open (unref): this one does, meanwhile.
  const hold = setInterval(() => undefined, 1000);
  t.teardown(() => clearInterval(hold));
  sweeper.start();
  await sweeps(3);
  await sweeper.stop();
  const after = clocks.length;
  t.same(clocks[0], { now_s: Date.parse('2024-05-01T10:00:00Z') / 1000, applying_s: 600, silence_s: 900 }, 'the settings\' clock');
  t.ok(steps.every((s) => s === 7), 'the configured step passed on');
  t.equal(warned.length, 1, 'the failure is logged once');
  t.ok(after >= 3, `swept again after the failure (${after})`);
  await new Promise((r) => setTimeout(r, 60));
  t.equal(clocks.length, after, 'nothing after stop');

  const off = new KeptSweeper({ store, settings: SETTINGS, intervalMs: 0, log });
  off.start();
  await off.stop();
  t.equal(clocks.length, after, '0: never');
});
