/**
 * `npm run bench` (console): the server time of every console page over 100,000 nodes on
 * SQLite (the embedded default), and on PostgreSQL when it is reachable (`databaseUrl`). A page's time is the wall time of the admin API calls the
 * page makes when it opens, sent together as the browser sends them, through the real app
 * (buildApp + inject: routing, authentication by the console's cookie, JSON). Goal: ≤ 300 ms
 * each. Median of a few rounds after one warm-up; the slowest call of each page is named.
 *
 * The fleet is the registry bench's (loadSqlite, loadPostgres) plus a week of changes (the changes
 * bench's generator, one repairing run per node and day), 10 directives, 20 dynamic groups and 3
 * rules, the policy generated for every node and the kept counters swept to the bench's clock.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { silentLogger } from '@capstan/shared';
import { Spool } from '@capstan/toolkit';
import { buildApp } from '@capstan/server/api/app';
import { loadServerConfig } from '@capstan/server/config';
import { ComplianceHistory } from '@capstan/server/console/history';
import { ConsoleSignIns } from '@capstan/server/console/signin';
import { PolicyGenerator } from '@capstan/server/policy/generate';
import { ensurePolicyKey } from '@capstan/server/policy/key';
import { HISTORY_END, historySql } from './changes.js';
import { loadPostgres, loadSqlite } from './registry.js';
import { openRegistry, withPostgres, withSqlite, type Store } from './store.js';
import { composeDomain } from '@capstan/server/domain';

export interface ConsoleBenchOptions {
  nodes?: number;
  rounds?: number;
  log?: (line: string) => void;
  /** PostgreSQL: the same pages measured again on a schema of their own there. */
  databaseUrl?: string;
  /** False: PostgreSQL alone (a run of its own, as the registry bench's `sqlite: false`). */
  sqlite?: boolean;
}

const TARGET_MS = 300;
const TOKEN = 'bench-console-token-0123456789abcdef';
/** The registry bench's clock: its nodes ran in the day before this. */
const NOW = Date.UTC(2026, 0, 15, 12, 0, 0);
const nodeId = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;

/** The calls each page makes when it opens (server/web/src/pages/*), with a typical view. */
function pages(n: number, ruleNodes: number): Record<string, string[]> {
  const enc = encodeURIComponent;
  const id = nodeId(Math.min(4242, n - 1));
  const ids = Array.from({ length: 50 }, (_, k) => nodeId(k));
  const dayAgo = new Date(Date.now() - 86_400_000).toISOString();
  const weekAgo = new Date(Date.now() - 7 * 86_400_000).toISOString();
  const hist = (days: number) => `from=${enc(new Date(HISTORY_END - days * 86_400_000).toISOString())}&to=${enc(new Date(HISTORY_END).toISOString())}`;
  const dashboard = (from: string) => ['/api/1/compliance?max_age=60', '/api/1/lifecycle?max_age=60', '/api/1/compliance/rules?max_age=60', '/api/1/compliance/worst-nodes?limit=8&max_age=60',
    `/api/1/changes/histogram?by=hour&from=${enc(from)}&max_age=60`, `/api/1/compliance/history?from=${enc(from)}`];
  const nodeList = (q: string, list: string[]) => [`/api/1/nodes?${q}&per_page=50&page=1`, `/api/1/compliance/nodes?filter=${enc(JSON.stringify({ key: 'id', values: list }))}`];
  return {
    'dashboard, 24 h': dashboard(dayAgo),
    'dashboard, 7 d': dashboard(weekAgo),
    'nodes, first page': nodeList('sort=name', ids),
    'nodes, filtered and sorted': nodeList(`status=reachable&${enc('tag:env')}=prod&region=${enc('eu-*')}&sort=last_run_at&order=desc`, ids),
    'nodes, by compliance': nodeList('sort=compliance&order=asc', ids),
    'nodes, filter language': nodeList(`q=${enc('status = reachable and tag:env = prod and os.version >= 12')}&sort=name`, ids),
    'nodes, deep page': [`/api/1/nodes?sort=name&per_page=50&page=${Math.max(1, Math.floor(n / 50) - 1)}`, nodeList('', ids)[1]!],
    node: ['', '/compliance', '/runs?per_page=50', '/history?per_page=50', '/identity', '/inventory', '/policy', '/properties'].map((p) => `/api/1/nodes/${id}${p}`)
      .concat([`/api/1/changes?node=${id}&per_page=20`]),
    pending: ['/api/1/nodes/pending?per_page=50&page=1&sort=created_at', ...Array.from({ length: 50 }, (_, k) => `/api/1/nodes/${nodeId(k * 100 + 1)}/inventory`)],
    rules: ['/api/1/rules', '/api/1/compliance/rules?max_age=60'],
    rule: ['/api/1/rules/rule-1', '/api/1/compliance/rules?max_age=60', '/api/1/compliance/directives?max_age=60', '/api/1/compliance/rules/rule-1/nodes?per_page=50&page=1'],
    'rule, one directive, errors only': [`/api/1/compliance/rules/rule-1/nodes?directive=directive-4&state=error&per_page=50&page=1`],
    // The rule's last page, and the first page past the middle of its nodes (the furthest from
    // both ends), from the number of nodes under it (about four fifths of the fleet).
    'rule, a deep page': [`/api/1/compliance/rules/rule-1/nodes?per_page=50&page=${Math.max(1, Math.ceil(ruleNodes / 50))}`],
    'rule, a middle page': [`/api/1/compliance/rules/rule-1/nodes?per_page=50&page=${Math.floor(ruleNodes / 100) + 1}`],
    directives: ['/api/1/directives', '/api/1/compliance/directives?max_age=60'],
    directive: ['/api/1/directives/directive-4', '/api/1/rules', '/api/1/compliance/directives?max_age=60'],
    'directive form': ['/api/1/methods', '/api/1/directives/directive-4'],
    'group form, preview': [`/api/1/policy/group-preview?q=${enc('status = reachable and tag:env = prod')}`],
    'rule form': ['/api/1/directives', '/api/1/groups'],
    // The changes page over the generated week's last day and the whole week (it ends at HISTORY_END).
    changes: [`/api/1/changes?${hist(1)}&per_page=50&page=1`, `/api/1/changes/histogram?${hist(1)}&by=hour`],
    'changes, 7 d': [`/api/1/changes?${hist(7)}&per_page=50&page=1`, `/api/1/changes/histogram?${hist(7)}&by=day`],
    'changes, one rule, corrective': [`/api/1/changes?${hist(7)}&rule=rule-1&label=corrective&per_page=50&page=1`, `/api/1/changes/histogram?${hist(7)}&rule=rule-1&label=corrective&by=day`],
    audit: ['/api/1/audit?per_page=50&page=1'],
    reviews: ['/api/1/change-requests?per_page=50&page=1'],
    groups: ['/api/1/groups', '/api/1/compliance/groups?max_age=60'],
    group: ['/api/1/groups/g3', '/api/1/compliance/groups?max_age=60', `/api/1/nodes?filter=${enc(JSON.stringify({ key: 'group', values: ['g3'] }))}&per_page=50&page=1`],
    jobs: ['/api/1/jobs?per_page=50&page=1'],
    managers: ['/api/1/managers'],
  };
}

type PageResult = { median_ms: number; max_ms: number; calls: number; slowest: string; slowest_ms: number; alone?: Array<[string, number]> };
type Figure = { name: string; value: number; unit: string; target?: { op: '<='; value: number } | null; note: string };

export async function benchConsole(opts: ConsoleBenchOptions = {}) {
  const n = opts.nodes ?? 100_000;
  const rounds = opts.rounds ?? 5;
  const log = opts.log ?? (() => undefined);
  const figures: Figure[] = [];
  if (opts.sqlite !== false) await withSqlite('capstan-bench-console-', async (path, dir) => {
    const t0 = Date.now();
    loadSqlite(path, n);
    const db = new Database(path);
    try {
      db.pragma('synchronous = OFF');
      db.exec(historySql('sqlite', 7, 1, 1));
      db.exec('ANALYZE');
    } finally {
      db.close();
    }
    log(`console sqlite: ${n} nodes and a week of changes loaded in ${Date.now() - t0} ms`);
    const store = await openRegistry({ sqlitePath: path });
    try {
      figures.push(...await measurePages('sqlite', store, dir, n, rounds, log));
    } finally {
      await store.close();
    }
  });
  if (opts.databaseUrl) {
    await withPostgres(opts.databaseUrl, { schemaPrefix: 'capstan_bench_', poolSize: 4 }, async (store, admin) => {
      const t0 = Date.now();
      await loadPostgres(admin, n);
      await admin.query(historySql('postgres', 7, 1, 1));
      await admin.query('VACUUM ANALYZE');
      log(`console postgres: ${n} nodes and a week of changes loaded in ${Date.now() - t0} ms`);
      // The server's data directory (spool, keys, compliance history) in a temporary one.
      const dir = await mkdtemp(join(tmpdir(), 'capstan-bench-console-'));
      try {
        figures.push(...await measurePages('postgres', store, dir, n, rounds, log));
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });
  }
  return { figures };
}

/**
 * The policy put in and generated (group memberships, bundles, expectations) as a server does at
 * start-up, the kept counters swept to the bench's clock as its sweep does every 30 s, then every
 * page timed through the app.
 */
async function measurePages(kind: 'sqlite' | 'postgres', store: Store, dir: string, n: number, rounds: number, log: (line: string) => void): Promise<Figure[]> {
  const at = new Date(NOW).toISOString();
  for (let d = 0; d < 10; d++) {
    await store.putPolicyObject('directive', `directive-${d}`, { id: `directive-${d}`, name: `Directive ${d}`, method: 'file_content', mode: 'enforce', params: { path: `/etc/app-${d}.conf`, content: 'x\n' } }, at);
  }
  for (let g = 0; g < 20; g++) {
    await store.putPolicyObject('group', `g${g}`, { id: `g${g}`, name: `Group ${g}`, filter: [{ key: 'group', values: [`g${g}`] }] }, at);
  }
  for (let r = 0; r < 3; r++) {
    await store.putPolicyObject('rule', `rule-${r}`, { id: `rule-${r}`, name: `Rule ${r}`, directives: [0, 1, 2, 3].map((d) => `directive-${(r * 3 + d) % 10}`), groups: [`g${r}`, `g${r + 3}`] }, at);
  }
  const g0 = Date.now();
  const generated = await new PolicyGenerator({ store, log: silentLogger, clock: () => new Date(NOW) }).regenerateAll();
  const clockNow = { now_s: NOW / 1000, applying_s: 600, silence_s: 900 };
  const swept = await store.sweepCompliance(clockNow);
  log(`console ${kind}: policy generated for ${generated.nodes} nodes (${generated.changed} bundles) and swept (${swept.checked} nodes) in ${Date.now() - g0} ms`);
  const config = loadServerConfig({ overrides: { 'general.data_dir': dir } });
  const spool = new Spool({ root: join(dir, 'spool'), maxFileBytes: 1 << 20 });
  await spool.init();
  const signIns = new ConsoleSignIns({ secret: Buffer.alloc(32, 7), ttlMs: 3_600_000, secure: false });
  // A week of points every 10 minutes, as a server that ran that long holds (one summary, repeated).
  const summary = await store.complianceSummary([], clockNow);
  let clock = Date.now() - 7 * 86_400_000;
  const history = new ComplianceHistory({
    file: join(dir, 'history.jsonl'), intervalMs: 0, retentionMs: 30 * 86_400_000, log: silentLogger, now: () => new Date(clock),
    summary: async () => summary,
  });
  for (let k = 0; k < 7 * 144; k++, clock += 600_000) await history.record();
  const key = await ensurePolicyKey(dir);
  const app = buildApp({
    config, store, domain: composeDomain({ store, log: silentLogger, key }), spool, log: silentLogger, adminToken: TOKEN, status: async () => ({}), now: () => new Date(NOW),
    policy: { key },
    console: { signIns, assets: new Map(), history },
  });
  const s = signIns.create(TOKEN);
  const cookie = `capstan_console=${s.value}`;
  const round = (x: number) => Math.round(x * 10) / 10;
  const get = async (url: string) => {
    const c0 = performance.now();
    const res = await app.inject({ method: 'GET', url, headers: { cookie } });
    if (res.statusCode >= 500 || res.statusCode === 400 || res.statusCode === 401) throw new Error(`${url}: ${res.statusCode} ${res.body.slice(0, 200)}`);
    return { url, ms: performance.now() - c0 };
  };
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const measure = async (calls: string[], alone: boolean): Promise<PageResult> => {
    const once = () => Promise.all(calls.map(get));
    await once(); // warm-up (and, with max_age, the copy the next rounds find)
    const walls: number[] = [];
    let slowest = { url: '', ms: 0 };
    for (let r = 0; r < rounds; r++) {
      const w0 = performance.now();
      for (const p of await once()) if (p.ms > slowest.ms) slowest = p;
      walls.push(performance.now() - w0);
    }
    walls.sort((a, b) => a - b);
    const out: PageResult = { median_ms: round(median(walls)), max_ms: round(walls[walls.length - 1]!), calls: calls.length, slowest: slowest.url.replace(/\?.*/, ''), slowest_ms: round(slowest.ms) };
    // Sent together, the calls of a page queue behind one another on SQLite (one thread): each
    // call's own time, one at a time, says which one the page waits for.
    if (alone) {
      out.alone = [];
      for (const url of calls) {
        const ms: number[] = [];
        for (let r = 0; r < rounds; r++) ms.push((await get(url)).ms);
        out.alone.push([url.replace(/\?.*/, ''), round(median(ms))]);
      }
    }
    return out;
  };
  const results: Record<string, PageResult> = {};
  // The registry bench's global compliance query summed afresh over every node, timed here too:
  // on a loaded machine every figure grows alike, and this one says by how much (compare it with
  // the registry bench's 'global, summed afresh').
  const ref: number[] = [];
  for (let r = 0; r < rounds + 1; r++) {
    const c0 = performance.now();
    await store.complianceSummaryFresh(clockNow);
    if (r > 0) ref.push(performance.now() - c0);
  }
  const reference = round(median(ref));
  log(`console ${kind} reference (registry bench's global compliance query): ${reference} ms`);
  try {
    const ruleNodes = (await store.targetNodes({ rule_id: 'rule-1', page: 1, per_page: 1 }, clockNow)).total;
    log(`console ${kind}: ${ruleNodes} nodes under rule-1`);
    for (const [page, calls] of Object.entries(pages(n, ruleNodes))) {
      // Each call alone for the pages of a few calls (the pending page's 51 would cost more than they tell).
      results[page] = await measure(calls, calls.length <= 6);
      const r = results[page]!;
      log(`console ${kind} ${page}: ${r.median_ms} ms (max ${r.max_ms}, ${r.calls} calls; slowest ${r.slowest} ${r.slowest_ms} ms${r.alone ? `; each alone: ${r.alone.map(([u, ms]) => `${u} ${ms}`).join(', ')}` : ''})`);
      // The same page when its copies are older than max_age: every aggregate computed afresh.
      if (calls.some((c) => c.includes('max_age='))) {
        const fresh = await measure(calls.map((c) => c.replace(/[?&]max_age=\d+/, (m) => (m.startsWith('?') ? '?' : '')).replace('?&', '?').replace(/\?$/, '')), true);
        results[`${page}, computed afresh`] = fresh;
        log(`console ${kind} ${page}, computed afresh: ${fresh.median_ms} ms (each alone: ${fresh.alone!.map(([u, ms]) => `${u} ${ms}`).join(', ')})`);
      }
    }
  } finally {
    await app.close();
  }
  return [{ name: `${kind}.reference.global_compliance_ms`, value: reference, unit: 'ms', note: 'the registry bench\'s global compliance query, as a yardstick of the machine\'s load' }, ...Object.entries(results).map(([page, r]) => ({
    name: `${kind}.pages.${page}.median_ms`, value: r.median_ms, unit: 'ms',
    // The goal is for the console as it runs (aggregates up to a minute old); fresh ones are reported beside it.
    target: page.endsWith('afresh') ? null : { op: '<=' as const, value: TARGET_MS },
    note: `${r.calls} calls, slowest ${r.slowest} (${r.slowest_ms} ms), max ${r.max_ms} ms${r.alone ? `; each alone: ${r.alone.map(([u, ms]) => `${u} ${ms} ms`).join(', ')}` : ''}`,
  }))];
}
