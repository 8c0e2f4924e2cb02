/**
 * The CPU time of a process of this machine, read from /proc (the benchmarks' measure of the
 * database's backends when the server runs here).
 */
import { readFileSync } from 'node:fs';

/** User + system CPU seconds of process `pid`, or null when it is not (or no longer) a process of this machine. */
export function processCpuSeconds(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // After the command's closing parenthesis (the command may hold one): utime and stime are
    // fields 14 and 15, in clock ticks of 1/100 s on Linux.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return null;
  }
}
