/**
 * `npm run bench` (changes): what an admin asks of a week of a large fleet's changes, and the
 * compliance export of the whole fleet.
 *
 * The fleet is the registry bench's (100,000 nodes with compliance rows). Its change history is
 * generated in SQL: 7 days of runs per node, `runsPerDay` of them with a repair, each repairing
 * `changesPerRun` components (2 % of a 50-component policy), about 5 % of them intentional, a
 * third with a diff. Then, on each store:
 * - the queries of the changes API (newest page, one node, one rule, a group of 1,000 nodes,
 *   the hourly histogram of a day), median of a few rounds;
 * - `GET /api/1/compliance/nodes?format=csv` over HTTP on the real route: wall time, bytes, and
 *   the process's peak RSS growth while it streams.
 */
import { get } from 'node:http';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import Database from 'better-sqlite3';
import { silentLogger } from '@capstan/shared';
import { Spool } from '@capstan/toolkit';
import { buildApp } from '@capstan/server/api/app';
import { loadServerConfig } from '@capstan/server/config';
import { loadSqlite, loadPostgres, type Timing } from './registry.js';
import { withPostgres, withSqlite, withSqliteStore, type ChangeQuery, type Store } from './store.js';
import { composeDomain } from '@capstan/server/domain';

export interface ChangesBenchOptions {
  nodes?: number;
  days?: number;
  /** Runs per node and day that repair something. */
  runsPerDay?: number;
  changesPerRun?: number;
  rounds?: number;
  databaseUrl?: string;
  log?: (line: string) => void;
}

export interface ChangesBenchResult {
  store: 'sqlite' | 'postgres';
  nodes: number;
  changes: number;
  load_ms: number;
  /** Bytes the changes table and its indexes take, per change. */
  bytes_per_change: number | null;
  queries: Record<string, Timing & { rows: number; total: number }>;
  /**
   * RSS growth while the export streams: in all, and its anonymous part (heap, buffers: what the
   * export itself holds). The rest is file-backed: SQLite's memory-mapped database pages read.
   */
  export_csv: { ms: number; bytes: number; lines: number; rss_growth_mb: number; anon_rss_growth_mb: number };
}

/** The last day of the generated history ends here (so "the last 24 h" is a fixed window). */
/** When the generated week of changes ends (historySql). */
export const HISTORY_END = Date.UTC(2026, 10, 25);
const END = HISTORY_END;
const DAY = 86_400_000;
const TOKEN = 'bench-token-0123456789abcdef';

/** The anonymous part of this process's RSS (Linux: RssAnon in /proc/self/status), in bytes. */
function anonRss(): number {
  const m = /^RssAnon:\s+(\d+) kB$/m.exec(readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) * 1024 : process.memoryUsage.rss();
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function timed<T extends { data: unknown[]; total: number }>(rounds: number, fn: () => Promise<T>): Promise<Timing & { rows: number; total: number }> {
  const ms: number[] = [];
  let last: T | undefined;
  for (let i = 0; i < rounds; i++) {
    const t0 = performance.now();
    last = await fn();
    ms.push(performance.now() - t0);
  }
  return { median_ms: Math.round(median(ms) * 10) / 10, max_ms: Math.round(Math.max(...ms) * 10) / 10, rows: last!.data.length, total: last!.total };
}

/** The history, in SQL, over the nodes already loaded: one statement per store. */
export function historySql(dialect: 'sqlite' | 'postgres', days: number, runsPerDay: number, perRun: number): string {
  const slots = days * runsPerDay;
  const step = Math.floor(DAY / runsPerDay / 1000);
  const start = (END - days * DAY) / 1000;
  if (dialect === 'sqlite') {
    return `WITH RECURSIVE s(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM s WHERE k < ${slots * perRun - 1}),
      n AS (SELECT id, rowid AS i FROM nodes)
      INSERT INTO changes (node_id, run_id, run_started_at, at, rule_id, directive_id, component, key_value, event_type, message, label, config_id, diff, diff_truncated)
      SELECT n.id, n.i * 1000 + s.k / ${perRun},
        strftime('%Y-%m-%dT%H:%M:%SZ', ${start} + (s.k / ${perRun}) * ${step} + n.i % ${step}, 'unixepoch'),
        strftime('%Y-%m-%dT%H:%M:%S.000Z', ${start} + (s.k / ${perRun}) * ${step} + n.i % ${step} + s.k % ${perRun}, 'unixepoch'),
        'rule-' || ((n.i + s.k) % 3), 'directive-' || ((n.i + s.k) % 10), 'File content', '/etc/app-' || (s.k % 7) || '.conf',
        'result_repaired', 'content repaired', CASE WHEN (n.i + s.k) % 20 = 0 THEN 'intentional' ELSE 'corrective' END, 'cfg-' || (n.i % 5),
        CASE WHEN s.k % 3 = 0 THEN '--- a/etc/app.conf' || char(10) || '+++ b/etc/app.conf' || char(10) || '@@ -1 +1 @@' || char(10) || '-listen 80' || char(10) || '+listen 8080' || char(10) END, 0
      FROM n CROSS JOIN s`;
  }
  return `INSERT INTO changes (node_id, run_id, run_started_at, at, rule_id, directive_id, component, key_value, event_type, message, label, config_id, diff, diff_truncated)
    SELECT n.id, n.i * 1000 + s.k / ${perRun},
      to_char(to_timestamp(${start} + (s.k / ${perRun}) * ${step} + n.i % ${step}) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
      to_timestamp(${start} + (s.k / ${perRun}) * ${step} + n.i % ${step} + s.k % ${perRun}),
      'rule-' || ((n.i + s.k) % 3), 'directive-' || ((n.i + s.k) % 10), 'File content', '/etc/app-' || (s.k % 7) || '.conf',
      'result_repaired', 'content repaired', CASE WHEN (n.i + s.k) % 20 = 0 THEN 'intentional' ELSE 'corrective' END, 'cfg-' || (n.i % 5),
      CASE WHEN s.k % 3 = 0 THEN E'--- a/etc/app.conf\\n+++ b/etc/app.conf\\n@@ -1 +1 @@\\n-listen 80\\n+listen 8080\\n' END, false
    FROM (SELECT id, row_number() OVER (ORDER BY id) AS i FROM nodes) n CROSS JOIN generate_series(0, ${slots * perRun - 1}) AS s(k)`;
}

async function measureQueries(store: Store, rounds: number, nodes: number): Promise<ChangesBenchResult['queries']> {
  const iso = (ms: number) => new Date(ms).toISOString();
  const dayAgo = iso(END - DAY);
  const weekAgo = iso(END - 7 * DAY);
  // The registry bench's node ids.
  const nodeId = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
  const group = Array.from({ length: Math.min(1000, nodes) }, (_, i) => nodeId((i * 97) % nodes));
  const cases: Record<string, ChangeQuery> = {
    'newest page, whole fleet, last 24 h': { from: dayAgo },
    'one node, 7 days': { node_ids: [nodeId(Math.min(4242, nodes - 1))], from: weekAgo },
    'one rule, corrective, last 24 h': { rule_ids: ['rule-1'], label: 'corrective', from: dayAgo },
    'a group of 1,000 nodes, last 24 h': { node_ids: group, from: dayAgo },
  };
  const out: ChangesBenchResult['queries'] = {};
  for (const [name, q] of Object.entries(cases)) out[name] = await timed(rounds, () => store.listChanges(q, 1, 100));
  out['histogram by hour, last 24 h'] = await timed(rounds, async () => {
    const b = await store.changesHistogram({ from: dayAgo }, 'hour');
    return { data: b, total: b.reduce((s, x) => s + x.intentional + x.corrective, 0) };
  });
  return out;
}

/** The real route over HTTP, streamed to a counter, RSS sampled every 20 ms. */
async function measureExport(store: Store, dir: string): Promise<ChangesBenchResult['export_csv']> {
  const config = loadServerConfig({ overrides: { 'general.data_dir': dir } });
  const spool = new Spool({ root: join(dir, 'spool'), maxFileBytes: 1 << 20 });
  await spool.init();
  const app = buildApp({ config, store, domain: composeDomain({ store, log: silentLogger }), spool, log: silentLogger, adminToken: TOKEN, status: async () => ({}), now: () => new Date(END) });
  await app.listen({ host: '127.0.0.1', port: 0 });
  try {
    const { port } = app.server.address() as AddressInfo;
    global.gc?.();
    const base = process.memoryUsage.rss();
    const anonBase = anonRss();
    let peak = base;
    let anonPeak = anonBase;
    const sample = () => {
      peak = Math.max(peak, process.memoryUsage.rss());
      anonPeak = Math.max(anonPeak, anonRss());
    };
    const sampler = setInterval(sample, 20);
    const t0 = performance.now();
    const { bytes, lines } = await new Promise<{ bytes: number; lines: number }>((resolve, reject) => {
      get({ host: '127.0.0.1', port, path: '/api/1/compliance/nodes?format=csv', headers: { authorization: `Bearer ${TOKEN}` } }, (res) => {
        let n = 0;
        let nl = 0;
        res.on('data', (chunk: Buffer) => {
          n += chunk.length;
          for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) nl++;
        });
        res.on('end', () => (res.statusCode === 200 ? resolve({ bytes: n, lines: nl }) : reject(new Error(`export answered ${res.statusCode}`))));
        res.on('error', reject);
      }).on('error', reject);
    });
    const ms = performance.now() - t0;
    clearInterval(sampler);
    sample();
    const mb = (b: number) => Math.round((b / 1048576) * 10) / 10;
    return { ms: Math.round(ms), bytes, lines, rss_growth_mb: mb(peak - base), anon_rss_growth_mb: mb(anonPeak - anonBase) };
  } finally {
    await app.close();
  }
}

export async function benchChanges(opts: ChangesBenchOptions = {}): Promise<ChangesBenchResult[]> {
  const n = opts.nodes ?? 100_000;
  const days = opts.days ?? 7;
  const runsPerDay = opts.runsPerDay ?? 6;
  const perRun = opts.changesPerRun ?? 1;
  const rounds = opts.rounds ?? 5;
  const log = opts.log ?? (() => undefined);
  const results: ChangesBenchResult[] = [];
  await withSqlite('capstan-bench-changes-', async (path, dir) => {
    loadSqlite(path, n);
    const t0 = Date.now();
    const db = new Database(path);
    let bytes: number | null = null;
    let count = 0;
    try {
      db.pragma('synchronous = OFF');
      db.exec(historySql('sqlite', days, runsPerDay, perRun));
      db.exec('ANALYZE');
      count = (db.prepare('SELECT count(*) AS c FROM changes').get() as { c: number }).c;
      try {
        const sized = db.prepare("SELECT sum(pgsize) AS b FROM dbstat WHERE name = 'changes' OR name LIKE 'changes_%'").get() as { b: number | null };
        bytes = sized.b;
      } catch {
        bytes = null; // SQLite built without dbstat
      }
    } finally {
      db.close();
    }
    const loadMs = Date.now() - t0;
    log(`sqlite: ${count} changes loaded in ${loadMs} ms`);
    await withSqliteStore(path, async (store) => {
      const queries = await measureQueries(store, rounds, n);
      for (const [k, v] of Object.entries(queries)) log(`sqlite changes ${k}: ${v.median_ms} ms (${v.total} matching)`);
      const exp = await measureExport(store, dir);
      log(`sqlite compliance CSV export: ${exp.ms} ms, ${exp.lines} lines, RSS +${exp.rss_growth_mb} MB (anonymous +${exp.anon_rss_growth_mb} MB)`);
      results.push({ store: 'sqlite', nodes: n, changes: count, load_ms: loadMs, bytes_per_change: bytes === null ? null : Math.round(bytes / count), queries, export_csv: exp });
    });
  });

  if (opts.databaseUrl) {
    await withPostgres(opts.databaseUrl, { schemaPrefix: 'capstan_bench_', poolSize: 4 }, async (store, admin) => {
      await loadPostgres(admin, n);
      const t0 = Date.now();
      await admin.query(historySql('postgres', days, runsPerDay, perRun));
      await admin.query('VACUUM ANALYZE changes');
      const loadMs = Date.now() - t0;
      const { rows } = await admin.query(`SELECT count(*) AS c, pg_total_relation_size('changes') AS b FROM changes`);
      const count = Number(rows[0].c);
      log(`postgres: ${count} changes loaded in ${loadMs} ms`);
      const queries = await measureQueries(store, rounds, n);
      for (const [k, v] of Object.entries(queries)) log(`postgres changes ${k}: ${v.median_ms} ms (${v.total} matching)`);
      // The export's server keeps its data directory (spool, keys) in a temporary one.
      const pdir = await mkdtemp(join(tmpdir(), 'capstan-bench-changes-'));
      try {
        const exp = await measureExport(store, pdir);
        log(`postgres compliance CSV export: ${exp.ms} ms, ${exp.lines} lines, RSS +${exp.rss_growth_mb} MB (anonymous +${exp.anon_rss_growth_mb} MB)`);
        results.push({ store: 'postgres', nodes: n, changes: count, load_ms: loadMs, bytes_per_change: Math.round(Number(rows[0].b) / count), queries, export_csv: exp });
      } finally {
        await rm(pdir, { recursive: true, force: true });
      }
    });
  }
  return results;
}
