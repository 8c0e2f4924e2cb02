// @ts-check
/**
 * Bytes per node-day: a simulated (time-scaled) day of N nodes, each sending a run every 5
 * minutes with its splay, 100 reports a run, with the variation a fleet shows after its first
 * hour — about 2 % of components repaired per run (their changes recorded), 0.5 % failing, a
 * fifth of the directives logging an informational line, and now and then a node's config
 * changing (1 % of nodes an hour). Every run goes through the ingest's parse, summary and change
 * extraction and into the real store with insertRuns (batches of 64, as the ingest groups them);
 * S/MIME and HTTP are left out, they do not change what is stored.
 *
 * Before the day starts, each node has already reported once (on the day before), so what is
 * measured is the steady state: the growth of every table and index between the start and the
 * end of the simulated day. Tables that accumulate with the days kept (runs, their day bases,
 * changes, history) make the figure; tables rewritten in place (each node's compliance and row)
 * are per-node state, reported apart.
 *
 * `hours` below 24 simulates the first hours of the day only: the bases (one per node-day, made
 * by its first run) are counted once, the rest scaled to 24 hours; the result says so.
 * `legacy: true` stores runs whole (the log zstd-compressed alone, as before migration 14), to
 * compare with the same input.
 *
 * `auditFailing` (a share, 0.02 for 2 %) of the nodes also audit one directive that fails every
 * run, all day and the evening before: one finding each, opened before the measured day. Stored
 * as a finding, it costs nothing per run; stored as a change per run (as before findings) it was
 * a row per run. `findings_per_node` and the findings and events tables' growth show it.
 */
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import Database from 'better-sqlite3';
import pg from 'pg';
import { compressSync, parseRunLog, runLogFileName, summarize } from '@capstan/shared';
import { nodeProfile, prng, runLogText } from '@capstan/bench/sim/runlog';
import { openRegistry, packOutcomes } from '@capstan/bench/store';
import { DEFAULT_CHANGE_LIMITS, extractChanges } from '@capstan/server/ingest/changes';
import { extractFindings } from '@capstan/server/ingest/findings';

const MIX = Object.freeze({ repaired: 0.02, error: 0.005, info: 0.2 });
const DAY = 86_400_000;
const RUN_EVERY = 300_000;
const BATCH = 64;
/** Tables rewritten in place: their size follows the number of nodes, not of days kept. */
const STATE = new Set(['nodes', 'node_compliance', 'node_compliance_directives', 'node_expectations', 'node_certificates', 'node_tags', 'node_groups', 'inventories', 'registry_counters', 'sqlite_sequence', 'sqlite_schema', 'sqlite_stat1']);

/** @param {string} name */
function family(name) {
  if (/^runs_(p\d{8}|default)/.test(name) || name.startsWith('runs')) return 'runs';
  if (name.startsWith('sqlite_autoindex_runs') || name.startsWith('runs_')) return 'runs';
  if (name.startsWith('sqlite_autoindex_run_bases') || name.startsWith('run_bases')) return 'run_bases';
  if (name.startsWith('changes')) return 'changes';
  if (name.startsWith('findings')) return 'findings';
  if (name.startsWith('events')) return 'events';
  if (name.startsWith('deliveries') || name.startsWith('subscriptions')) return 'deliveries';
  if (name.startsWith('node_history')) return 'node_history';
  if (name.startsWith('sqlite_autoindex_node_compliance_directives') || name.startsWith('node_compliance_directives')) return 'node_compliance_directives';
  if (name.startsWith('sqlite_autoindex_node_compliance') || name.startsWith('node_compliance')) return 'node_compliance';
  if (name.startsWith('sqlite_autoindex_nodes') || name.startsWith('nodes_')) return 'nodes';
  return name.replace(/^sqlite_autoindex_/, '').replace(/_\d+$/, '');
}

/** @param {Record<string, number>} raw */
function byFamily(raw) {
  /** @type {Record<string, number>} */
  const out = {};
  for (const [k, v] of Object.entries(raw)) out[family(k)] = (out[family(k)] ?? 0) + v;
  return out;
}

/** Pages of every table and index (dbstat), bytes. @param {string} path */
function sqliteSizes(path) {
  const db = new Database(path, { readonly: true });
  try {
    /** @type {Record<string, number>} */
    const t = {};
    for (const r of /** @type {{ name: string, bytes: number }[]} */ (db.prepare('SELECT name, sum(pgsize) AS bytes FROM dbstat GROUP BY name').all())) t[r.name] = r.bytes;
    return t;
  } finally {
    db.close();
  }
}

/** Heap, indexes and TOAST of every table of the schema, bytes. @param {pg.Client} c @param {string} schema */
async function pgSizes(c, schema) {
  const r = await c.query(`SELECT c.relname AS name, pg_total_relation_size(c.oid) AS bytes FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`, [schema]);
  /** @type {Record<string, number>} */
  const t = {};
  for (const row of r.rows) t[row.name] = Number(row.bytes);
  return t;
}

/** The audit report a failing node adds to every run, before the run's end (RUDDER's line format). */
function auditLine(/** @type {string} */ nodeId, /** @type {Date} */ start) {
  const t = `${start.toISOString().slice(0, 19)}+00:00`;
  return `${t} R: @@Common@@audit_noncompliant@@audit-rule@@audit-telnet@@0@@Package absent@@telnetd@@${t.replace('T', ' ')}##${nodeId}@#Package telnetd is installed\n`;
}

/**
 * One node's run as the ingest would store it.
 * @param {{ nodeId: string, configId: string, directives: unknown[] }} profile
 * @param {Date} start @param {number} k @param {boolean} legacy @param {boolean} [failing]
 */
function runInsert(profile, start, k, legacy, failing = false) {
  let body = runLogText(/** @type {any} */ (profile), start, k, MIX);
  if (failing) {
    // Before the run's end report (the last line).
    const end = body.lastIndexOf('\n', body.length - 2) + 1;
    body = `${body.slice(0, end)}${auditLine(profile.nodeId, start)}${body.slice(end)}`;
  }
  const text = Buffer.from(body);
  const log = parseRunLog(text, { node_id: profile.nodeId, timestamp: start.toISOString() }, { maxBytes: 64 << 20, maxReports: 100_000, maxLineBytes: 1 << 20 });
  const { counts, outcomes } = summarize(log.reports);
  const startReport = log.reports.find((r) => r.event_type === 'control' && r.component === 'start') ?? log.reports[0];
  return {
    node_id: profile.nodeId,
    started_at: /** @type {any} */ (startReport).start_datetime,
    config_id: log.config_id,
    complete: true,
    report_count: log.reports.length,
    counts,
    outcomes,
    changes: extractChanges(log.reports, DEFAULT_CHANGE_LIMITS),
    findings: extractFindings(log.reports, DEFAULT_CHANGE_LIMITS),
    outcomes_packed: packOutcomes(JSON.stringify(outcomes)),
    // What the ingest hashes is the signed, compressed upload; any 32 bytes weigh the same.
    sha256: createHash('sha256').update(text).digest('hex'),
    file_name: runLogFileName(profile.nodeId, start, 'zstd'),
    received_at: new Date(start.getTime() + 4_000).toISOString(),
    ...(legacy ? { log_compressed: compressSync(text, 'zstd') } : { log_text: text }),
  };
}

/**
 * @param {{ store: 'sqlite' | 'postgres', nodes: number, hours?: number, legacy?: boolean, auditFailing?: number, databaseUrl?: string, progress?: (m: string) => void }} o
 */
export async function benchNodeDay(o) {
  const hours = o.hours ?? 24;
  const say = o.progress ?? (() => undefined);
  // The simulated day is yesterday (UTC), so no run is dated ahead of the store's clock.
  const day0 = Math.floor(Date.now() / DAY) * DAY - DAY;
  const schema = `capstan_nodeday_${Math.random().toString(16).slice(2, 10)}`;
  /** @type {pg.Client | null} */
  let admin = null;
  let dir = '';
  let store;
  if (o.store === 'postgres') {
    if (!o.databaseUrl) throw new Error('postgres needs databaseUrl');
    admin = new pg.Client({ connectionString: o.databaseUrl });
    await admin.connect();
    store = await openRegistry({ databaseUrl: o.databaseUrl, schema, poolSize: 2 });
    await store.prepareRunStorage(new Date(day0 - DAY));
  } else {
    dir = await mkdtemp(join(tmpdir(), 'capstan-nodeday-'));
    store = await openRegistry({ sqlitePath: join(dir, 'capstan.db') });
  }
  const sizes = async () => (admin ? pgSizes(admin, schema) : sqliteSizes(join(dir, 'capstan.db')));
  try {
    const ids = Array.from({ length: o.nodes }, (_, i) => createHash('sha256').update(`nodeday-${i}`).digest('hex').replace(/^(.{8})(.{4})(.{4})(.{4})(.{12}).*/, '$1-$2-$3-$4-$5'));
    const profiles = ids.map((id) => nodeProfile(id, 100, MIX));
    const rnd = prng(42);
    const splay = ids.map(() => Math.floor(rnd() * RUN_EVERY));
    // Every nth node fails its audit directive, all day long.
    const share = o.auditFailing ?? 0;
    const failing = ids.map((_, i) => share > 0 && i % Math.round(1 / share) === 0);
    for (const id of ids) await store.createNode({ id, hostname: `${id.slice(0, 8)}.example.com` });
    // Each node has reported once already, the evening before.
    say(`${o.store}: first runs of ${o.nodes} nodes`);
    await insertAll(store, profiles.map((p, i) => runInsert(p, new Date(day0 - RUN_EVERY * 2 + splay[i]), 0, !!o.legacy, failing[i])));
    if (admin) await admin.query(`VACUUM ANALYZE`).catch(() => undefined);
    const before = await sizes();
    const slots = Math.floor((hours * 3_600_000) / RUN_EVERY);
    let runs = 0;
    const t0 = performance.now();
    for (let k = 0; k < slots; k++) {
      /** @type {any[]} */
      const batch = [];
      for (let i = 0; i < o.nodes; i++) {
        // Occasional config changes: 1 % of nodes an hour get a new policy (one directive edited).
        if (rnd() < 0.01 / 12) {
          const p = profiles[i];
          const d = /** @type {any[]} */ (p.directives);
          const edited = { ...d[d.length - 1], message: `${d[d.length - 1].message} (v${k})` };
          profiles[i] = { ...p, configId: `${p.configId.slice(0, 24)}-${k}`, directives: [...d.slice(0, -1), edited] };
        }
        const start = new Date(day0 + k * RUN_EVERY + splay[i] + Math.floor(rnd() * 2000));
        batch.push(runInsert(profiles[i], start, k + 1, !!o.legacy, failing[i]));
        runs++;
        if (batch.length === BATCH) await insertAll(store, batch.splice(0));
      }
      if (batch.length) await insertAll(store, batch);
      if (k % 12 === 11) say(`${o.store}${o.legacy ? ' (runs whole)' : ''}: hour ${(k + 1) / 12} of ${hours}, ${runs} runs, ${Math.round(runs / ((performance.now() - t0) / 1000))} runs/s`);
    }
    if (admin) await admin.query('CHECKPOINT').catch(() => undefined);
    const after = await sizes();
    const b = byFamily(before);
    const a = byFamily(after);
    /** @type {Record<string, number>} */
    const growth = {};
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) growth[k] = (a[k] ?? 0) - (b[k] ?? 0);
    const scale = 24 / hours;
    let perDay = 0;
    let state = 0;
    /** @type {Record<string, number>} */
    const perTable = {};
    for (const [k, g] of Object.entries(growth)) {
      if (STATE.has(k)) {
        state += g;
        continue;
      }
      // A node-day's base is made once, by its first run: not scaled.
      const v = k === 'run_bases' ? g : g * scale;
      perTable[k] = Math.round(v / o.nodes);
      perDay += v;
    }
    const runsPerNodeDay = (slots * scale);
    const openFindings = (await store.listFindings({ status: 'open', rule_ids: ['audit-rule'] }, 1, 1)).total;
    const auditFindings = (await store.listFindings({ rule_ids: ['audit-rule'] }, 1, 1)).total;
    return {
      store: o.store,
      legacy: !!o.legacy,
      nodes: o.nodes,
      hours,
      runs,
      bytes_per_node_day: Math.round(perDay / o.nodes),
      bytes_per_run: Math.round(perDay / o.nodes / runsPerNodeDay),
      per_table_per_node_day: perTable,
      state_growth_per_node: Math.round(state / o.nodes),
      runs_per_sec: Math.round(runs / ((performance.now() - t0) / 1000)),
      audit_failing_nodes: failing.filter(Boolean).length,
      // One finding per failing node, open all day, whatever the number of its runs.
      audit_findings: auditFindings,
      audit_findings_open: openFindings,
    };
  } finally {
    await store.close();
    if (admin) {
      await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined);
      await admin.end();
    }
    if (dir) await rm(dir, { recursive: true, force: true });
  }
}

/** @param {import('@capstan/bench/store').Store} store @param {any[]} runs */
async function insertAll(store, runs) {
  for (let i = 0; i < runs.length; i += BATCH) {
    const res = await store.insertRuns(runs.slice(i, i + BATCH));
    const bad = res.find((r) => !r.ok);
    if (bad && !bad.ok) throw bad.error;
  }
}
