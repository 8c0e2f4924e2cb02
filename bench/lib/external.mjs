// @ts-check
/**
 * The package benchmarks, each a module of this workspace (bench/src/) that drives one program's
 * code through its package exports: relayd's (benchRelay), the server's (benchRegistry and the
 * others), the agent's (benchAgent). They are imported when they exist; a module that is not
 * there yet is reported as "not available", never replaced by a number made up here.
 *
 * What a benchmark returns becomes figures in one of two ways:
 * - `{ figures: [{ name, value, unit, target?: { op: '>=' | '<=', value } }] }`, taken as is; or
 * - a plain object of numbers (nested objects and arrays allowed, an array element named by its
 *   `store`, `kind` or `name` field): each finite number is a figure named by its path, its unit read from the key's suffix (…Ms → ms,
 *   …PerSec → /s, …Mb → MB), and its target, when the name says which.
 */

import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { withUnitNodeOptions } from './programs.mjs';

const CHILD = fileURLToPath(new URL('./external-child.mjs', import.meta.url));

/**
 * @typedef {{ op: '>=' | '<=', value: number }} Target
 * @typedef {{ id: string, name: string, value: number | null, unit: string, target: Target | null, note?: string }} Figure
 */

/**
 * `unit`: the benchmark measures that program's work in process and runs with its unit's
 * NODE_OPTIONS (programs.mjs unitNodeOptions), as the program runs on a host.
 * @type {{ id: string, module: string, exportName: string, title: string, timeoutMs?: number, unit?: string }[]}
 */
export const EXTERNAL = [
  { id: 'relay', module: '@capstan/bench/relay', exportName: 'benchRelay', title: 'relay' },
  { id: 'registry', module: '@capstan/bench/registry', exportName: 'benchRegistry', title: 'registry (100,000 nodes)' },
  { id: 'agent', module: '@capstan/bench/agent', exportName: 'benchAgent', title: 'agent run (50 directives)' },
  { id: 'policy', module: '@capstan/bench/policy', exportName: 'benchPolicy', title: 'policy generation (100,000 nodes, SQLite and PostgreSQL)',
    // Two 100,000-node loads and eight generations each, then three more loads (the fleet whose
    // runs reported) and five generations.
    timeoutMs: 2_400_000, unit: 'server' },
  { id: 'changes', module: '@capstan/bench/changes', exportName: 'benchChanges', title: 'changes and compliance export (100,000 nodes × 7 days)' },
  { id: 'console', module: '@capstan/bench/console', exportName: 'benchConsole', title: 'console pages: server time per page (100,000 nodes, SQLite and PostgreSQL)',
    // Two 100,000-node loads and generations, every page afresh: over 10 minutes under load.
    timeoutMs: 1_800_000 },
  { id: 'inventory', module: '@capstan/bench/inventory', exportName: 'benchInventory', title: 'inventory queries (100,000 nodes × 500 packages)' },
  { id: 'upkeep', module: '@capstan/bench/upkeep', exportName: 'benchUpkeep', title: "kept counters' upkeep on PostgreSQL (20,000 nodes, batches of 64)" },
  { id: 'events', module: '@capstan/bench/events', exportName: 'benchEvents', title: 'events written by 16 concurrent writers on PostgreSQL (one lock to commit)' },
  { id: 'vulns', module: '@capstan/bench/vulns', exportName: 'benchVulns', title: 'vulnerability matching (100,000 nodes × 550 packages, 50,000 advisories, in process)' },
];

/**
 * The product's targets (agent, relay, registry), matched on the figure's path.
 * @type {{ bench: string, test: RegExp, target: Target }[]}
 */
const TARGETS = [
  { bench: 'agent', test: /wall.*ms$/i, target: { op: '<=', value: 1000 } },
  // #6: "100,000 nodes regenerate in ≤ 10 s"
  { bench: 'policy', test: /^(postgres\.)?first_ms$/, target: { op: '<=', value: 10_000 } },
  { bench: 'policy', test: /^(postgres\.)?templated_first_ms$/, target: { op: '<=', value: 10_000 } },
  { bench: 'policy', test: /^reported\.(sqlite|postgres)\.(first|rule_change)_ms$/, target: { op: '<=', value: 10_000 } },
  { bench: 'agent', test: /rss.*mb$/i, target: { op: '<=', value: 80 } },
  { bench: 'relay', test: /put.*per.?s(ec)?$/i, target: { op: '>=', value: 3000 } },
  { bench: 'relay', test: /rss.*mb$/i, target: { op: '<=', value: 150 } },
  { bench: 'relay', test: /(idle|connections)/i, target: { op: '>=', value: 10_000 } },
  // "node list with filters over 100,000 nodes ≤ 100 ms; fleet compliance from the kept counters ≤ 300 ms on both stores"
  { bench: 'registry', test: /(^|\.)(list_ms|list\..*\.median_ms)$/, target: { op: '<=', value: 100 } },
  { bench: 'registry', test: /^(sqlite|postgres)\.(targets\.compliance_ms|compliance\.(global|by rule|by directive)\.median_ms)$/, target: { op: '<=', value: 300 } },
  // "changes query over 100,000 nodes × 7 days ≤ 200 ms on SQLite; CSV export of 100,000 nodes ≤ 10 s, RSS growth ≤ 100 MB"
  { bench: 'changes', test: /^sqlite\.queries\..*\.median_ms$/, target: { op: '<=', value: 200 } },
  { bench: 'changes', test: /^sqlite\.export_csv\.ms$/, target: { op: '<=', value: 10_000 } },
  // RSS growth of the export's own memory; file-backed pages of the memory-mapped database are reported beside it.
  { bench: 'changes', test: /export_csv\.anon_rss_growth_mb$/, target: { op: '<=', value: 100 } },
  // "a package-version query and a three-clause OS + package + fact query each ≤ 200 ms on SQLite"
  { bench: 'inventory', test: /^sqlite\.queries\.(package version|os \+ package \+ fact)\.median_ms$/, target: { op: '<=', value: 200 } },
];

/** @param {string} key */
function unitOf(key) {
  if (/(ms|_ms)$/i.test(key) && !/rss/i.test(key)) return 'ms';
  if (/per.?s(ec)?$/i.test(key)) return '/s';
  if (/mb$/i.test(key)) return 'MB';
  if (/bytes$/i.test(key)) return 'B';
  return '';
}

/**
 * Turn what a benchmark returned into figures.
 * @param {string} bench
 * @param {unknown} result
 * @returns {Figure[]}
 */
export function figuresFrom(bench, result) {
  if (result && typeof result === 'object' && Array.isArray(/** @type {any} */ (result).figures)) {
    return /** @type {any[]} */ (/** @type {any} */ (result).figures)
      .filter((f) => f && typeof f.name === 'string' && (typeof f.value === 'number' || f.value === null))
      .map((f) => ({
        id: `${bench}.${f.name}`,
        name: `${bench}: ${f.name}`,
        value: f.value,
        unit: typeof f.unit === 'string' ? f.unit : '',
        target: f.target && (f.target.op === '>=' || f.target.op === '<=') && typeof f.target.value === 'number' ? { op: f.target.op, value: f.target.value } : null,
        ...(typeof f.note === 'string' && { note: f.note }),
      }));
  }
  /** @type {Figure[]} */
  const out = [];
  const walk = (/** @type {unknown} */ v, /** @type {string[]} */ path) => {
    if (path.length > 4) return; // bounded: a benchmark's result is a small summary
    if (typeof v === 'number' && Number.isFinite(v)) {
      const key = path.join('.');
      const t = TARGETS.find((x) => x.bench === bench && x.test.test(key));
      out.push({ id: `${bench}.${key}`, name: `${bench}: ${key}`, value: v, unit: unitOf(path[path.length - 1] ?? ''), target: t ? t.target : null });
    } else if (Array.isArray(v)) {
      // One result per store or case: named by its store/kind/name field, else by position.
      v.forEach((x, i) => {
        const label = x && typeof x === 'object' ? (x.store ?? x.kind ?? x.name ?? x.id) : undefined;
        walk(x, [...path, typeof label === 'string' ? label : String(i)]);
      });
    } else if (v && typeof v === 'object') {
      for (const [k, x] of Object.entries(v)) walk(x, [...path, k]);
    }
  };
  walk(result, []);
  return out;
}

/**
 * Run one external benchmark, in a process of its own (see external-child.mjs). Absent module
 * or export → not available (with why); a benchmark that throws, or runs past `timeoutMs` → its
 * error, no figure.
 * @param {typeof EXTERNAL[number]} b
 * @param {Record<string, unknown>} [opts]
 * @param {number} [timeoutMs]
 * @returns {Promise<{ status: 'ok' | 'not available' | 'failed', reason?: string, figures: Figure[], ms: number }>}
 */
export async function runExternal(b, opts = {}, timeoutMs = 600_000) {
  const started = performance.now();
  const ms = () => Math.round(performance.now() - started);
  // Absent is told apart from broken: a module that exists but fails to load is a failure.
  let file;
  try {
    file = fileURLToPath(import.meta.resolve(b.module));
  } catch {
    file = null;
  }
  if (file === null || !existsSync(file)) {
    return { status: 'not available', reason: `${b.module} does not exist yet`, figures: [], ms: ms() };
  }
  /** @type {any} */
  let mod;
  try {
    mod = await import(b.module);
  } catch (err) {
    return { status: 'failed', reason: `cannot load ${b.module}: ${/** @type {Error} */ (err).message}`, figures: [], ms: ms() };
  }
  if (typeof mod[b.exportName] !== 'function') {
    return { status: 'not available', reason: `${b.module} has no ${b.exportName}()`, figures: [], ms: ms() };
  }
  const { log, ...rest } = opts;
  const r = await inChild(b, rest, typeof log === 'function' ? /** @type {(l: string) => void} */ (log) : () => undefined, timeoutMs);
  if ('error' in r) return { status: 'failed', reason: `${b.exportName}() failed: ${r.error}`, figures: [], ms: ms() };
  return { status: 'ok', figures: figuresFrom(b.id, r.result), ms: ms() };
}

/**
 * @param {typeof EXTERNAL[number]} b
 * @param {Record<string, unknown>} opts
 * @param {(line: string) => void} log
 * @param {number} timeoutMs
 * @returns {Promise<{ result: unknown } | { error: string }>}
 */
function inChild(b, opts, log, timeoutMs) {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [CHILD, b.module, b.exportName, JSON.stringify(opts)], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: b.unit ? withUnitNodeOptions(b.unit, process.env) : process.env,
    });
    let stdout = '';
    /** @type {string[]} */
    const tail = [];
    p.stdout.on('data', (d) => (stdout += String(d)));
    createInterface({ input: p.stderr }).on('line', (line) => {
      tail.push(line);
      if (tail.length > 20) tail.shift();
      if (!line.startsWith('{')) log(line); // progress lines; JSON log lines of spawned programs are not
    });
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.once('exit', (code, signal) => {
      clearTimeout(timer);
      const last = stdout.trim().split('\n').pop() ?? '';
      if (code === 0) {
        try {
          return resolve({ result: JSON.parse(last) });
        } catch {
          /* fall through: no result line */
        }
      }
      resolve({ error: `exit ${signal ?? code}${signal === 'SIGKILL' ? ` (over ${timeoutMs} ms)` : ''}: ${tail.slice(-5).join(' | ').slice(0, 600)}` });
    });
  });
}
