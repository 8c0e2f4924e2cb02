// @ts-check
/**
 * Reading a V8 CPU profile (node --cpu-prof): self time per function and per area of the code
 * (S/MIME, run-log parser, store, SQLite, HTTP, spool, watcher, GC…). Native frames (no script
 * URL: crypto, fs, SQLite's C code) and Node's own modules count for the nearest caller in our code
 * or a package, so "store" includes the SQLite work a store method started and "chokidar" the
 * lstat calls chokidar makes. Idle time is left out of the shares.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';

/** First match wins: the area a script URL belongs to. */
const AREAS = [
  [/\/shared\/dist\/smime\//, 'S/MIME (shared/smime)'],
  [/\/shared\/dist\/runlog\//, 'run-log parse (shared/runlog)'],
  [/\/shared\/dist\/envelope\//, 'zstd/gzip (shared/envelope)'],
  [/\/shared\/dist\//, 'shared (other)'],
  [/\/toolkit\/dist\/spool\//, 'spool + processor (toolkit/spool)'],
  [/\/toolkit\/dist\/http\//, 'upload routes (toolkit/http)'],
  [/\/toolkit\/dist\//, 'toolkit (other)'],
  [/\/server\/dist\/store\//, 'store (server/store)'],
  [/\/server\/dist\/ingest\//, 'ingest (server/ingest)'],
  [/\/server\/dist\/registry\//, 'registry (server/registry)'],
  [/\/server\/dist\/api\//, 'admin API (server/api)'],
  [/\/server\/dist\//, 'server (other)'],
  [/\/relayd\/dist\/forward\//, 'forwarding (relayd/forward)'],
  [/\/relayd\/dist\//, 'relayd (other)'],
  [/node_modules\/better-sqlite3\//, 'better-sqlite3'],
  [/node_modules\/(pg|pg-protocol|pg-pool|pg-types|postgres-[a-z]+)\//, 'pg'],
  [/node_modules\/(fastify|@fastify|find-my-way|avvio|light-my-request|fast-json-stringify|secure-json-parse|toad-cache|abstract-logging|process-warning|rfdc)\//, 'fastify'],
  [/node_modules\/(chokidar|readdirp)\//, 'chokidar'],
  [/node_modules\/(pino|pino-std-serializers|sonic-boom|thread-stream|quick-format-unescaped|fast-redact|atomic-sleep|on-exit-leak-free)\//, 'pino'],
  [/node_modules\/undici\//, 'undici'],
  [/node_modules\/zstd-napi\//, 'zstd-napi'],
  [/node_modules\/node-forge\//, 'node-forge'],
  [/node_modules\/prom-client\//, 'prom-client'],
  [/node_modules\//, 'other packages'],
  [/^node:internal\/(fs|streams\/|fs\/)|^node:fs/, 'node fs'],
  [/^node:(internal\/)?(http|_http|net|stream_base|internal\/http|dns)/, 'node http/net'],
  [/^node:/, 'node core (other)'],
];

/**
 * The area of one frame, or null when the frame should count for its caller: native frames, and
 * Node's own modules (fs, path, streams) when something of ours or a package called them, so
 * "chokidar" holds the lstat calls chokidar makes.
 * @param {string} url @param {string} fn
 */
function areaOf(url, fn) {
  if (fn === '(garbage collector)') return 'GC';
  if (fn === '(idle)') return 'idle';
  if (fn === '(program)') return 'V8/native (unattributed)';
  if (!url || url.startsWith('node:')) return null;
  for (const [re, name] of AREAS) if (/** @type {RegExp} */ (re).test(url)) return /** @type {string} */ (name);
  return 'other scripts';
}

/** For a stack made only of Node internals (event loop callbacks): which part of Node. @param {string} url */
function coreArea(url) {
  for (const [re, name] of AREAS) if (/** @type {RegExp} */ (re).test(url)) return /** @type {string} */ (name);
  return 'node core (other)';
}

/**
 * `fromUs`/`toUs` keep only the samples of a time window, in microseconds of the monotonic clock
 * the profile is stamped with (the same as `process.hrtime.bigint() / 1000n` in any process on
 * the machine), so set-up work before the measured window does not count.
 * @param {string} path
 * @param {{ top?: number, fromUs?: number, toUs?: number }} [opts]
 */
export async function summarizeProfile(path, opts = {}) {
  /** @type {{ nodes: { id: number, callFrame: { functionName: string, url: string, lineNumber: number }, children?: number[] }[], samples: number[], timeDeltas: number[], startTime: number, endTime: number }} */
  const prof = JSON.parse(await readFile(path, 'utf8'));
  /** @type {Map<number, typeof prof.nodes[number]>} */
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  /** @type {Map<number, number>} */
  const parent = new Map();
  for (const n of prof.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  /** @type {Map<number, string>} */
  const area = new Map();
  const resolveArea = (/** @type {number} */ id) => {
    const known = area.get(id);
    if (known) return known;
    const n = /** @type {typeof prof.nodes[number]} */ (byId.get(id));
    let a = areaOf(n.callFrame.url, n.callFrame.functionName);
    if (a === null) {
      const p = parent.get(id);
      const up = p === undefined ? null : resolveArea(p);
      // Reaching the root through Node internals only: name the innermost Node module seen.
      a = up === null || up === 'native (root)' || up.startsWith('node ')
        ? (n.callFrame.url ? coreArea(n.callFrame.url) : up ?? 'native (root)')
        : up;
    }
    area.set(id, a);
    return a;
  };
  /** @type {Map<number, number>} */
  const selfUs = new Map();
  const from = opts.fromUs ?? -Infinity;
  const to = opts.toUs ?? Infinity;
  let at = prof.startTime;
  prof.samples.forEach((id, i) => {
    at += prof.timeDeltas[i] ?? 0;
    if (at >= from && at <= to) selfUs.set(id, (selfUs.get(id) ?? 0) + (prof.timeDeltas[i] ?? 0));
  });

  /** @type {Map<string, number>} */ const areas = new Map();
  /** @type {Map<string, { us: number, area: string }>} */ const fns = new Map();
  let busy = 0;
  for (const [id, us] of selfUs) {
    const a = resolveArea(id);
    if (a === 'idle') continue;
    busy += us;
    areas.set(a, (areas.get(a) ?? 0) + us);
    const n = /** @type {typeof prof.nodes[number]} */ (byId.get(id));
    const where = n.callFrame.url ? `${n.callFrame.url.replace(/^.*\/(node_modules|shared|server|relayd|agent)\//, '$1/')}:${n.callFrame.lineNumber + 1}` : '(native)';
    const key = `${n.callFrame.functionName || '(anonymous)'} ${where}`;
    const f = fns.get(key) ?? { us: 0, area: a };
    f.us += us;
    fns.set(key, f);
  }
  const pct = (/** @type {number} */ us) => Math.round((us / Math.max(1, busy)) * 1000) / 10;
  const wallMs = Math.round((Math.min(to, prof.endTime) - Math.max(from, prof.startTime)) / 1000);
  return {
    wallMs,
    busyMs: Math.round(busy / 1000),
    samples: prof.samples.length,
    profileUs: { from: prof.startTime, to: prof.endTime },
    areas: [...areas].sort((a, b) => b[1] - a[1]).map(([name, us]) => ({ area: name, ms: Math.round(us / 1000), pct: pct(us) })),
    functions: [...fns].sort((a, b) => b[1].us - a[1].us).slice(0, opts.top ?? 15)
      .map(([fn, v]) => ({ function: fn, area: v.area, ms: Math.round(v.us / 1000), pct: pct(v.us) })),
  };
}

/**
 * The main thread's profile in a --cpu-prof directory: node names them
 * CPU.<date>.<time>.<pid>.<thread id>.<seq>.cpuprofile, and the main thread is thread 0.
 * @param {string} dir
 */
export async function mainThreadProfile(dir) {
  const name = (await readdir(dir)).find((n) => n.endsWith('.cpuprofile') && n.split('.')[4] === '0');
  if (!name) throw new Error(`no main-thread profile in ${dir}`);
  return join(dir, name);
}
