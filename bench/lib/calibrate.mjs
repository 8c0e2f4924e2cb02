// @ts-check
/**
 * How fast this machine's cores are at the moment, so that runs on different days (hosts of
 * different speed, a neighbour's load on a shared host) can be told apart: the same fixed work
 * on one core, timed, and the CPU time the host took away (steal, from /proc/stat).
 */
import { readFileSync } from 'node:fs';

/**
 * The work: what the programs do most, in JavaScript (no hashing, which a CPU's own instructions
 * speed up on some hosts and not others): 20,000 records made, written as JSON, read back and
 * sorted, ten times.
 */
function work() {
  let x = 88172645463325252n & 0xffffffffn;
  const rand = () => {
    x ^= (x << 13n) & 0xffffffffn;
    x ^= x >> 17n;
    x ^= (x << 5n) & 0xffffffffn;
    return Number(x);
  };
  let check = 0;
  for (let round = 0; round < 10; round++) {
    const rows = Array.from({ length: 20_000 }, (_, i) => ({ id: `node-${i}`, n: rand(), tags: [`t${i % 7}`, `r${i % 13}`], ok: (i & 1) === 0 }));
    const back = /** @type {typeof rows} */ (JSON.parse(JSON.stringify(rows)));
    back.sort((a, b) => a.n - b.n || (a.id < b.id ? -1 : 1));
    check += back[0]?.n ?? 0;
  }
  return check;
}

/** Milliseconds the work takes on this thread: the best of five. */
export function calibrationMs() {
  let best = Infinity;
  for (let round = 0; round < 5; round++) {
    const t0 = performance.now();
    work();
    best = Math.min(best, performance.now() - t0);
  }
  return Math.round(best);
}

/** The machine's CPU time so far from /proc/stat, in seconds: all of it, and what the host stole; null where there is none. */
export function cpuTimes() {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '';
    const f = line.trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal (guest time is inside user)
    const ticks = 100;
    return { total: f.slice(0, 8).reduce((a, b) => a + b, 0) / ticks, busy: (f[0] + f[1] + f[2] + f[5] + f[6]) / ticks, steal: (f[7] ?? 0) / ticks };
  } catch {
    return null;
  }
}

/**
 * `a` to `b` (cpuTimes): the share of the machine's time its cores were busy and the share the
 * host stole, in percent.
 * @param {ReturnType<typeof cpuTimes>} a @param {ReturnType<typeof cpuTimes>} b
 */
export function cpuShares(a, b) {
  if (!a || !b || b.total <= a.total) return null;
  const span = b.total - a.total;
  return { busy_percent: Math.round(((b.busy - a.busy) / span) * 1000) / 10, steal_percent: Math.round(((b.steal - a.steal) / span) * 1000) / 10 };
}
