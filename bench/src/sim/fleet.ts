/**
 * The fleet simulator: N agents, each with its own node id, certificate and key, enrolling and
 * then sending signed run logs to their relays on the agents' 5-minute schedule, compressed in
 * time by a scale factor. What it measures is what a capacity plan needs: the rate the relays and
 * the server sustain, the backlog at every stage (simulator, relay spool, server registry), the
 * latency from PUT to 2xx and from PUT to visible in the registry, errors by code, and the memory
 * and CPU of the processes named with their pids.
 *
 * Every run log is built, signed and compressed before the clock starts (in worker threads), so
 * the simulator's own signing does not steal CPU from the relay and server it measures on the
 * same machine. Policy fetching is not simulated yet.
 */
import { availableParallelism } from 'node:os';
import { Fifo } from '@capstan/toolkit/spool/fifo';
import { adminCall, listNodesByIds, type AdminTarget } from './admin.js';
import { enroll, type EnrollMode, type EnrollmentReport } from './enroll.js';
import type { SimIdentity } from './identities.js';
import { DEFAULT_MIX, type ReportMix } from './runlog.js';
import type { SignJob } from './sign-worker.js';
import { heapMb, relaySpool, serverSpool } from './observe.js';
import { percentiles, ProcWatch, type Percentiles, type ProcSample, type ProcSummary } from './stats.js';
import { Uploader } from './upload.js';
import { runInWorkers } from './workers.js';

export type { EnrollMode } from './enroll.js';

export interface FleetOptions {
  relays: string[];
  /** Relays further up the tree whose spools are sampled too (nothing is sent to them). */
  watchRelays?: string[];
  identities: SimIdentity[];
  /** The agents' schedule (5 minutes), in simulated time. */
  periodMs: number;
  /** Simulated time runs this many times faster than real time. */
  timeScale: number;
  /** Real time during which runs are started. */
  durationMs: number;
  reportsPerRun: number;
  mix?: ReportMix;
  server?: AdminTarget;
  enroll: EnrollMode;
  enrollTimeoutMs: number;
  socketsPerRelay: number;
  maxInFlight: number;
  timeoutMs: number;
  /** A run not started within this of its due time is not sent (that agent is on its next run). */
  maxLagMs: number;
  pids: Map<string, number>;
  sampleMs: number;
  /** 0: do not track visibility in the registry. */
  visibilityPollMs: number;
  /**
   * Nodes whose runs are each watched one by one (GET /api/1/nodes/<id> every probeMs from the
   * 2xx on) for a PUT → visible latency precise to probeMs; the fleet-wide listing is too
   * coarse for that with thousands of nodes. 0: none.
   */
  probeNodes: number;
  probeMs: number;
  drainTimeoutMs: number;
  workers?: number;
  /** Refuse to prepare more than this many bytes of run logs in memory. */
  maxPreparedBytes: number;
  /** Progress lines (stderr in the CLI). */
  progress: (line: string) => void;
  onSample?: (s: FleetSample) => void;
}

export interface FleetSample {
  t: number;
  due: number;
  acked: number;
  failed: number;
  /** Acknowledged per second over the last sample interval. */
  rate: number;
  /** Runs due and not yet acknowledged by a relay (waiting in the simulator or in flight). */
  backlog: number;
  inFlight: number;
  put: Percentiles;
  visible: number | null;
  relaySpool: (number | null)[];
  /** The spools of the watched relays (watchRelays, in their order). */
  watchedSpool: (number | null)[];
  serverSpool: number | null;
  processes: Record<string, ProcSample | null>;
  /** V8 heap in use per relay (in --relay order) and for the server, from their /metrics. */
  heapMb: { relays: (number | null)[]; server: number | null };
}

interface Run {
  node: number;
  relay: number;
  dueMs: number;
  startedAtMs: number;
  run: number;
  name: string;
  body: Buffer | null;
  putAt: number;
  ackAt: number;
  visibleAt: number;
  probe: boolean;
}

export interface FleetReport {
  nodes: number;
  relays: string[];
  periodMs: number;
  timeScale: number;
  realPeriodMs: number;
  durationMs: number;
  reportsPerRun: number;
  avgRunLogBytes: number;
  prepareMs: number;
  enrollment: EnrollmentReport;
  /** skipped: not sent, the simulator being more than maxLagMs behind their due time. */
  runs: { scheduled: number; acked: number; failed: number; skipped: number; errors: Record<string, number> };
  rate: { targetPerSec: number; achievedPerSec: number };
  putLatencyMs: Percentiles;
  /** How late the simulator started PUTs behind schedule (its own backlog). */
  startLagMs: Percentiles;
  maxBacklog: number;
  visibility: {
    visible: number;
    of: number;
    /** From the fleet-wide listing: precise to the listing's interval only. */
    latencyMs: Percentiles;
    /** From the probe nodes: precise to the probe interval. */
    probeLatencyMs: Percentiles;
    /** The probe runs that took longest to show, slowest first: when each was sent (ms from the first run sent) and how long it took. */
    slowestProbes: Array<{ sentMs: number; ms: number }>;
    drainMs: number;
  } | null;
  processes: Record<string, ProcSummary>;
  /**
   * The most run logs each spool held at a sample (incoming/ of the relays sent to, then of the
   * watched ones; the server's): where a backlog waited. Null where no sample could read it.
   */
  deepestSpools: { relays: (number | null)[]; watched: (number | null)[]; server: number | null };
  samples: FleetSample[];
  notes: string[];
}

/** Slowest probe runs listed in the report, to place a latency tail in time. */
const SLOWEST_PROBES = 10;

const SIGN_WORKER = new URL('./sign-worker.js', import.meta.url);

/** The largest of each spool's samples (null: never read). */
function deepest(samples: readonly FleetSample[]): FleetReport['deepestSpools'] {
  const most = (pick: (s: FleetSample) => number | null) => samples.reduce<number | null>((m, s) => {
    const v = pick(s);
    return v === null ? m : Math.max(m ?? 0, v);
  }, null);
  const width = (pick: (s: FleetSample) => readonly unknown[]) => Math.max(0, ...samples.map((s) => pick(s).length));
  return {
    relays: Array.from({ length: width((s) => s.relaySpool) }, (_, i) => most((s) => s.relaySpool[i] ?? null)),
    watched: Array.from({ length: width((s) => s.watchedSpool) }, (_, i) => most((s) => s.watchedSpool[i] ?? null)),
    server: most((s) => s.serverSpool),
  };
}

function countCode(m: Record<string, number>, code: string): void {
  m[code] = (m[code] ?? 0) + 1;
}

/** A node's phase inside the period: spread evenly, like systemd's RandomizedDelaySec across a fleet. */
function phase(index: number, nodes: number, periodMs: number): number {
  return ((index * 0.6180339887498949) % 1) * periodMs * (nodes > 1 ? 1 : 0);
}

export async function runFleet(o: FleetOptions): Promise<FleetReport> {
  const ids = o.identities;
  const n = ids.length;
  const mix = o.mix ?? DEFAULT_MIX;
  const workers = o.workers ?? availableParallelism();
  const realPeriodMs = o.periodMs / o.timeScale;
  const notes = [
    'policy fetching is not simulated (GET /policies is not exercised)',
    `uploads reuse ${o.socketsPerRelay} keep-alive connections per relay; real agents open one per run`,
  ];
  if (!(realPeriodMs >= 1)) throw new RangeError('period / time-scale must be at least 1 ms');
  const uploaders = o.relays.map((r) => new Uploader(r, { sockets: o.socketsPerRelay, timeoutMs: o.timeoutMs }));
  const watch = new ProcWatch(o.pids);
  watch.sample(0);

  try {
    // --- the schedule: every run due inside the duration, in time order ---------------------
    // Run start times are simulated time, ending now: run k of a node is period apart from run k-1,
    // so a node's runs never share a second, whatever the scale.
    const runs: Run[] = [];
    for (let i = 0; i < n; i++) {
      const off = phase(i, n, realPeriodMs);
      for (let k = 0; off + k * realPeriodMs < o.durationMs; k++) {
        runs.push({
          node: i, relay: i % o.relays.length, dueMs: off + k * realPeriodMs, startedAtMs: 0, run: k, name: '', body: null,
          putAt: 0, ackAt: 0, visibleAt: 0, probe: false,
        });
      }
    }
    runs.sort((a, b) => a.dueMs - b.dueMs);
    const simEnd = Math.floor(Date.now() / 1000) * 1000;
    const simSpan = (o.durationMs / realPeriodMs) * o.periodMs;
    for (const r of runs) r.startedAtMs = Math.floor((simEnd - simSpan + r.dueMs * o.timeScale) / 1000) * 1000;

    // --- prepare: sign and compress everything before the clock starts ------------------------
    const estimate = runs.length * o.reportsPerRun * 60; // ~60 compressed bytes per report, measured
    if (estimate > o.maxPreparedBytes) {
      throw new RangeError(`the schedule holds ${runs.length} run logs (~${Math.round(estimate / 2 ** 20)} MiB prepared); `
        + `lower --nodes, --duration or --time-scale, or raise --max-prepared`);
    }
    const prepStart = performance.now();
    o.progress(`preparing ${runs.length} signed run logs of ${o.reportsPerRun} reports for ${n} nodes`);
    let lastPct = -1;
    const prepared = await runInWorkers<SignJob, { name: string; body: ArrayBuffer }>(
      SIGN_WORKER,
      runs.map((r) => ({ kind: 'run', id: ids[r.node]!, startedAtMs: r.startedAtMs, run: r.run, reports: o.reportsPerRun, mix })),
      workers,
      (d) => {
        const pct = Math.floor((d / runs.length) * 10);
        if (pct !== lastPct) o.progress(`  prepared ${d}/${runs.length}`);
        lastPct = pct;
      },
    );
    let bytes = 0;
    runs.forEach((r, k) => {
      r.name = prepared[k]!.name;
      r.body = Buffer.from(prepared[k]!.body);
      bytes += r.body.length;
    });
    const prepareMs = Math.round(performance.now() - prepStart);

    // --- enrollment ---------------------------------------------------------------------------
    const enrollment = await enroll({ ...o, signWorker: SIGN_WORKER, workers }, uploaders);

    // --- the timed schedule -------------------------------------------------------------------
    o.progress(`sending ${runs.length} run logs over ${Math.round(o.durationMs / 1000)} s (${(n / (realPeriodMs / 1000)).toFixed(1)} runs/s scheduled) to ${o.relays.length} relay(s)`);
    const errors: Record<string, number> = {};
    const putMs: number[] = [];
    const lagMs: number[] = [];
    let windowPut: number[] = [];
    let acked = 0;
    let failed = 0;
    let inFlight = 0;
    let dispatched = 0;
    let skipped = 0;
    let maxBacklog = 0;
    const samples: FleetSample[] = [];
    const t0 = performance.now();
    const now = () => performance.now() - t0;
    const waiting = new Fifo<Run>(); // due runs not yet sent, oldest first

    let wake: (() => void) | null = null;
    const kick = () => {
      const w = wake;
      wake = null;
      w?.();
    };
    const send = (r: Run) => {
      inFlight++;
      dispatched++;
      r.putAt = now();
      lagMs.push(Math.max(0, r.putAt - r.dueMs));
      void uploaders[r.relay]!.put('reports', r.name, r.body!).then((res) => {
        inFlight--;
        r.ackAt = now();
        putMs.push(res.ms);
        windowPut.push(res.ms);
        if (res.status >= 200 && res.status < 300) {
          acked++;
          if (r.probe) void watchProbe(r);
        } else {
          failed++;
          countCode(errors, res.code ?? `HTTP_${res.status}`);
        }
        r.body = null; // sent: let the memory go
        kick();
      });
    };

    // Probe nodes: evenly spread over the fleet; each acknowledged run of theirs is watched until
    // the registry shows it (bounded by the drain timeout).
    const probeLatency: number[] = [];
    const probeRuns: Array<{ sentMs: number; ms: number }> = [];
    let probing = 0;
    if (o.server && o.visibilityPollMs > 0 && o.probeNodes > 0) {
      const every = Math.max(1, Math.floor(n / o.probeNodes));
      for (const r of runs) r.probe = r.node % every === 0;
    }
    const watchProbe = async (r: Run) => {
      probing++;
      const id = ids[r.node]!.nodeId;
      const until = performance.now() + o.drainTimeoutMs;
      try {
        while (performance.now() < until) {
          const before = now();
          const res = await adminCall(o.server!, 'GET', `/api/1/nodes/${encodeURIComponent(id)}`).catch(() => null);
          const last = (res?.json as { data?: { last_run_at?: string | null } } | null)?.data?.last_run_at;
          if (last && Date.parse(last) >= r.startedAtMs) {
            const ms = Math.max(0, (before + now()) / 2 - r.putAt);
            probeLatency.push(ms);
            probeRuns.push({ sentMs: Math.round(r.putAt), ms: Math.round(ms) });
            return;
          }
          await new Promise((w) => setTimeout(w, o.probeMs));
        }
      } finally {
        probing--;
      }
    };

    // Samples on their own timer, so a stalled dispatcher still shows up in the series.
    let lastAcked = 0;
    let lastT = 0;
    let visibleCount: number | null = o.server && o.visibilityPollMs > 0 ? 0 : null;
    let sampling = false;
    const sampler = setInterval(() => {
      // A slow status endpoint must not pile samples up on top of each other.
      if (sampling) return;
      sampling = true;
      void (async () => {
        const t = now();
        const due = dispatched + skipped + waiting.length;
        const sample: FleetSample = {
          t: Math.round(t),
          due,
          acked,
          failed,
          rate: Math.round(((acked - lastAcked) / Math.max(1e-3, (t - lastT) / 1000)) * 10) / 10,
          backlog: due - acked - failed - skipped,
          inFlight,
          put: percentiles(windowPut),
          visible: visibleCount,
          relaySpool: await Promise.all(o.relays.map(relaySpool)),
          watchedSpool: await Promise.all((o.watchRelays ?? []).map(relaySpool)),
          serverSpool: o.server ? await serverSpool(o.server) : null,
          processes: watch.sample(Math.round(t)),
          heapMb: { relays: await Promise.all(o.relays.map(heapMb)), server: o.server ? await heapMb(o.server.url) : null },
        };
        windowPut = [];
        lastAcked = sample.acked;
        lastT = t;
        samples.push(sample);
        o.onSample?.(sample);
      })().finally(() => {
        sampling = false;
      });
    }, o.sampleMs);

    // Visibility: a node's last_run_at reaching a run's start means that run is in the registry.
    const byNode = new Map<string, Run[]>();
    for (const r of runs) {
      const id = ids[r.node]!.nodeId;
      const list = byNode.get(id);
      if (list) list.push(r);
      else byNode.set(id, [r]);
    }
    let polling = false;
    const pollVisibility = async () => {
      if (!o.server || polling) return;
      polling = true;
      try {
        const before = now();
        const nodes = await listNodesByIds(o.server, ids.map((x) => x.nodeId));
        const at = (before + now()) / 2;
        let v = 0;
        for (const node of nodes) {
          const list = byNode.get(node.id);
          if (!list || !node.last_run_at) continue;
          const last = Date.parse(node.last_run_at);
          for (const r of list) {
            if (r.ackAt > 0 && r.visibleAt === 0 && r.startedAtMs <= last) r.visibleAt = Math.max(at, r.putAt);
          }
        }
        for (const r of runs) if (r.visibleAt > 0) v++;
        visibleCount = v;
      } catch (err) {
        countCode(errors, `visibility poll: ${(err as Error).message.slice(0, 60)}`);
      } finally {
        polling = false;
      }
    };
    const poller = visibleCount !== null ? setInterval(() => void pollVisibility(), o.visibilityPollMs) : null;

    try {
      // Dispatch: start every run when due, at most maxInFlight at a time; the rest wait (backlog).
      let next = 0;
      while (next < runs.length || waiting.length > 0) {
        const t = now();
        while (next < runs.length && runs[next]!.dueMs <= t) waiting.push(runs[next++]!);
        while (waiting.length > 0 && inFlight < o.maxInFlight) {
          const r = waiting.shift()!;
          if (t - r.dueMs <= o.maxLagMs) {
            send(r);
          } else {
            skipped++;
            r.body = null;
          }
        }
        maxBacklog = Math.max(maxBacklog, waiting.length + inFlight);
        const untilNext = next < runs.length ? runs[next]!.dueMs - now() : 1000;
        if (waiting.length > 0 && inFlight >= o.maxInFlight) {
          await new Promise<void>((r) => (wake = r)); // a slot frees up
        } else if (untilNext > 0) {
          await new Promise<void>((r) => {
            const timer = setTimeout(r, Math.min(untilNext, 50));
            wake = () => {
              clearTimeout(timer);
              r();
            };
          });
        }
      }
      // Wait for the last answers (each is bounded by the upload timeout).
      const until = performance.now() + o.timeoutMs + 1000;
      while (inFlight > 0 && performance.now() < until) await new Promise<void>((r) => (wake = r));
      const sendEnd = now();

      // Drain: until the registry holds every acknowledged run, or the drain timeout.
      let drainMs = 0;
      if (poller) {
        o.progress(`waiting for the registry to hold ${acked} run logs`);
        const drainStart = now();
        const deadline = performance.now() + o.drainTimeoutMs;
        while (performance.now() < deadline) {
          await pollVisibility();
          if ((visibleCount ?? 0) >= acked && probing === 0) break;
          await new Promise((r) => setTimeout(r, o.visibilityPollMs));
        }
        drainMs = Math.round(now() - drainStart);
      }
      clearInterval(sampler);
      if (poller) clearInterval(poller);
      watch.sample(Math.round(now()));

      const visibleRuns = runs.filter((r) => r.visibleAt > 0);
      const activeMs = Math.max(1, Math.min(sendEnd, o.durationMs + realPeriodMs));
      return {
        nodes: n,
        relays: o.relays,
        periodMs: o.periodMs,
        timeScale: o.timeScale,
        realPeriodMs,
        durationMs: o.durationMs,
        reportsPerRun: o.reportsPerRun,
        avgRunLogBytes: Math.round(bytes / Math.max(1, runs.length)),
        prepareMs,
        enrollment,
        runs: { scheduled: runs.length, acked, failed, skipped, errors },
        rate: {
          targetPerSec: Math.round((n / (realPeriodMs / 1000)) * 10) / 10,
          achievedPerSec: Math.round((acked / (activeMs / 1000)) * 10) / 10,
        },
        putLatencyMs: percentiles(putMs),
        startLagMs: percentiles(lagMs),
        maxBacklog,
        visibility: poller
          ? {
            visible: visibleRuns.length,
            of: acked,
            latencyMs: percentiles(visibleRuns.map((r) => r.visibleAt - r.putAt)),
            probeLatencyMs: percentiles(probeLatency),
            slowestProbes: probeRuns.sort((a, b) => b.ms - a.ms).slice(0, SLOWEST_PROBES),
            drainMs,
          }
          : null,
        processes: watch.summary(),
        deepestSpools: deepest(samples),
        samples,
        notes: poller
          ? [...notes, `registry visibility: all nodes listed every ${o.visibilityPollMs} ms (GET /api/1/nodes?id=…, 100 a request); latency precise to ${o.probeMs} ms `
            + `on the ${runs.filter((r) => r.probe).length} runs of ${Math.min(n, o.probeNodes)} probe nodes (GET /api/1/nodes/<id>)`]
          : notes,
      };
    } finally {
      clearInterval(sampler);
      if (poller) clearInterval(poller);
    }
  } finally {
    for (const u of uploaders) u.close();
  }
}
