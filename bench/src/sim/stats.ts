/**
 * Measurement helpers shared by the simulator and the benchmarks: latency percentiles, and a
 * process's memory and CPU read from /proc (Linux), so the figures come from the kernel's own
 * accounting of the real relay and server processes.
 */
import { readdirSync, readFileSync } from 'node:fs';

export interface Percentiles {
  count: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

/** Nearest-rank percentiles of `samples` (milliseconds), rounded to 0.1. */
export function percentiles(samples: ArrayLike<number>): Percentiles {
  const n = samples.length;
  if (n === 0) return { count: 0, p50: 0, p90: 0, p99: 0, max: 0 };
  const sorted = Float64Array.from(samples).sort();
  const at = (p: number) => Math.round(sorted[Math.min(n - 1, Math.max(0, Math.ceil((p / 100) * n) - 1))]! * 10) / 10;
  return { count: n, p50: at(50), p90: at(90), p99: at(99), max: Math.round(sorted[n - 1]! * 10) / 10 };
}

export interface ProcSample {
  /** Resident set size now, and its peak (VmHWM), in MiB. */
  rssMb: number;
  peakRssMb: number;
  /**
   * The resident part that is the process's own memory (RssAnon), and the part that is mapped
   * files and shared memory (RssFile + RssShmem): SQLite's mmap of the database counts in RSS
   * but is page cache the kernel can take back, not memory the process holds on to.
   */
  anonMb: number;
  fileMb: number;
  /** User + system CPU time consumed since the process started, in seconds. */
  cpuSeconds: number;
}

const CLOCK_TICKS = 100; // USER_HZ on Linux for every architecture Node supports

/** Memory and CPU of a process, or null when it is gone (or /proc is not there). */
export function procSample(pid: number): ProcSample | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
    // /proc/<pid>/stat: the command may hold spaces and parentheses, so split after the last ')'.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15)
    const mb = (k: number) => Math.round(k / 102.4) / 10;
    return {
      rssMb: mb(kb('VmRSS')),
      peakRssMb: mb(kb('VmHWM')),
      anonMb: mb(kb('RssAnon')),
      fileMb: mb(kb('RssFile') + kb('RssShmem')),
      cpuSeconds: Math.round((ticks / CLOCK_TICKS) * 100) / 100,
    };
  } catch {
    return null;
  }
}

/** A process's CPU (seconds) by where it ran: its main thread, every other thread, each in user and kernel mode. */
export interface CpuSplit {
  mainUser: number;
  mainSys: number;
  otherUser: number;
  otherSys: number;
}

/**
 * CPU of a process's threads alive now (/proc/<pid>/task/<tid>/stat), the main thread (tid ==
 * pid) apart: where a program's CPU goes, the event loop or worker threads, and user or kernel
 * (fsync, writes, page faults). Threads that have exited are not counted: sample a program
 * whose threads live as long as it does (the ingest workers, libuv's pool, V8's helpers).
 */
export function cpuSplit(pid: number): CpuSplit | null {
  try {
    const out: CpuSplit = { mainUser: 0, mainSys: 0, otherUser: 0, otherSys: 0 };
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      let stat: string;
      try {
        stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      } catch {
        continue; // exited meanwhile
      }
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const user = Number(fields[11]) / CLOCK_TICKS;
      const sys = Number(fields[12]) / CLOCK_TICKS;
      if (Number(tid) === pid) {
        out.mainUser += user;
        out.mainSys += sys;
      } else {
        out.otherUser += user;
        out.otherSys += sys;
      }
    }
    return out;
  } catch {
    return null;
  }
}

export interface ProcSummary {
  peakRssMb: number;
  /** Largest anonymous (non file-backed) resident memory sampled. */
  peakAnonMb: number;
  rssMb: number;
  cpuSeconds: number;
}

/** Samples a set of named processes and keeps each one's series and peaks. */
export class ProcWatch {
  readonly series: { t: number; name: string; rssMb: number; anonMb: number; cpuSeconds: number }[] = [];
  private readonly peaks = new Map<string, number>();
  private readonly anonPeaks = new Map<string, number>();
  private readonly first = new Map<string, number>();
  private readonly last = new Map<string, ProcSample>();

  constructor(private readonly pids: ReadonlyMap<string, number>, private readonly keepSeries = true) {}

  sample(t: number): Record<string, ProcSample | null> {
    const out: Record<string, ProcSample | null> = {};
    for (const [name, pid] of this.pids) {
      const s = procSample(pid);
      out[name] = s;
      if (!s) continue;
      if (!this.first.has(name)) this.first.set(name, s.cpuSeconds);
      this.last.set(name, s);
      this.peaks.set(name, Math.max(this.peaks.get(name) ?? 0, s.peakRssMb));
      this.anonPeaks.set(name, Math.max(this.anonPeaks.get(name) ?? 0, s.anonMb));
      if (this.keepSeries) this.series.push({ t, name, rssMb: s.rssMb, anonMb: s.anonMb, cpuSeconds: s.cpuSeconds });
    }
    return out;
  }

  /** Peak RSS (VmHWM), the largest anonymous part seen, and CPU seconds since the first sample. */
  summary(): Record<string, ProcSummary> {
    const out: Record<string, ProcSummary> = {};
    for (const [name, s] of this.last) {
      out[name] = {
        peakRssMb: this.peaks.get(name)!,
        peakAnonMb: this.anonPeaks.get(name)!,
        rssMb: s.rssMb,
        cpuSeconds: Math.round((s.cpuSeconds - this.first.get(name)!) * 100) / 100,
      };
    }
    return out;
  }
}
