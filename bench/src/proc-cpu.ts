/**
 * The CPU time of a process of this machine, read from /proc (the benchmarks' measure of the
 * database's backends when the server runs here).
 */
import { readFileSync } from 'node:fs';

/** User + system CPU seconds of process `pid` (utime and stime, fields 14 and 15), or null when it is not (or no longer) a process of this machine. */
export function processCpuSeconds(pid: number): number | null {
  const f = statFields(pid);
  return f ? (Number(f[11]) + Number(f[12])) / 100 : null;
}

/**
 * The fields of /proc/<pid>/stat after the command's closing parenthesis (the command may hold
 * one), from the state on: times are in clock ticks of 1/100 s on Linux. Null when gone.
 */
function statFields(pid: number): string[] | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

/** The parent of process `pid`, or null. */
export function parentPid(pid: number): number | null {
  const f = statFields(pid);
  return f ? Number(f[1]) : null;
}

/**
 * The CPU seconds of the children of `pid` that have ended and been waited for (cutime +
 * cstime, fields 16 and 17): for PostgreSQL's postmaster, every backend that has closed.
 */
export function endedChildrenCpuSeconds(pid: number): number | null {
  const f = statFields(pid);
  return f ? (Number(f[13]) + Number(f[14])) / 100 : null;
}

/**
 * One reading of a set of processes that come and go (a pool's database backends): the live
 * ones by pid, and what their parent has collected from the ones that ended.
 */
export interface ProcessSetSample {
  live: Map<number, number>;
  ended: number;
}

/**
 * CPU seconds between two readings. A process started meanwhile counts from zero; one that ended
 * meanwhile counts through its parent: what the parent collected meanwhile, less what that
 * process had used at the first reading. Processes of the same parent outside the set that end
 * meanwhile are counted too (for the postmaster: other clients' backends closed in the window).
 */
export function processSetDelta(a: ProcessSetSample, b: ProcessSetSample): number {
  let s = b.ended - a.ended;
  for (const [pid, at] of a.live) if (!b.live.has(pid)) s -= at;
  for (const [pid, at] of b.live) s += at - (a.live.get(pid) ?? 0);
  return s;
}
