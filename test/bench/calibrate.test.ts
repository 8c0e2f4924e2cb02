/**
 * The fleet run's reading of the machine (bench/lib/calibrate.mjs): the fixed work's time, and
 * the share of the cores busy and stolen by the host between two readings of /proc/stat.
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import t from 'tap';
import { ROOT } from '../helpers/programs.js';

type Times = { total: number; busy: number; steal: number } | null;
const { calibrationMs, cpuTimes, cpuShares } = (await import(pathToFileURL(resolve(ROOT, 'bench/lib/calibrate.mjs')).href)) as {
  calibrationMs: () => number;
  cpuTimes: () => Times;
  cpuShares: (a: Times, b: Times) => { busy_percent: number; steal_percent: number } | null;
};

t.test('busy and stolen shares between two readings', async (t) => {
  const a = { total: 1000, busy: 400, steal: 10 };
  t.same(cpuShares(a, { total: 1200, busy: 550, steal: 20 }), { busy_percent: 75, steal_percent: 5 });
  t.equal(cpuShares(a, a), null, 'no time between them: no figure');
  t.equal(cpuShares(null, a), null, 'a reading missing: no figure');
});

const first = cpuTimes();
t.test('this machine read: its time only grows, and the work takes a positive time', { skip: first === null ? 'no /proc/stat on this system' : false }, async (t) => {
  const a = first!;
  const ms = calibrationMs();
  const b = cpuTimes()!;
  t.ok(b.total > a.total && b.busy >= a.busy && b.steal >= a.steal, 'counters move forward');
  t.ok(ms > 0, `the work took ${ms} ms`);
  const shares = cpuShares(a, b)!;
  t.ok(shares.busy_percent > 0 && shares.busy_percent <= 100, `busy ${shares.busy_percent} % while it ran`);
});
