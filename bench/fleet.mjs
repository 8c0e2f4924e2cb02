#!/usr/bin/env node
// @ts-check
/**
 * The fleet scale run (`npm run bench:fleet`): a whole Capstan tree on this machine, played by
 * capstan-sim at the agents' real period, and a report of what it sustained.
 *
 *   PostgreSQL (default): two capstan-server processes on one fresh database; two relays at the
 *   first level, each sending to one server and failing over to the other; two relays at the
 *   second level, one behind each first-level relay; the simulated agents send to the second
 *   level. SQLite (--store sqlite): one server, the same relay tree in front of it.
 *
 * The nodes enrol as a fleet does: each sends a signed inventory through its relay, and the
 * servers accept it by an auto-accept rule (`[enrollment] auto_accept_hostnames`); the report says
 * how long enrolment took. Then every node sends a run log every period (5 minutes, spread over
 * the period as systemd's RandomizedDelaySec spreads a fleet) for --duration, and the simulator
 * measures achieved against scheduled rate, PUT → visible latency, and errors by code; the
 * processes' RSS and CPU are sampled (the database's from /proc, for its backends and the
 * cluster's shared processes); every --console-every the console's fleet-wide API calls are
 * made afresh (no cached copy) on the first server and timed.
 *
 * The report goes to bench/results/<date>-fleet[-sqlite][-<label>].md and .json (--out-dir).
 * Arguments after `--` go to capstan-sim unchanged (e.g. `-- --reports 50`).
 *
 *   npm run bench:fleet -- --nodes 100000 --duration 15m
 *   npm run bench:fleet -- --store sqlite --nodes 300000 --duration 15m
 *   npm run bench:fleet -- --nodes 2000 --duration 2m --time-scale 10 --label smoke
 */
import { spawn } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { calibrationMs, cpuShares, cpuTimes } from './lib/calibrate.mjs';
import { freshDatabase, pgCpuDelta, pgCpuSample, pgSettings, pgUnavailable, pgVersion, pgWalDelta, pgWalSample } from './lib/postgres.mjs';
import { programPaths, REPO, startProgram } from './lib/programs.mjs';

const SIM = resolve(import.meta.dirname, 'dist/sim/cli.js');
const USAGE = 'usage: npm run bench:fleet -- [--store postgres|sqlite] [--nodes N] [--duration D] [--period D] [--time-scale X] '
  + '[--console-every D] [--enroll inventory|register] [--out-dir DIR] [--label NAME] [--keep] [-- capstan-sim options]\n';

const { values: opt, positionals: simExtra } = parseArgs({
  allowPositionals: true,
  options: {
    store: { type: 'string', default: 'postgres' },
    nodes: { type: 'string', default: '100000' },
    duration: { type: 'string', default: '15m' },
    period: { type: 'string', default: '5m' },
    'time-scale': { type: 'string', default: '1' },
    'console-every': { type: 'string', default: '30s' },
    enroll: { type: 'string', default: 'inventory' },
    'out-dir': { type: 'string', default: join(REPO, 'bench', 'results') },
    label: { type: 'string', default: '' },
    keep: { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});
if (opt.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}

/** @param {string} v @returns {number | null} milliseconds */
function ms(v) {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(v);
  if (!m) return null;
  return Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[/** @type {'ms'|'s'|'m'|'h'} */ (m[2])];
}
/** @param {string} what */
function usage(what) {
  process.stderr.write(`bench:fleet: ${what}\n${USAGE}`);
  process.exit(2);
}
const store = opt.store;
if (store !== 'postgres' && store !== 'sqlite') usage('--store must be postgres or sqlite');
const nodes = Number(opt.nodes);
if (!Number.isInteger(nodes) || nodes < 1 || nodes > 1_000_000) usage('--nodes must be an integer from 1 to 1000000');
const consoleEveryMs = ms(String(opt['console-every']));
if (consoleEveryMs === null || consoleEveryMs < 1000) usage('--console-every must be a duration of at least 1s (e.g. 30s)');
const consoleEvery = /** @type {number} */ (consoleEveryMs);
// inventory: signed inventories and the auto-accept rule, as a real fleet enrols; register: the
// nodes created accepted through POST /api/1/nodes, for a run about the run logs alone.
if (opt.enroll !== 'inventory' && opt.enroll !== 'register') usage('--enroll must be inventory or register');
if (!/^[a-z0-9-]{0,32}$/.test(String(opt.label))) usage('--label: lowercase letters, digits and dashes, at most 32');
if (store === 'postgres') {
  const why = await pgUnavailable();
  if (why) {
    process.stderr.write(`bench:fleet: ${why}\n`);
    process.exit(3);
  }
}

const say = (/** @type {string} */ line) => process.stderr.write(`bench:fleet: ${line}\n`);
const bins = programPaths();
const dir = await mkdtemp(join(tmpdir(), 'capstan-fleet-'));
const db = store === 'postgres' ? await freshDatabase() : null;
/** @type {Array<Awaited<ReturnType<typeof startProgram>> & { name: string }>} */
const started = [];
const machine = {
  cores: cpus().length,
  model: cpus()[0]?.model ?? 'unknown',
  memory_gib: Math.round(totalmem() / 2 ** 30),
  node: process.version,
  postgres: db ? await pgVersion() : null,
  postgres_settings: db ? await pgSettings() : null,
  load_before: loadavg().map((x) => Math.round(x * 100) / 100),
  // The same work timed before the run and after it (calibrate.mjs): runs of other days compare by it.
  calibration_ms: { before: calibrationMs(), after: /** @type {number | null} */ (null) },
};

/** @param {string} name @param {string} bin @param {string[]} args */
async function start(name, bin, args) {
  const p = Object.assign(await startProgram(bin, args, { timeoutMs: 60_000 }), { name });
  started.push(p);
  return p;
}

/**
 * The counters of failed attempts a program keeps (relays: forwards retried, upstream errors by
 * code, uploads refused; servers: uploads refused, files failed), summed by label, non-zero only.
 */
const RETRY_COUNTERS = [
  'capstan_relayd_retried_files_total', 'capstan_relayd_upstream_errors_total', 'capstan_relayd_refused_uploads_total',
  'capstan_relayd_failed_files_total', 'capstan_server_refused_uploads_total', 'capstan_server_failed_files_total',
];

/** @param {string} url */
async function countersOf(url) {
  const res = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(10_000) });
  const text = await res.text();
  /** @type {Record<string, number>} */
  const out = {};
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)(\{[^}]*\})? ([0-9.e+]+)$/.exec(line);
    if (!m || !RETRY_COUNTERS.includes(m[1]) || Number(m[3]) === 0) continue;
    const key = `${m[1].replace(/^capstan_(relayd|server)_/, '')}${m[2] ?? ''}`;
    out[key] = (out[key] ?? 0) + Number(m[3]);
  }
  return out;
}

let exitCode = 1;
try {
  // Every server accepts the simulated nodes on their first inventory, as a fleet's rule would.
  const serverToml = join(dir, 'server.toml');
  await writeFile(serverToml, '# bench:fleet: the simulated nodes are accepted on their first signed inventory\n'
    + '[enrollment]\nauto_accept_hostnames = "*"\n');
  /** @type {Array<Awaited<ReturnType<typeof start>>>} */
  const servers = [];
  for (let i = 0; i < (db ? 2 : 1); i++) {
    // Servers sharing a database share its keyring's secret, as an admin copies it to the second.
    if (i > 0) {
      await mkdir(join(dir, `server${i + 1}`), { recursive: true, mode: 0o700 });
      await copyFile(join(dir, 'server1', 'identity.secret'), join(dir, `server${i + 1}`, 'identity.secret'));
    }
    servers.push(await start(`server${i + 1}`, bins.server, ['--config', serverToml, '--data-dir', join(dir, `server${i + 1}`),
      ...(db ? ['--database', db.url] : []), 'serve', '--listen', '127.0.0.1:0', '--log-level', 'warn']));
  }
  // First level: one relay per server, the other servers its fallbacks; second level: one relay behind each.
  const level1 = [];
  for (let i = 0; i < 2; i++) {
    const order = servers.map((_, k) => servers[(i + k) % servers.length]);
    level1.push(await start(`relay1.${i + 1}`, bins.relayd, ['--listen', '127.0.0.1:0', '--spool-dir', join(dir, `relay1.${i + 1}`),
      ...order.flatMap((s) => ['--upstream', s.url]), '--log-level', 'warn']));
  }
  const level2 = [];
  for (let i = 0; i < 2; i++) {
    level2.push(await start(`relay2.${i + 1}`, bins.relayd, ['--listen', '127.0.0.1:0', '--spool-dir', join(dir, `relay2.${i + 1}`),
      '--upstream', level1[i].url, '--log-level', 'warn']));
  }
  say(`${servers.length} server(s) (${db ? `PostgreSQL ${db.name}` : 'SQLite'}), relays ${level1.map((r) => r.url).join(' ')} <- ${level2.map((r) => r.url).join(' ')}, in ${dir}`);

  // The console's calls below use the admin token; the simulator reads it from the file (not argv).
  const token = (await readFile(join(dir, 'server1', 'admin.token'), 'utf8')).trim();
  const simJson = join(dir, 'sim.json');
  const simArgs = [
    SIM, ...level2.flatMap((r) => ['--relay', r.url]), ...level1.flatMap((r) => ['--watch-relay', r.url]), '--server', servers[0].url, '--token-file', join(dir, 'server1', 'admin.token'),
    '--nodes', String(nodes), '--period', String(opt.period), '--time-scale', String(opt['time-scale']), '--duration', String(opt.duration),
    '--enroll', String(opt.enroll), ...started.flatMap((p) => ['--pid', `${p.name}=${p.pid}`]), '--json', '--out', simJson, ...simExtra,
  ];
  /** @type {Awaited<ReturnType<typeof pgCpuSample>>} */
  let dbAtSend = null;
  /** @type {Awaited<ReturnType<typeof pgCpuSample>>} */
  let dbAtEnd = null;
  /** @type {Awaited<ReturnType<typeof pgWalSample>> | null} */
  let walAtSend = null;
  let sending = false;
  /** @type {ReturnType<typeof cpuTimes>} */
  let cpuAtSend = null;
  /** @type {Record<string, number[]>} */
  const consoleTimes = {};
  /** @type {Record<string, number>} */
  const consoleErrors = {};
  const calls = [
    '/api/1/compliance', '/api/1/lifecycle', '/api/1/compliance/rules', '/api/1/compliance/directives', '/api/1/compliance/groups',
    '/api/1/compliance/worst-nodes?limit=8', '/api/1/changes/histogram?by=hour', '/api/1/nodes?per_page=50&page=1&sort=name',
    '/api/1/nodes?per_page=50&page=1&sort=compliance&order=asc',
  ];
  const probeConsole = async () => {
    for (const c of calls) {
      const t0 = performance.now();
      try {
        const res = await fetch(`${servers[0].url}${c}`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(60_000) });
        await res.arrayBuffer();
        if (res.status !== 200) consoleErrors[`${c} HTTP ${res.status}`] = (consoleErrors[`${c} HTTP ${res.status}`] ?? 0) + 1;
        else (consoleTimes[c] ??= []).push(performance.now() - t0);
      } catch (err) {
        const k = `${c} ${(/** @type {Error} */ (err)).name}`;
        consoleErrors[k] = (consoleErrors[k] ?? 0) + 1;
      }
    }
  };
  let consoleTimer = /** @type {NodeJS.Timeout | null} */ (null);
  let probing = Promise.resolve();

  const sim = spawn(process.execPath, simArgs, { stdio: ['ignore', 'pipe', 'pipe'] });
  const simOut = /** @type {string[]} */ ([]);
  sim.stdout.on('data', (d) => simOut.push(String(d)));
  createInterface({ input: sim.stderr }).on('line', (line) => {
    process.stderr.write(`${line}\n`);
    if (!sending && line.includes('sending ') && line.includes('run logs over')) {
      sending = true;
      if (db) pgCpuSample(db.name).then((s) => { dbAtSend = s; }, () => undefined);
      if (db) pgWalSample().then((s) => { walAtSend = s; }, () => undefined);
      cpuAtSend = cpuTimes();
      consoleTimer = setInterval(() => { probing = probing.then(probeConsole); }, consoleEvery);
    } else if (sending && line.includes('waiting for the registry')) {
      if (consoleTimer) clearInterval(consoleTimer);
      consoleTimer = null;
    }
  });
  const simCode = await new Promise((res) => sim.once('exit', (c) => res(c ?? 1)));
  if (consoleTimer) clearInterval(consoleTimer);
  await probing;
  // From the first run log sent to the last one stored (the drain included): every acknowledged run's ingest.
  if (db) dbAtEnd = await pgCpuSample(db.name).catch(() => null);
  const wal = db ? pgWalDelta(walAtSend, await pgWalSample().catch(() => null)) : null;
  const cpu = cpuShares(cpuAtSend, cpuTimes());
  if (simCode !== 0) throw new Error(`capstan-sim exited with ${simCode}: ${simOut.join('').slice(-2000)}`);
  machine.calibration_ms.after = calibrationMs();
  // What the programs counted of their own failed attempts: a forward retried is an error no client sees.
  /** @type {Record<string, Record<string, number>>} */
  const counted = {};
  for (const p of [...servers, ...level1, ...level2]) counted[p.name] = await countersOf(p.url).catch((err) => ({ [`metrics unreadable: ${err.message}`]: 1 }));

  /** @type {import('./src/sim/fleet.js').FleetReport} */
  const sim_ = JSON.parse(await readFile(simJson, 'utf8'));
  const dbCpu = pgCpuDelta(dbAtSend, dbAtEnd);
  const pct = (/** @type {number[]} */ xs, /** @type {number} */ p) => {
    const s = [...xs].sort((a, b) => a - b);
    return s.length ? Math.round(s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] * 10) / 10 : null;
  };
  const consoleRows = calls.map((c) => ({ call: c, samples: consoleTimes[c]?.length ?? 0, p50_ms: pct(consoleTimes[c] ?? [], 50), max_ms: pct(consoleTimes[c] ?? [], 100) }));
  const result = {
    date: new Date().toISOString(),
    store,
    topology: { servers: servers.length, relays_level1: level1.length, relays_level2: level2.length },
    nodes,
    period: opt.period,
    time_scale: Number(opt['time-scale']),
    duration: opt.duration,
    machine: { ...machine, load_after: loadavg().map((x) => Math.round(x * 100) / 100), cpu_while_sending: cpu },
    enrollment: sim_.enrollment,
    run_logs_prepare_ms: sim_.prepareMs,
    runs: sim_.runs,
    rate: sim_.rate,
    put_latency_ms: sim_.putLatencyMs,
    visibility: sim_.visibility,
    processes: sim_.processes,
    // Where a backlog waited: the deepest each spool was at a sample, by program.
    deepest_spools: sim_.deepestSpools ? {
      ...Object.fromEntries(level2.map((r, i) => [r.name, sim_.deepestSpools.relays[i] ?? null])),
      ...Object.fromEntries(level1.map((r, i) => [r.name, sim_.deepestSpools.watched[i] ?? null])),
      [servers[0].name]: sim_.deepestSpools.server,
    } : null,
    database_cpu_s: dbCpu,
    database_cpu_ms_per_run_log: dbCpu && sim_.runs.acked ? Math.round(((dbCpu.backend + dbCpu.shared) * 1000 / sim_.runs.acked) * 100) / 100 : null,
    database_wal: wal,
    database_wal_kib_per_run_log: wal && sim_.runs.acked ? Math.round((wal.wal_bytes / 1024 / sim_.runs.acked) * 10) / 10 : null,
    console: consoleRows,
    console_errors: consoleErrors,
    retries: counted,
    notes: sim_.notes,
  };
  const day = result.date.slice(0, 10);
  const base = join(String(opt['out-dir']), `${day}-fleet${store === 'sqlite' ? '-sqlite' : ''}${opt.label ? `-${opt.label}` : ''}`);
  await mkdir(String(opt['out-dir']), { recursive: true });
  await writeFile(`${base}.json`, `${JSON.stringify(result, null, 2)}\n`);
  await writeFile(`${base}.md`, markdown(result));
  say(`report: ${base}.md`);
  exitCode = 0;
} catch (err) {
  say(`failed: ${(/** @type {Error} */ (err)).message}`);
  for (const p of started) if (p.stderr.length) say(`${p.name} said: ${p.stderr.join('').slice(-1000)}`);
} finally {
  for (const p of [...started].reverse()) await p.stop();
  if (db && !opt.keep) await db.drop().catch(() => undefined);
  if (!opt.keep) await rm(dir, { recursive: true, force: true });
  else say(`kept ${dir}${db ? ` and database ${db.name}` : ''}`);
}
process.exit(exitCode);

/** @param {any} r */
function markdown(r) {
  const n = (/** @type {number | null | undefined} */ x) => (x === null || x === undefined ? '—' : x.toLocaleString('en-US'));
  const lat = (/** @type {any} */ p) => (p ? `${n(p.p50)} / ${n(p.p99)} / ${n(p.max)} ms (${n(p.count)})` : '—');
  const lines = [
    `# Fleet run, ${r.date.slice(0, 10)}: ${n(r.nodes)} nodes on ${r.store === 'postgres' ? 'PostgreSQL' : 'SQLite'}`,
    '',
    `${r.topology.servers} server(s), ${r.topology.relays_level1} first-level and ${r.topology.relays_level2} second-level relays, `
      + `the agents' period ${r.period} at time scale ${r.time_scale}, runs sent for ${r.duration}. Machine: ${r.machine.cores} × ${r.machine.model}, `
      + `${r.machine.memory_gib} GiB, Node.js ${r.machine.node}${r.machine.postgres ? `, ${r.machine.postgres}` : ''}; load average before `
      + `${r.machine.load_before.join(' ')}, after ${r.machine.load_after.join(' ')}.`
      + `${r.machine.calibration_ms ? ` Calibration (bench/lib/calibrate.mjs, lower is faster): ${n(r.machine.calibration_ms.before)} ms before, ${n(r.machine.calibration_ms.after)} ms after.` : ''}`
      + `${r.machine.cpu_while_sending ? ` Cores busy from the first run sent to the last stored: ${r.machine.cpu_while_sending.busy_percent} %, stolen by the host ${r.machine.cpu_while_sending.steal_percent} %.` : ''}`
      + `${r.machine.postgres_settings ? ` PostgreSQL's settings: ${Object.entries(r.machine.postgres_settings).map(([k, v]) => `${k} ${v}`).join(', ')}.` : ''}`,
    '',
    '| figure | value |',
    '|---|---:|',
    `| signed run logs prepared before the clock starts | ${n(r.run_logs_prepare_ms)} ms |`,
    ...(r.enrollment.mode === 'register'
      ? [`| enrolment: nodes registered accepted through POST /api/1/nodes (no inventories) | ${n(r.enrollment.accepted)} in ${n(r.enrollment.ms)} ms `
        + `(${n(r.enrollment.ms ? Math.round(r.enrollment.accepted / (r.enrollment.ms / 1000)) : 0)} nodes/s) |`]
      : [`| signed inventories prepared before enrolment | ${n(r.enrollment.prepare_ms)} ms |`,
        `| enrolment: signed inventories sent, nodes accepted (from the first sent) | ${n(r.enrollment.inventories)}, ${n(r.enrollment.accepted)} in ${n(r.enrollment.ms)} ms `
        + `(${n(r.enrollment.ms ? Math.round(r.enrollment.accepted / (r.enrollment.ms / 1000)) : 0)} nodes/s) |`,
        `| enrolment: the slowest poll of the server (pending nodes, accepts, count) | ${r.enrollment.slowest_poll_ms === undefined ? '—' : `${n(r.enrollment.slowest_poll_ms)} ms`} |`]),
    `| run logs scheduled / acknowledged / failed / not sent (simulator behind) | ${n(r.runs.scheduled)} / ${n(r.runs.acked)} / ${n(r.runs.failed)} / ${n(r.runs.skipped ?? 0)} |`,
    `| rate achieved / scheduled | ${n(r.rate.achievedPerSec)} / ${n(r.rate.targetPerSec)} run logs/s |`,
    `| PUT latency p50 / p99 / max | ${lat(r.put_latency_ms)} |`,
    `| run → visible p50 / p99 / max (probe nodes) | ${lat(r.visibility?.probeLatencyMs)} |`,
    `| run → visible p50 / p99 / max (fleet listing) | ${lat(r.visibility?.latencyMs)} |`,
    `| visible at the end / acknowledged | ${n(r.visibility?.visible)} / ${n(r.visibility?.of)} (drain ${n(r.visibility?.drainMs)} ms) |`,
    `| database CPU from the first run sent to the last stored (backends + shared; the console's and the simulator's reads included) | ${r.database_cpu_s ? `${r.database_cpu_s.backend} + ${r.database_cpu_s.shared} s` : '—'} |`,
    `| database CPU per acknowledged run log | ${r.database_cpu_ms_per_run_log === null ? '—' : `${r.database_cpu_ms_per_run_log} ms`} |`,
    ...(r.database_wal ? [
      `| WAL written over the same window (cluster-wide): bytes, of them full-page images | ${n(Math.round(r.database_wal.wal_bytes / 2 ** 20))} MiB, ${n(r.database_wal.wal_fpi)} page images |`,
      `| WAL per acknowledged run log | ${n(r.database_wal_kib_per_run_log)} KiB |`,
      `| checkpoints forced by the WAL's size / on time; buffers written by backends themselves | ${n(r.database_wal.checkpoints_req)} / ${n(r.database_wal.checkpoints_timed)}; ${n(r.database_wal.buffers_backend)} |`,
    ] : []),
    '',
    `Errors by code (enrolment): ${JSON.stringify(r.enrollment.errors)}; (runs): ${JSON.stringify(r.runs.errors)}; (console): ${JSON.stringify(r.console_errors)}.`,
    '',
    ...(r.retries ? [`Failed attempts the programs retried or refused, from their /metrics at the end (${RETRY_COUNTERS.join(', ')}; none counted: {}): `
      + `${Object.entries(r.retries).map(([k, v]) => `${k} ${JSON.stringify(v)}`).join('; ')}.`, ''] : []),
    ...(r.deepest_spools ? [`The deepest each spool was (run logs waiting in incoming/, at the simulator's samples; — never read): `
      + `${Object.entries(r.deepest_spools).map(([k, v]) => `${k} ${v === null ? '—' : n(/** @type {number} */ (v))}`).join(', ')}.`, ''] : []),
    ...(r.visibility?.slowestProbes?.length ? [`The slowest probe runs (sent at, from the first run sent → visible after): `
      + `${r.visibility.slowestProbes.map((/** @type {{ sentMs: number, ms: number }} */ x) => `${n(Math.round(x.sentMs / 1000))} s → ${n(x.ms)} ms`).join('; ')}.`, ''] : []),
    '| process | peak RSS | RSS at the end | CPU |',
    '|---|---:|---:|---:|',
    ...Object.entries(r.processes).map(([k, p]) => `| ${k} | ${n(p.peakRssMb)} MB | ${n(p.rssMb)} MB | ${n(p.cpuSeconds)} s |`),
    '',
    'The console\'s fleet-wide calls during the run, computed afresh on the first server:',
    '',
    '| call | samples | median | max |',
    '|---|---:|---:|---:|',
    ...r.console.map((/** @type {any} */ c) => `| \`${c.call}\` | ${c.samples} | ${n(c.p50_ms)} ms | ${n(c.max_ms)} ms |`),
    '',
    ...(r.notes?.length ? ['Notes from the simulator:', '', ...r.notes.map((/** @type {string} */ x) => `- ${x}`), ''] : []),
  ];
  return `${lines.join('\n')}\n`;
}
