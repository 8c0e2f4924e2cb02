#!/usr/bin/env node
/**
 * capstan-sim: plays a fleet of agents against one or more relays and reports what the relays and
 * the server sustained. Progress goes to stderr; the report to stdout (a table, or JSON with
 * --json). Exit codes: 0 done (even when uploads failed: that is a finding, in the report),
 * 1 crash, 2 bad arguments or an impossible schedule.
 *
 *   capstan-sim --relay http://127.0.0.1:3030 --nodes 10000 --time-scale 20 --duration 2m \
 *     --server http://127.0.0.1:3031 --token-file /var/lib/capstan/server/admin.token \
 *     --pid relay=$(pidof …) --pid server=…
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { parseDuration } from '@capstan/shared/config';
import { CAPSTAN_VERSION, EXIT_CONFIG, EXIT_CRASH } from '@capstan/shared/protocol';
import { loadIdentities, MAX_IDENTITIES } from './identities.js';
import { runFleet, type EnrollMode, type FleetReport, type FleetSample } from './fleet.js';

function int(min: number, max: number) {
  return (v: string): number => {
    if (!/^\d+$/.test(v) || Number(v) < min || Number(v) > max) throw new InvalidArgumentError(`must be an integer from ${min} to ${max}`);
    return Number(v);
  };
}

function duration(min: number) {
  return (v: string): number => {
    const ms = parseDuration(v);
    if (ms === null || ms < min) throw new InvalidArgumentError(`must be a duration of at least ${min} ms (e.g. 30s, 5m)`);
    return ms;
  };
}

function positive(v: string): number {
  const x = Number(v);
  if (!Number.isFinite(x) || x <= 0 || x > 1_000_000) throw new InvalidArgumentError('must be a number above 0');
  return x;
}

function collect<T>(parse: (v: string) => T) {
  return (v: string, prev: T[] | undefined): T[] => [...(prev ?? []), parse(v)];
}

function url(v: string): string {
  try {
    const u = new URL(v);
    if (u.protocol !== 'http:') throw new Error();
    return u.toString().replace(/\/+$/, '');
  } catch {
    throw new InvalidArgumentError('must be an http:// URL');
  }
}

function namedPid(v: string): [string, number] {
  const m = /^([A-Za-z0-9_.-]{1,32})=(\d{1,9})$/.exec(v);
  if (!m) throw new InvalidArgumentError('must be name=pid, e.g. relay=1234');
  return [m[1]!, Number(m[2])];
}

interface Flags {
  relay?: string[];
  watchRelay?: string[];
  nodes: number;
  period: number;
  timeScale: number;
  duration: number;
  reports: number;
  server?: string;
  token?: string;
  tokenFile?: string;
  enroll: EnrollMode;
  enrollTimeout: number;
  seed: string;
  cacheDir: string;
  keys: number;
  sockets: number;
  maxInFlight: number;
  timeout: number;
  pid?: [string, number][];
  sample: number;
  visibilityPoll?: number;
  maxLag?: number;
  drainTimeout: number;
  probeNodes: number;
  probeInterval: number;
  workers?: number;
  maxPrepared: number;
  json?: boolean;
  out?: string;
}

const mb = (x: number | null | undefined) => (x === null || x === undefined ? '-' : `${x}`);

function sampleLine(s: FleetSample): string {
  const procs = Object.entries(s.processes).map(([k, p]) => `${k} ${p ? `${p.rssMb}MB (anon ${p.anonMb})` : 'gone'}`).join(' ');
  const heaps = [...s.heapMb.relays.map((h, i) => [`relay${s.heapMb.relays.length > 1 ? i : ''}`, h] as const), ['server', s.heapMb.server] as const]
    .filter(([, h]) => h !== null).map(([k, h]) => `${k} ${h}MB`).join(' ');
  return `t=${(s.t / 1000).toFixed(0)}s acked=${s.acked} rate=${s.rate}/s backlog=${s.backlog} failed=${s.failed} `
    + `put p50/p99=${s.put.p50}/${s.put.p99}ms relay-spool=${s.relaySpool.map(mb).join(',')}`
    + `${s.watchedSpool.length ? ` upstream-spool=${s.watchedSpool.map(mb).join(',')}` : ''} server-spool=${mb(s.serverSpool)}`
    + `${s.visible !== null ? ` visible=${s.visible}` : ''}${procs ? ` rss: ${procs}` : ''}${heaps ? ` heap: ${heaps}` : ''}`;
}

function table(r: FleetReport): string {
  const rows: [string, string][] = [
    ['nodes', `${r.nodes} on ${r.relays.length} relay(s)`],
    ['schedule', `every ${r.periodMs / 1000} s simulated, ×${r.timeScale} → every ${(r.realPeriodMs / 1000).toFixed(2)} s real, for ${r.durationMs / 1000} s`],
    ['run log', `${r.reportsPerRun} reports, ${r.avgRunLogBytes} bytes signed+compressed (prepared in ${r.prepareMs} ms)`],
    ['enrollment', `${r.enrollment.mode}: ${r.enrollment.inventories} inventories, ${r.enrollment.accepted} accepted in ${r.enrollment.ms} ms${r.enrollment.prepare_ms !== undefined ? ` (signed before in ${r.enrollment.prepare_ms} ms)` : ''}${r.enrollment.note ? ` (${r.enrollment.note})` : ''}`],
    ['run logs', `${r.runs.acked} acknowledged, ${r.runs.failed} failed, ${r.runs.skipped} not sent (simulator behind) of ${r.runs.scheduled}`],
    ['rate', `${r.rate.achievedPerSec}/s achieved, ${r.rate.targetPerSec}/s scheduled`],
    ['PUT → 2xx', `p50 ${r.putLatencyMs.p50} ms, p90 ${r.putLatencyMs.p90} ms, p99 ${r.putLatencyMs.p99} ms, max ${r.putLatencyMs.max} ms`],
    ['simulator lag', `p50 ${r.startLagMs.p50} ms, p99 ${r.startLagMs.p99} ms; max backlog ${r.maxBacklog}`],
  ];
  if (r.visibility) {
    const v = r.visibility;
    const pct = (p: typeof v.latencyMs) => `p50 ${p.p50} ms, p90 ${p.p90} ms, p99 ${p.p99} ms, max ${p.max} ms`;
    rows.push(['visible', `${v.visible}/${v.of} in the registry (drain after the last PUT ${v.drainMs} ms)`]);
    if (v.probeLatencyMs.count > 0) rows.push(['PUT → visible', `${pct(v.probeLatencyMs)} (${v.probeLatencyMs.count} probe runs)`]);
    rows.push(['PUT → listed', `${pct(v.latencyMs)} (fleet-wide listing, coarse)`]);
  }
  for (const [name, p] of Object.entries(r.processes)) {
    rows.push([name, `peak RSS ${p.peakRssMb} MB (anonymous at most ${p.peakAnonMb} MB; the rest is mapped files), CPU ${p.cpuSeconds} s`]);
  }
  const errs = { ...r.enrollment.errors, ...r.runs.errors };
  if (Object.keys(errs).length > 0) rows.push(['errors', Object.entries(errs).map(([k, v]) => `${k} ×${v}`).join(', ')]);
  for (const n of r.notes) rows.push(['note', n]);
  const w = Math.max(...rows.map(([k]) => k.length));
  return rows.map(([k, v]) => `${k.padEnd(w)}  ${v}`).join('\n');
}

const program = new Command('capstan-sim')
  .description('Simulate a fleet of Capstan agents against relays and report the rate, backlog, latency and memory')
  .version(CAPSTAN_VERSION, '-V, --version')
  .exitOverride()
  .option('--relay <url>', 'relay to send to (repeat for several; nodes are spread evenly)', collect(url))
  .option('--watch-relay <url>', 'a relay further up the tree whose spool is sampled too (repeat for several)', collect(url))
  .option('--nodes <n>', 'simulated agents', int(1, MAX_IDENTITIES), 10_000)
  .addOption(new Option('--period <duration>', "the agents' run interval, simulated").argParser(duration(2000)).default(300_000, '5m'))
  .option('--time-scale <factor>', 'simulated time runs this much faster than real time', positive, 10)
  .addOption(new Option('--duration <duration>', 'real time during which runs are started').argParser(duration(1)).default(60_000, '60s'))
  .option('--reports <n>', 'reports per run log', int(3, 100_000), 100)
  .option('--server <url>', 'server admin API, to accept nodes and watch the registry', url)
  .option('--token <token>', 'admin token (or --token-file)')
  .option('--token-file <file>', "file holding the admin token (the server's <data-dir>/admin.token)")
  .addOption(new Option('--enroll <mode>', 'inventory: signed inventories, then accept via the API; register: POST /api/1/nodes; none').choices(['inventory', 'register', 'none']).default('inventory'))
  .addOption(new Option('--enroll-timeout <duration>', 'give up accepting nodes after this').argParser(duration(1)).default(600_000, '10m'))
  .option('--seed <text>', 'names the fleet: same seed, same node ids and certificates', 'capstan-sim')
  .option('--cache-dir <dir>', 'keys and certificates kept here between runs', join(homedir(), '.cache', 'capstan-sim'))
  .option('--keys <n>', 'distinct RSA keys, each certified for several node ids', int(1, 10_000), 16)
  .option('--sockets <n>', 'keep-alive connections per relay', int(1, 10_000), 64)
  .option('--max-in-flight <n>', 'uploads in flight at once, over all relays', int(1, 100_000), 256)
  .addOption(new Option('--timeout <duration>', 'upload timeout').argParser(duration(1)).default(60_000, '60s'))
  .addOption(new Option('--max-lag <duration>', 'a run not started within this of its due time is not sent, only counted '
    + '(default: one period in real time; bounds the run at --duration plus this)').argParser(duration(1)))
  .option('--pid <name=pid>', 'a process to watch (RSS, CPU): repeat, e.g. --pid relay=123 --pid server=456', collect(namedPid))
  .addOption(new Option('--sample <duration>', 'interval between progress samples').argParser(duration(100)).default(5_000, '5s'))
  .addOption(new Option('--visibility-poll <duration>', 'with --server: poll the registry this often for PUT → visible latency (0 = off); '
    + 'each poll lists every node, so the default is 1 s per 1,000 nodes, at least 2 s').argParser((v) => (v === '0' ? 0 : duration(100)(v))))
  .option('--probe-nodes <n>', 'with --server: nodes whose every run is watched for a precise PUT → visible latency (0 = none)', int(0, 10_000), 100)
  .addOption(new Option('--probe-interval <duration>', 'how often a probe node is asked').argParser(duration(10)).default(250, '250ms'))
  .addOption(new Option('--drain-timeout <duration>', 'with --server: wait this long at the end for the registry to hold every run').argParser(duration(1)).default(300_000, '5m'))
  .option('--workers <n>', 'threads that sign run logs before the clock starts (default: cores)', int(1, 256))
  .addOption(new Option('--max-prepared <MiB>', 'refuse schedules whose prepared run logs exceed this size').argParser((v) => int(1, 1_000_000)(v) * 2 ** 20).default(2048 * 2 ** 20, '2048'))
  .option('--json', 'print the report as JSON')
  .option('--out <file>', 'also write the JSON report (with samples) to this file')
  .action(async (f: Flags) => {
    const relays = f.relay && f.relay.length > 0 ? f.relay : ['http://127.0.0.1:3030'];
    let token = f.token;
    if (!token && f.tokenFile) {
      try {
        token = readFileSync(f.tokenFile, 'utf8').trim();
      } catch (err) {
        process.stderr.write(`capstan-sim: cannot read --token-file: ${(err as Error).message}\n`);
        process.exit(EXIT_CONFIG);
      }
    }
    if (f.server && !token) {
      process.stderr.write('capstan-sim: --server needs --token or --token-file\n');
      process.exit(EXIT_CONFIG);
    }
    if (f.enroll === 'register' && !f.server) {
      process.stderr.write('capstan-sim: --enroll register needs --server\n');
      process.exit(EXIT_CONFIG);
    }
    const say = (line: string) => process.stderr.write(`capstan-sim: ${line}\n`);
    say(`identities for ${f.nodes} nodes (cache ${f.cacheDir})`);
    let lastPct = -1;
    const identities = await loadIdentities({
      count: f.nodes,
      keys: f.keys,
      seed: f.seed,
      cacheDir: f.cacheDir,
      ...(f.workers !== undefined && { workers: f.workers }),
      onProgress: (d, total) => {
        const pct = Math.floor((d / total) * 10);
        if (pct !== lastPct) say(`  identities ${d}/${total}`);
        lastPct = pct;
      },
    });
    const report = await runFleet({
      relays,
      ...(f.watchRelay && { watchRelays: f.watchRelay }),
      identities,
      periodMs: f.period,
      timeScale: f.timeScale,
      durationMs: f.duration,
      reportsPerRun: f.reports,
      ...(f.server && { server: { url: f.server, token: token! } }),
      enroll: f.enroll,
      enrollTimeoutMs: f.enrollTimeout,
      socketsPerRelay: f.sockets,
      maxInFlight: f.maxInFlight,
      timeoutMs: f.timeout,
      maxLagMs: f.maxLag ?? f.period / f.timeScale,
      // The simulator's own footprint is part of the picture on a shared machine.
      pids: new Map([...(f.pid ?? []), ['sim', process.pid]]),
      sampleMs: f.sample,
      visibilityPollMs: f.visibilityPoll ?? Math.max(2_000, f.nodes),
      drainTimeoutMs: f.drainTimeout,
      probeNodes: f.probeNodes,
      probeMs: f.probeInterval,
      ...(f.workers !== undefined && { workers: f.workers }),
      maxPreparedBytes: f.maxPrepared,
      progress: say,
      onSample: (s) => say(sampleLine(s)),
    });
    if (f.out) writeFileSync(f.out, `${JSON.stringify(report, null, 2)}\n`);
    if (f.json) process.stdout.write(`${JSON.stringify({ ...report, samples: undefined })}\n`);
    else process.stdout.write(`${table(report)}\n`);
  });

program.parseAsync(process.argv).catch((err: unknown) => {
  // Commander has printed its message already; --help and --version end here too, with 0.
  if (err instanceof CommanderError) process.exit(err.exitCode === 0 ? 0 : EXIT_CONFIG);
  process.stderr.write(`capstan-sim: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(err instanceof RangeError ? EXIT_CONFIG : EXIT_CRASH);
});
