/**
 * Relay benchmark: the real capstan-relayd as a child process, a sink upstream in this process,
 * and a load generator. Measures, on this machine:
 *   - putPerSec: durable uploads per second (each 2xx means fsync'd and renamed into the spool),
 *   - forwardPerSec: files per second that reached the upstream (counted from the first PUT),
 *   - peakRssMb: the relay's peak resident memory over the whole run (VmHWM),
 *   - idleConnections: agent remote-run connections the relay held during the upload load.
 *
 * `node bench/dist/relay.js [--files N] [--size BYTES] [--idle N] [--connections N]` prints the
 * figures as JSON; `npm run bench` calls benchRelay().
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Pool } from 'undici';

export interface BenchOptions {
  /** Files uploaded (default 20,000). */
  files?: number;
  /** Bytes per file (default 20 KiB). */
  size?: number;
  /** Idle agent connections held during the upload load (default 10,000). */
  idle?: number;
  /** Parallel uploads (default 64). */
  connections?: number;
  /** Files forwarded at once by the relay (upstream.concurrency, default 32). */
  forwardConcurrency?: number;
  /** Where the temporary spool is made (default the OS temp dir; a tmpfs shows the CPU ceiling). */
  dir?: string;
  /** The relay's `[spool] writer_threads` (default: the relay's own default). */
  writerThreads?: number;
  /** The relay's `[spool] recycle_files` (default: the relay's own default). */
  recycleFiles?: number;
  /** Node flags for the relay; default those of packaging/systemd/capstan-relayd.service. */
  nodeFlags?: string[];
  log?: (line: string) => void;
}

export interface BenchResult {
  putPerSec: number;
  forwardPerSec: number;
  peakRssMb: number;
  idleConnections: number;
  files: number;
  fileBytes: number;
  idleRssMb: number;
  /**
   * Relay CPU time (user + system, from /proc) per file: over the whole run from the first PUT to
   * the last forward (accept + forward), and during the PUT phase only (forwards run meanwhile).
   * Wall-clock rates move with whatever else the machine runs; these move much less.
   */
  cpuUsPerFile: number;
  putPhaseCpuUsPerFile: number;
  /** Of cpuUsPerFile, the part spent in the kernel (file system work: create, fsync, rename, unlink; sockets). */
  sysCpuUsPerFile: number;
  /**
   * CPU of this process (the load generator and the sink upstream) per file over the same window:
   * on a 2-core machine it shares the cores with the relay, so it bounds what the relay can reach.
   */
  harnessCpuUsPerFile: number;
  /** Of cpuUsPerFile, the relay's main thread (its event loop): the part that cannot use the other core. */
  mainThreadCpuUsPerFile: number;
}

/** relayd's own command line, as built in its package. */
const CLI = fileURLToPath(import.meta.resolve('@capstan/relayd/cli'));
/** How the benchmarks read a unit's NODE_OPTIONS (bench/lib/programs.mjs, beside this package's dist/). */
const { unitNodeOptions } = (await import(new URL('../lib/programs.mjs', import.meta.url).href)) as { unitNodeOptions: (program: string) => string };
/** NODE_OPTIONS of the shipped unit: a 2 MB young generation keeps the peak RSS ~20 MB lower. */
export const SERVICE_NODE_FLAGS = unitNodeOptions('relayd').split(' ').filter(Boolean);

/** An upstream that reads each body and answers 201, counting what it got. */
async function sink(): Promise<{ server: Server; url: string; count: () => number; firstAt: () => number; lastAt: () => number }> {
  let count = 0;
  let last = 0;
  const server = createServer((req, res) => {
    if (req.method === 'GET') {
      res.end('sink\n');
      return;
    }
    req.on('data', () => {});
    req.on('end', () => {
      count++;
      last = Date.now();
      res.writeHead(201).end();
    });
  });
  server.keepAliveTimeout = 10_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, count: () => count, firstAt: () => 0, lastAt: () => last };
}

/** utime + stime of a process, in µs (from /proc/<pid>/stat; clock ticks are 100 Hz on Linux). */
async function procCpuUs(pid: number): Promise<number> {
  return (await procCpu(pid)).total;
}

async function procCpu(pid: number, tid?: number): Promise<{ total: number; sys: number }> {
  const text = await readFile(tid === undefined ? `/proc/${pid}/stat` : `/proc/${pid}/task/${tid}/stat`, 'utf8').catch(() => '');
  const f = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return { total: (Number(f[11]) + Number(f[12])) * 10_000, sys: Number(f[12]) * 10_000 };
}

async function procStatus(pid: number, field: 'VmHWM' | 'VmRSS'): Promise<number> {
  const text = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text);
  return m ? Number(m[1]) / 1024 : 0;
}

/** Open `n` remote-run connections with bare sockets (cheap for this process) and count hellos. */
async function holdIdle(host: string, port: number, n: number): Promise<{ sockets: Socket[]; held: () => number }> {
  const sockets: Socket[] = [];
  let held = 0;
  const batch = 500;
  for (let i = 0; i < n; i += batch) {
    await Promise.all(
      Array.from({ length: Math.min(batch, n - i) }, (_, k) =>
        new Promise<void>((resolve) => {
          const s = connect({ host, port });
          sockets.push(s);
          let seen = false;
          s.on('data', (d: Buffer) => {
            if (!seen && d.includes('"hello"')) {
              seen = true;
              held++;
              resolve();
            }
          });
          s.on('error', () => resolve());
          s.on('close', () => {
            if (seen) held--;
            resolve();
          });
          // As capstan-agent listen asks: the upgraded connection.
          s.write(`GET /remote-run/listen/bench-node-${i + k} HTTP/1.1\r\nHost: relay\r\nConnection: Upgrade\r\nUpgrade: capstan-remote-run\r\n\r\n`);
        }),
      ),
    );
  }
  return { sockets, held: () => held };
}

export async function benchRelay(opts: BenchOptions = {}): Promise<BenchResult> {
  const files = opts.files ?? 20_000;
  const size = opts.size ?? 20 * 1024;
  const idle = opts.idle ?? 10_000;
  const parallel = opts.connections ?? 64;
  const log = opts.log ?? (() => {});
  const dir = await mkdtemp(join(opts.dir ?? tmpdir(), 'capstan-relay-bench-'));
  const up = await sink();
  // All uploads come from this one address: no per-address limit ([http] max_uploads_per_client).
  // The idle connections carry no node token (this process has no identity to sign one with);
  // a token is checked once per connection, so what is measured here is the holding.
  await writeFile(join(dir, 'relayd.toml'), `[upstream]\nconcurrency = ${opts.forwardConcurrency ?? 32}\n[http]\nmax_uploads_per_client = 0\n[remote_run]\nmax_connections = ${Math.max(idle + 100, 1000)}\n[identity]\nrequire_token = false\n[spool]\n${opts.writerThreads !== undefined ? `writer_threads = ${opts.writerThreads}\n` : ''}${opts.recycleFiles !== undefined ? `recycle_files = ${opts.recycleFiles}\n` : ''}`);
  const relay = spawn(process.execPath, [
    ...(opts.nodeFlags ?? SERVICE_NODE_FLAGS),
    CLI, '--config', join(dir, 'relayd.toml'), '--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'spool'), '--upstream', up.url, '--log-level', 'warn',
  ], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    const url = await new Promise<string>((resolve, reject) => {
      relay.once('exit', (code) => reject(new Error(`relayd exited with ${code}`)));
      createInterface({ input: relay.stdout! }).on('line', (line) => {
        if (line.startsWith('{"ready":true')) resolve((JSON.parse(line) as { url: string }).url);
        // Anything else the relay prints (warnings, --trace-gc with --node-flags) goes to stderr.
        else process.stderr.write(`relayd: ${line}\n`);
      });
    });
    const { hostname, port } = new URL(url);

    log(`holding ${idle} idle agent connections`);
    const idleConns = await holdIdle(hostname, Number(port), idle);
    const idleRssMb = await procStatus(relay.pid!, 'VmRSS');
    log(`held ${idleConns.held()}, relay RSS ${idleRssMb.toFixed(1)} MB`);

    // Distinct bodies (the relay never dedups, but a sink might): one random block, varied per file.
    const block = randomBytes(size);
    const pool = new Pool(url, { connections: parallel, pipelining: 1 });
    let next = 0;
    const started = Date.now();
    const cpu0 = await procCpuUs(relay.pid!);
    const own0 = process.cpuUsage();
    const main0 = (await procCpu(relay.pid!, relay.pid!)).total;
    const sys0 = (await procCpu(relay.pid!)).sys;
    await Promise.all(
      Array.from({ length: parallel }, async () => {
        while (next < files) {
          const i = next++;
          const body = Buffer.from(block);
          body.writeUInt32BE(i, 0);
          const stamp = new Date(Date.UTC(2026, 0, 1) + i * 1000).toISOString().replace(/\.\d{3}Z$/, '+00:00');
          const name = encodeURIComponent(`${stamp}@bench-node-${i % 1000}.log`);
          const res = await pool.request({ method: 'PUT', path: `/reports/${name}`, body, headers: { 'content-length': String(size) } });
          await res.body.dump();
          if (res.statusCode !== 201) throw new Error(`PUT answered ${res.statusCode}`);
        }
      }),
    );
    const putDone = Date.now();
    const cpuPut = await procCpuUs(relay.pid!);
    const putPerSec = files / ((putDone - started) / 1000);
    log(`${files} PUTs in ${putDone - started} ms`);
    const deadline = Date.now() + 600_000;
    while (up.count() < files && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const forwardPerSec = up.count() / ((up.lastAt() - started) / 1000);
    const cpuEnd = await procCpuUs(relay.pid!);
    const own = process.cpuUsage(own0);
    const mainEnd = (await procCpu(relay.pid!, relay.pid!)).total;
    const sysEnd = (await procCpu(relay.pid!)).sys;
    const idleConnections = idleConns.held();
    const peakRssMb = await procStatus(relay.pid!, 'VmHWM');
    await pool.close();
    for (const s of idleConns.sockets) s.destroy();
    return {
      putPerSec: Math.round(putPerSec),
      forwardPerSec: Math.round(forwardPerSec),
      peakRssMb: Math.round(peakRssMb * 10) / 10,
      idleConnections,
      files,
      fileBytes: size,
      idleRssMb: Math.round(idleRssMb * 10) / 10,
      cpuUsPerFile: Math.round((cpuEnd - cpu0) / files),
      putPhaseCpuUsPerFile: Math.round((cpuPut - cpu0) / files),
      sysCpuUsPerFile: Math.round((sysEnd - sys0) / files),
      harnessCpuUsPerFile: Math.round((own.user + own.system) / files),
      mainThreadCpuUsPerFile: Math.round((mainEnd - main0) / files),
    };
  } finally {
    relay.kill('SIGTERM');
    await new Promise((r) => relay.once('exit', r));
    up.server.closeAllConnections();
    up.server.close();
    await rm(dir, { recursive: true, force: true });
  }
}

// The tiny runner: `node bench/dist/relay.js --files 20000 --idle 10000`.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const arg = (name: string) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 ? Number(process.argv[i + 1]) : undefined;
  };
  const dirArg = process.argv.indexOf('--dir');
  benchRelay({
    files: arg('files'), size: arg('size'), idle: arg('idle'), connections: arg('connections'), forwardConcurrency: arg('forward'),
    writerThreads: arg('writer-threads'), recycleFiles: arg('recycle-files'),
    dir: dirArg > 0 ? process.argv[dirArg + 1] : undefined,
    ...(process.argv.includes('--default-heap') ? { nodeFlags: [] } : {}),
    // `--node-flags "--max-semi-space-size=8 …"`: try other flags for the relay.
    ...(process.argv.indexOf('--node-flags') > 0 ? { nodeFlags: process.argv[process.argv.indexOf('--node-flags') + 1]!.split(' ').filter(Boolean) } : {}),
    // `--cpu-prof DIR`: the relay writes a V8 CPU profile there when it exits.
    ...(process.argv.indexOf('--cpu-prof') > 0
      ? { nodeFlags: [...SERVICE_NODE_FLAGS, '--cpu-prof', '--cpu-prof-dir', process.argv[process.argv.indexOf('--cpu-prof') + 1]!] }
      : {}),
    log: (l) => process.stderr.write(`${l}\n`) })
    .then((r) => process.stdout.write(`${JSON.stringify(r)}\n`))
    .catch((err: unknown) => {
      process.stderr.write(`bench failed: ${String(err)}\n`);
      process.exit(1);
    });
}
