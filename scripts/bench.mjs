#!/usr/bin/env node
// @ts-check
/**
 * `npm run bench`: every benchmark on this machine, written to bench/results/<date>.json and .md.
 *
 *   floor        ingestRunLog in one process (no HTTP, no spool) into SQLite and PostgreSQL
 *   ingest       N nodes' run logs PUT to a real relayd → real server, until the registry holds all
 *   steady       steady state: the same nodes' next runs (~2 % repaired), floor and end to end,
 *                beside the reference pipeline (bench/reference-pipeline.mjs) and its stages
 *   profile      the same on SQLite with both programs under --cpu-prof: where the time goes
 *   storage      bytes per node-day: a simulated day of N nodes' runs into both stores
 *   relay, registry, agent, policy, changes, console, inventory, vulns   the package benchmarks (bench/src/), when they exist
 *
 * Options: --nodes N (1000), --reports N (100), --only floor,ingest,…, --no-postgres, --out DIR,
 * --quick (a handful of nodes and no package benchmarks: what the smoke test runs),
 * --day-hours H (1: the storage benchmark's simulated hours, scaled to the day; 24 for all of it),
 * --storage-before (also measure runs stored whole, as before migration 14),
 * --rounds N (3: next runs each node sends in the steady state, five minutes apart),
 * --webhook-never (steady: measured again beside a webhook subscription whose receiver never answers),
 * --webhook-pairs N (3: with --webhook-never, runs without and with the dead receiver, alternating),
 * --audit-failing P (storage: the share of nodes, in %, with an audit directive failing all day; 2).
 * CAPSTAN_BENCH_PROGRAMS=<checkout> runs the relay and server built in another checkout;
 * CAPSTAN_BENCH_SERVER_CONFIG=<file.toml> starts the end-to-end server with that configuration.
 */
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { execFileSync } from 'node:child_process';
import { cpus, loadavg, release, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { EXTERNAL, runExternal } from '../bench/lib/external.mjs';
import { CACHE_DIR, prepareFleet } from '../bench/lib/fixtures.mjs';
import { benchFloor, floorBreakdown } from '../bench/lib/floor.mjs';
import { benchIngest } from '../bench/lib/ingest.mjs';
import { benchNodeDay } from '../bench/lib/nodeday.mjs';
import { referencePipeline } from '../bench/reference-pipeline.mjs';
import { PG_URL, pgCheckpoint, pgUnavailable, pgVersion } from '../bench/lib/postgres.mjs';
import { calibrationMs } from '../bench/lib/calibrate.mjs';
import { mainThreadProfile, summarizeProfile } from '../bench/lib/profile.mjs';
import { judge, writeResults } from '../bench/lib/report.mjs';

const REPO = resolve(import.meta.dirname, '..');
const ALL = ['floor', 'ingest', 'steady', 'profile', 'storage', ...EXTERNAL.map((e) => e.id)];

const { values: args } = parseArgs({
  options: {
    nodes: { type: 'string' },
    reports: { type: 'string', default: '100' },
    only: { type: 'string' },
    'no-postgres': { type: 'boolean', default: false },
    out: { type: 'string', default: join(REPO, 'bench', 'results') },
    quick: { type: 'boolean', default: false },
    'day-hours': { type: 'string', default: '1' },
    'storage-before': { type: 'boolean', default: false },
    rounds: { type: 'string' },
    'webhook-never': { type: 'boolean', default: false },
    'webhook-pairs': { type: 'string', default: '3' },
    'audit-failing': { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (args.help) {
  process.stdout.write('usage: node scripts/bench.mjs [--nodes N] [--reports N] [--only floor,ingest,profile,storage,relay,registry,agent,policy,changes,console,inventory,upkeep,events,vulns] [--no-postgres] [--out DIR] [--quick] [--day-hours H] [--storage-before] [--rounds N] [--webhook-never] [--webhook-pairs N] [--audit-failing P]\n');
  process.exit(0);
}
const count = (/** @type {string} */ v, /** @type {string} */ name, /** @type {number} */ max) => {
  if (!/^\d+$/.test(v) || Number(v) < 1 || Number(v) > max) {
    process.stderr.write(`bench: --${name} must be an integer from 1 to ${max}\n`);
    process.exit(2);
  }
  return Number(v);
};
const nodes = count(args.nodes ?? (args.quick ? '12' : '1000'), 'nodes', 100_000);
const reports = count(args.reports ?? '100', 'reports', 100_000);
const dayHours = count(args['day-hours'] ?? '1', 'day-hours', 24);
const rounds = count(args.rounds ?? (args.quick ? '1' : '3'), 'rounds', 100);
const auditFailing = args['audit-failing'] === undefined ? 2 : Number(args['audit-failing']);
if (!Number.isFinite(auditFailing) || auditFailing < 0 || auditFailing > 100) {
  process.stderr.write('bench: --audit-failing must be a share in % from 0 to 100\n');
  process.exit(2);
}
const only = new Set(args.only ? args.only.split(',') : args.quick ? ['floor', 'ingest', 'profile'] : ALL);
for (const o of only) {
  if (!ALL.includes(o)) {
    process.stderr.write(`bench: unknown benchmark ${o} (known: ${ALL.join(', ')})\n`);
    process.exit(2);
  }
}

// --- progress on stderr: one bar redrawn on a terminal, one line per step otherwise -------------
const steps = ['prepare', ...[...only].flatMap((o) => (o === 'floor' || o === 'ingest' || o === 'storage' || o === 'steady' ? [`${o} sqlite`, `${o} postgres`] : [o]))];
let done = 0;
const tty = process.stderr.isTTY;
function progress(/** @type {string} */ msg) {
  const width = 24;
  const filled = Math.round((done / steps.length) * width);
  const line = `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${steps.length} ${msg}`;
  if (tty) process.stderr.write(`\r\x1b[K${line.slice(0, (process.stderr.columns ?? 120) - 1)}`);
  else process.stderr.write(`${line}\n`);
}
const step = () => done++;

function git() {
  try {
    const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: REPO, encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], { cwd: REPO, encoding: 'utf8' }).trim() !== '';
    return { commit, dirty };
  } catch {
    return { commit: null, dirty: null };
  }
}

const started = performance.now();
const round1 = (/** @type {number[]} */ a) => a.map((x) => Math.round(x * 100) / 100);
const pgReason = args['no-postgres'] ? 'PostgreSQL skipped (--no-postgres)' : await pgUnavailable();
const results = {
  version: 1,
  date: new Date().toISOString(),
  machine: {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    memoryGb: Math.round(totalmem() / 2 ** 30),
    kernel: `Linux ${release()}`,
    node: process.versions.node,
    postgres: pgReason ? null : await pgVersion(),
    loadavgStart: round1(loadavg()),
    loadavgEnd: /** @type {number[]} */ ([]),
    // A fixed piece of work timed at the start and the end (bench/lib/calibrate.mjs): the same
    // machine by name may be a host of another speed from one day to the next.
    calibrationMsStart: calibrationMs(),
    calibrationMsEnd: /** @type {number | null} */ (null),
  },
  git: git(),
  options: { nodes, reports, quick: args.quick, only: [...only], postgres: pgReason ?? PG_URL.replace(/\/\/[^@]*@/, '//') },
  input: /** @type {Record<string, number> | null} */ (null),
  /** @type {import('../bench/lib/report.mjs').Figure[]} */
  figures: [],
  /** @type {Record<string, any>} */
  sections: { floor: {}, breakdown: {}, ingest: {}, steady: {}, profile: {}, storage: {}, external: {} },
  durationMs: 0,
};
const figures = results.figures;
const kinds = /** @type {const} */ (['sqlite', 'postgres']);

// The programs' spools and databases live in a directory of their own, as they do on a host
// (/var/lib/capstan…), not in the system temp dir: on ext4 without a journal a new file's inode is
// found by skipping every inode freed in the last minutes in its directory's group, and /tmp is
// where every test and tool on the machine creates and deletes thousands of files. Measured on
// the 2-core machine of docs/capacity.md: 36 µs of kernel CPU per create in a quiet directory,
// 680 µs in /tmp minutes after a few benchmark runs. CAPSTAN_BENCH_WORK moves it.
const workRoot = process.env.CAPSTAN_BENCH_WORK || join(CACHE_DIR, 'work');
await mkdir(workRoot, { recursive: true });
const work = await mkdtemp(join(workRoot, 'capstan-bench-'));
try {
  progress(`preparing ${nodes} node identities and signed run logs`);
  const fleet = await prepareFleet({ nodes, reports, steady: only.has('steady') || only.has('profile'), rounds, progress });
  results.input = { avgCompressedBytes: fleet.avgCompressedBytes };
  // The steady state's run logs before its measured window: first runs, then the settling rounds.
  const warm = [...fleet.files, ...fleet.settle];
  step();

  // --- floor -------------------------------------------------------------------------------------
  if (only.has('floor')) {
    for (const kind of kinds) {
      if (kind === 'postgres' && pgReason) {
        results.sections.floor[kind] = { skipped: pgReason };
        figures.push({ id: `floor.${kind}`, name: `floor: ingestRunLog in one process, ${kind}`, value: null, unit: 'run logs/s', note: pgReason });
        step();
        continue;
      }
      progress(`floor (${kind})`);
      const f = await benchFloor({ kind, dir: work, files: fleet.files, identities: fleet.identities, progress });
      const b = await floorBreakdown({ kind, dir: work, files: fleet.files, identities: fleet.identities });
      results.sections.floor[kind] = f;
      results.sections.breakdown[kind] = b;
      results.input.avgSignedBytes = b.avgSignedBytes;
      figures.push({ id: `floor.${kind}`, name: `floor: ingestRunLog in one process, ${kind}`, value: f.runLogsPerSec, unit: 'run logs/s' });
      for (const [stage, us] of Object.entries(b.usPerRunLog)) {
        figures.push({ id: `floor.${kind}.${stage}`, name: `floor ${kind}, per run log: ${stage}`, value: us, unit: 'µs' });
      }
      step();
    }
  }

  // --- ingest end to end (+ the profiled run) ----------------------------------------------------
  const floorOf = (/** @type {string} */ kind) => {
    const f = figures.find((x) => x.id === `floor.${kind}`);
    return f && f.value !== null ? { id: f.id, value: f.value, min: 0.5 } : null;
  };
  const ingestFigures = (/** @type {string} */ kind, /** @type {any} */ r) => {
    const per = (/** @type {number | null} */ s) => (s === null ? null : Math.round((s * 1000 * 100) / r.count) / 100);
    figures.push(
      {
        id: `ingest.${kind}`, name: `ingest end to end: ${nodes} nodes → relayd → server (${kind})`, value: r.runLogsPerSec, unit: 'run logs/s',
        floor: floorOf(kind), target: kind === 'sqlite' ? { op: '>=', value: 1000 } : null,
      },
      { id: `ingest.${kind}.p50`, name: `ingest ${kind}: PUT → visible, p50`, value: r.latencyMs.p50, unit: 'ms' },
      { id: `ingest.${kind}.p99`, name: `ingest ${kind}: PUT → visible, p99`, value: r.latencyMs.p99, unit: 'ms' },
      { id: `ingest.${kind}.put`, name: `ingest ${kind}: relay accepted (2xx) during the run`, value: r.putPhasePerSec, unit: 'PUT/s' },
      { id: `ingest.${kind}.cpu.server`, name: `ingest ${kind}: server CPU per run log`, value: per(r.cpuSeconds.server), unit: 'ms' },
      { id: `ingest.${kind}.cpu.relay`, name: `ingest ${kind}: relay CPU per run log`, value: per(r.cpuSeconds.relay), unit: 'ms' },
      { id: `ingest.${kind}.cpu.harness`, name: `ingest ${kind}: the load's CPU per run log (uploads, watcher: the bench process)`, value: per(r.cpuSeconds.harness), unit: 'ms' },
      { id: `ingest.${kind}.cores`, name: `ingest ${kind}: cores busy over the window (server + relay + load)`, value: r.coresBusy, unit: 'cores' },
      { id: `ingest.${kind}.rss.server`, name: `ingest ${kind}: server peak RSS`, value: r.peakRssMb.server, unit: 'MB' },
      { id: `ingest.${kind}.rss.relay`, name: `ingest ${kind}: relay peak RSS`, value: r.peakRssMb.relay, unit: 'MB' },
      { id: `ingest.${kind}.store`, name: `ingest ${kind}: database growth per run log (tables + indexes)`, value: r.storeBytesPerRun, unit: 'B' },
    );
  };
  if (only.has('ingest')) {
    for (const kind of kinds) {
      if (kind === 'postgres' && pgReason) {
        results.sections.ingest[kind] = { skipped: pgReason };
        figures.push({ id: `ingest.${kind}`, name: `ingest end to end (${kind})`, value: null, unit: 'run logs/s', note: pgReason });
        step();
        continue;
      }
      progress(`ingest end to end (${kind})`);
      const r = await benchIngest({ kind, dir: work, files: fleet.files, identities: fleet.identities, progress });
      results.sections.ingest[kind] = r;
      ingestFigures(kind, r);
      step();
    }
  }
  // --- steady state: the nodes' next runs -------------------------------------------------------
  if (only.has('steady')) {
    const certs = new Map(fleet.identities.map((id) => [id.nodeId, id.certPem]));
    for (const kind of kinds) {
      if (kind === 'postgres' && pgReason) {
        figures.push({ id: `steady.${kind}`, name: `steady state end to end (${kind})`, value: null, unit: 'run logs/s', note: pgReason });
        step();
        continue;
      }
      await settle();
      if (kind === 'sqlite') {
        progress('steady state: reference pipeline (one thread, SQLite)');
        const ref = referencePipeline({ files: fleet.next, certs, dir: work });
        results.sections.steady.reference = ref;
        figures.push({ id: 'steady.reference', name: 'reference pipeline (bench/reference-pipeline.mjs), one thread, SQLite', value: ref.runLogsPerSec, unit: 'run logs/s' });
        figures.push({ id: 'steady.reference.cpu', name: 'reference pipeline: CPU per run log', value: ref.cpuUsPerRunLog, unit: 'µs' });
        for (const [stage, us] of Object.entries(ref.usPerRunLog)) figures.push({ id: `steady.reference.${stage}`, name: `reference pipeline, CPU per run log: ${stage}`, value: us, unit: 'µs' });
        const b = await floorBreakdown({ kind, dir: work, files: fleet.next, warmFiles: warm, identities: fleet.identities });
        results.sections.steady.breakdown = b;
        for (const [stage, us] of Object.entries(b.usPerRunLog)) figures.push({ id: `steady.stage.${stage}`, name: `capstan, CPU per run log (next runs, ${kind}): ${stage}`, value: us, unit: 'µs' });
      }
      progress(`steady state floor (${kind})`);
      const f = await benchFloor({ kind, dir: work, files: fleet.next, warmFiles: warm, identities: fleet.identities, progress });
      results.sections.steady[`floor_${kind}`] = f;
      figures.push({ id: `steady.floor.${kind}`, name: `steady state floor: ingestRunLog in one process, next runs, ${kind}`, value: f.runLogsPerSec, unit: 'run logs/s' });
      await settle();
      progress(`steady state end to end (${kind})`);
      const r = await benchIngest({ kind, dir: work, files: fleet.next, warmFiles: warm, identities: fleet.identities, progress });
      results.sections.steady[kind] = r;
      const per = (/** @type {number | null} */ x) => (x === null ? null : Math.round((x * 1000 * 100) / r.count) / 100);
      figures.push(
        {
          id: `steady.${kind}`, name: `steady state end to end: ${nodes} nodes' next ${rounds === 1 ? 'run' : `${rounds} runs`} → relayd → server (${kind})`, value: r.runLogsPerSec, unit: 'run logs/s',
          floor: { id: `steady.floor.${kind}`, value: f.runLogsPerSec, min: 0.6 }, target: kind === 'sqlite' ? { op: '>=', value: 1000 } : null,
        },
        { id: `steady.${kind}.p99`, name: `steady ${kind}: PUT → visible, p99`, value: r.latencyMs.p99, unit: 'ms' },
        { id: `steady.${kind}.cpu.server`, name: `steady ${kind}: server CPU per run log`, value: per(r.cpuSeconds.server), unit: 'ms' },
        { id: `steady.${kind}.cpu.relay`, name: `steady ${kind}: relay CPU per run log`, value: per(r.cpuSeconds.relay), unit: 'ms' },
        ...(r.databaseCpuSeconds ? [
          { id: `steady.${kind}.cpu.database`, name: `steady ${kind}: the database's CPU per run log (its backends: what decides how many servers one database feeds)`, value: per(r.databaseCpuSeconds.backend), unit: 'ms' },
          { id: `steady.${kind}.cpu.database_shared`, name: `steady ${kind}: the cluster's shared processes (WAL writer, checkpointer, autovacuum) per run log`, value: per(r.databaseCpuSeconds.shared), unit: 'ms' },
        ] : []),
        { id: `steady.${kind}.cpu.harness`, name: `steady ${kind}: the load's CPU per run log (uploads, watcher: the bench process)`, value: per(r.cpuSeconds.harness), unit: 'ms' },
        { id: `steady.${kind}.cores`, name: `steady ${kind}: cores busy over the window (server + relay + load)`, value: r.coresBusy, unit: 'cores' },
        ...['server', 'relay'].flatMap((p) => Object.entries(r.cpuSplitMs[p] ?? {}).map(([part, ms]) => ({
          id: `steady.${kind}.cpu.${p}.${part}`,
          name: `steady ${kind}: ${p} CPU per run log, ${{ mainUser: 'event loop, user', mainSys: 'event loop, kernel', otherUser: 'other threads, user', otherSys: 'other threads, kernel' }[part]}`,
          value: ms, unit: 'ms',
        }))),
        { id: `steady.${kind}.store`, name: `steady ${kind}: database growth per run log (tables + indexes)`, value: r.storeBytesPerRun, unit: 'B' },
      );
      if (args['webhook-never']) {
        // The same again beside a subscription to every event whose receiver never answers: the
        // ratio is what a dead receiver costs the ingest (goal: within 5 %). Without and with run
        // in alternation, --webhook-pairs times, so that a machine whose load drifts over the
        // minutes weighs on both sides alike; the medians are compared, and the server's CPU per
        // run log beside them (less sensitive to other processes than a rate).
        const pairs = Math.max(1, Number(args['webhook-pairs']));
        /** @type {{ rate: number, cpuMs: number | null }[]} */ const plain = [];
        /** @type {{ rate: number, cpuMs: number | null }[]} */ const dead = [];
        const side = (/** @type {typeof r} */ x) => ({ rate: x.runLogsPerSec, cpuMs: x.cpuSeconds.server === null ? null : (x.cpuSeconds.server * 1000) / x.count });
        plain.push(side(r));
        for (let i = 0; i < pairs; i++) {
          await settle();
          progress(`steady state end to end (${kind}), a webhook that never answers (${i + 1} of ${pairs})`);
          const w = await benchIngest({ kind, dir: work, files: fleet.next, warmFiles: warm, identities: fleet.identities, progress, webhook: 'never' });
          dead.push(side(w));
          if (i + 1 < pairs) {
            await settle();
            progress(`steady state end to end (${kind}), no webhook (${i + 2} of ${pairs})`);
            plain.push(side(await benchIngest({ kind, dir: work, files: fleet.next, warmFiles: warm, identities: fleet.identities, progress })));
          }
        }
        const median = (/** @type {number[]} */ xs) => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
        const cpus = (/** @type {typeof plain} */ xs) => xs.map((x) => x.cpuMs).filter((x) => x !== null);
        const plainRate = median(plain.map((x) => x.rate));
        const deadRate = median(dead.map((x) => x.rate));
        results.sections.steady[`${kind}_webhook_never`] = { pairs, plain, dead, plainRate, deadRate };
        figures.push(
          {
            id: `steady.${kind}.webhook_never`, name: `steady state end to end (${kind}) beside a webhook receiver that never answers, median of ${pairs}`, value: deadRate, unit: 'run logs/s',
            floor: { id: `steady.${kind}.webhook_plain`, value: plainRate, min: 0.95 },
          },
          { id: `steady.${kind}.webhook_plain`, name: `steady state end to end (${kind}) without it, median of ${plain.length} runs alternating with those`, value: plainRate, unit: 'run logs/s' },
        );
        if (cpus(plain).length && cpus(dead).length) {
          figures.push(
            { id: `steady.${kind}.webhook_never.cpu.server`, name: `steady ${kind}: server CPU per run log beside the dead receiver, median`, value: Math.round(median(cpus(dead)) * 100) / 100, unit: 'ms' },
            { id: `steady.${kind}.webhook_plain.cpu.server`, name: `steady ${kind}: server CPU per run log without it, median`, value: Math.round(median(cpus(plain)) * 100) / 100, unit: 'ms' },
          );
        }
      }
      step();
    }
    // The stores side by side in this run: PostgreSQL's steady rate as a share of SQLite's
    // (goal ≥ 0.8), on the same machine, fleet and load, minutes apart.
    const rate = (/** @type {string} */ kind) => figures.find((f) => f.id === `steady.${kind}`)?.value ?? null;
    const [lite, pgRate] = [rate('sqlite'), rate('postgres')];
    if (lite !== null && pgRate !== null) {
      figures.push({
        id: 'steady.stores', name: 'steady state end to end, PostgreSQL against SQLite in this run', value: pgRate, unit: 'run logs/s',
        floor: { id: 'steady.sqlite', value: lite, min: 0.8 },
      });
    }
  }

  if (only.has('profile')) {
    // The steady state when it was prepared (what a fleet sends after its first hour), else first runs.
    const steady = fleet.next.length > 0;
    progress(`${steady ? 'steady state' : 'ingest'} end to end (sqlite) under --cpu-prof`);
    const profiles = join(CACHE_DIR, 'profiles', results.date.replace(/[:.]/g, '-'));
    const r = await benchIngest({
      kind: 'sqlite', dir: work, identities: fleet.identities, profileDir: profiles, progress,
      ...(steady ? { files: fleet.next, warmFiles: warm } : { files: fleet.files }),
    });
    const window = { fromUs: r.windowUs.from, toUs: r.windowUs.to };
    results.sections.profile.sqlite = {
      phase: steady ? 'steady' : 'first runs',
      runLogsPerSec: r.runLogsPerSec,
      files: profiles,
      server: await summarizeProfile(await mainThreadProfile(join(profiles, 'sqlite-server')), window),
      relay: await summarizeProfile(await mainThreadProfile(join(profiles, 'sqlite-relayd')), window),
    };
    step();
  }

  // --- bytes per node-day ------------------------------------------------------------------------
  if (only.has('storage')) {
    for (const kind of kinds) {
      if (kind === 'postgres' && pgReason) {
        results.sections.storage[kind] = { skipped: pgReason };
        figures.push({ id: `storage.${kind}`, name: `storage ${kind}: bytes per node-day`, value: null, unit: 'B', note: pgReason });
        step();
        continue;
      }
      await settle();
      for (const legacy of args['storage-before'] ? [true, false] : [false]) {
        progress(`storage (${kind}${legacy ? ', runs whole' : ''}): a simulated ${dayHours} h of ${nodes} nodes`);
        const r = await benchNodeDay({ store: kind, nodes, hours: dayHours, legacy, auditFailing: auditFailing / 100, ...(kind === 'postgres' && { databaseUrl: PG_URL }), progress });
        const id = `storage.${kind}${legacy ? '.before' : ''}`;
        results.sections.storage[legacy ? `${kind}_before` : kind] = r;
        const how = `${nodes} nodes, ${auditFailing} % of them failing an audit directive all day, ${r.hours} h simulated${r.hours < 24 ? ', scaled to 24 h' : ''}${legacy ? ', runs stored whole (before)' : ''}`;
        figures.push({ id, name: `storage ${kind}: bytes per node-day (${how})`, value: r.bytes_per_node_day, unit: 'B', target: legacy ? null : { op: '<=', value: 1_000_000 } });
        figures.push({ id: `${id}.run`, name: `storage ${kind}${legacy ? ' (before)' : ''}: bytes per run log, all tables and indexes`, value: r.bytes_per_run, unit: 'B' });
        for (const [table, bytes] of Object.entries(r.per_table_per_node_day)) {
          if (bytes !== 0) figures.push({ id: `${id}.${table}`, name: `storage ${kind}${legacy ? ' (before)' : ''}, per node-day: ${table}`, value: bytes, unit: 'B' });
        }
        figures.push({ id: `${id}.state`, name: `storage ${kind}${legacy ? ' (before)' : ''}: per-node state rewritten in place (compliance, node row), growth per node`, value: r.state_growth_per_node, unit: 'B' });
        figures.push({ id: `${id}.audit_findings`, name: `storage ${kind}: findings of the failing audit directive after the day (${r.audit_failing_nodes} nodes failing, each ${Math.round(288 * r.hours / 24)} runs)`, value: r.audit_findings, unit: 'findings' });
      }
      step();
    }
  }

  // --- the package benchmarks (bench/src/) -------------------------------------------------------
  for (const b of EXTERNAL) {
    if (!only.has(b.id)) continue;
    progress(`${b.title}`);
    await settle();
    const opts = b.id === 'registry' || b.id === 'changes' || b.id === 'inventory' || b.id === 'console' || b.id === 'policy' || b.id === 'upkeep' || b.id === 'events'
      ? { ...(pgReason ? {} : { databaseUrl: PG_URL }), log: progress }
      // The relay's spool in the work directory, as the end-to-end relay's (see `workRoot`).
      : b.id === 'relay' ? { log: progress, dir: work }
      : b.id === 'vulns' ? { log: progress } : {};
    const r = await runExternal(b, opts, b.timeoutMs);
    results.sections.external[b.id] = { status: r.status, ...(r.reason && { reason: r.reason }), ms: r.ms };
    if (r.status !== 'ok') figures.push({ id: b.id, name: b.title, value: null, unit: '', note: `${r.status}: ${r.reason}` });
    // Worst cases and plain counts (inputs, totals) stay in the JSON; the table keeps the figures.
    for (const f of r.figures) figures.push({ ...f, ...((/max_ms$/.test(f.id) || (f.unit === '' && !f.target)) && { table: false }) });
    step();
  }
} finally {
  await rm(work, { recursive: true, force: true });
}

/**
 * Between benchmarks: the previous one's dirty pages (its spools, SQLite files, PostgreSQL's
 * buffers) written out and a moment of quiet, so that a benchmark bounded by fsync latency (the
 * relay's) is not measured against another's deferred writes. (Without it, one run measured the
 * relay at 2,462 PUT/s right after the ingest benchmarks, against 3,190–3,573 in runs of its own.)
 */
async function settle() {
  if (!pgReason) await pgCheckpoint();
  try {
    execFileSync('sync');
  } catch {
    // no sync(1): the pause alone
  }
  await new Promise((r) => setTimeout(r, 2000));
}

results.machine.loadavgEnd = round1(loadavg());
results.machine.calibrationMsEnd = calibrationMs();
results.durationMs = Math.round(performance.now() - started);
const paths = await writeResults(args.out, results);
if (tty) process.stderr.write('\n');
process.stderr.write(`bench: wrote ${paths.json} and ${paths.md} in ${Math.round(results.durationMs / 1000)} s\n`);
for (const f of figures) {
  if (f.table === false) continue;
  const j = judge(f);
  process.stdout.write(`${f.name}: ${f.value === null ? 'not available' : `${f.value} ${f.unit}`}${j.ratio !== null ? ` (ratio ${j.ratio})` : ''}${j.status ? ` ${j.status}` : ''}${f.note ? ` — ${f.note}` : ''}\n`);
}
