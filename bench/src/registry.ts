/**
 * Registry benchmark (for `npm run bench`, which calls `benchRegistry`): the node list with
 * filters, and fleet compliance, over a registry of 100,000 nodes, on SQLite and (given a URL)
 * PostgreSQL. Targets: a filtered list page ≤ 100 ms; fleet compliance (global, by rule, by
 * directive, read from the kept counters) ≤ 300 ms on both stores. The same figures summed
 * afresh over every node are reported beside them, with the sweep after the load and a read ten
 * minutes after it (the readers' correction for the nodes that went silent meanwhile).
 *
 * The registry is filled directly in bulk (one generator, the same rows for both stores), not
 * through the ingest: this measures the queries an admin waits for, not the loading. Every
 * query is run `rounds` times after one warm-up; the median and the worst are reported.
 */
import { randomBytes } from 'node:crypto';
import Database from 'better-sqlite3';
import pg from 'pg';
import { RUN_STATES } from '@capstan/shared';
import { complianceClock } from '@capstan/server/registry/compliance';
import { sqliteKeptRefill } from '@capstan/server/store/migrations/0023_kept_compliance';
import { sqliteKeptGroupsRefill } from '@capstan/server/store/migrations/0025_kept_groups';
import { sqliteKeptSharesRefill } from '@capstan/server/store/migrations/0027_kept_shares';
import { sqliteKeptTargetsRefill } from '@capstan/server/store/migrations/0037_kept_targets_normal';
import { NODE_COLUMNS, withPostgres, withSqlite, withSqliteStore, type NodeFilter, type NodeListQuery, type Store } from './store.js';

export interface RegistryBenchOptions {
  /** Nodes in the registry (default 100,000). */
  nodes?: number;
  /** Timed runs of each query (default 5). */
  rounds?: number;
  /** PostgreSQL URL to measure too (a schema is created and dropped); none: SQLite only. */
  databaseUrl?: string;
  /** Measure SQLite (default true); false with a URL: PostgreSQL alone. */
  sqlite?: boolean;
  /** Progress lines. */
  log?: (line: string) => void;
}

export interface Timing {
  median_ms: number;
  max_ms: number;
}

export interface RegistryBenchResult {
  store: 'sqlite' | 'postgres';
  nodes: number;
  load_ms: number;
  /** Filtered node list pages (per_page 100, with totals by status), by case. */
  list: Record<string, Timing & { total: number }>;
  compliance: Record<string, Timing>;
  targets: { list_ms: number; list_ok: boolean; compliance_ms: number; compliance_ok: boolean | null };
}

const LIST_TARGET_MS = 100;
const COMPLIANCE_TARGET_MS = 300;
const REGIONS = ['eu-west-1', 'eu-west-2', 'eu-central-1', 'us-east-1', 'us-east-2', 'us-west-2', 'ap-south-1', 'ap-northeast-1'];
const ROLES = ['web', 'db', 'app', 'cache', 'queue'];
const ENVS = ['prod', 'prod', 'prod', 'staging', 'dev'];
const DIRECTIVES_PER_NODE = 5;
const NOW = Date.UTC(2026, 0, 15, 12, 0, 0);
/** A certificate's worth of text per node, so rows are as wide as real ones. */
const CERT = `-----BEGIN CERTIFICATE-----\n${randomBytes(900).toString('base64').replace(/(.{64})/g, '$1\n')}\n-----END CERTIFICATE-----\n`;

interface Row {
  node: Record<(typeof NODE_COLUMNS)[number], unknown>;  // the certificate goes to node_certificates
  tags: Array<[string, string]>;
  groups: string[];
  compliance: number[];
  directives: Array<{ rule: string; directive: string; counts: number[] }>;
}

/** Node i of the benchmark fleet: deterministic, so both stores hold the same registry. */
function row(i: number): Row {
  const role = ROLES[i % ROLES.length]!;
  const id = `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
  const hostname = `${role}-${String(i).padStart(6, '0')}.dc${i % 3}.example.com`;
  const status = i % 50 === 0 ? 'unreachable' : i % 97 === 0 ? 'unknown' : 'reachable';
  const lastRun = status === 'unknown' ? null : new Date(NOW - (i % 1440) * 60_000).toISOString();
  const env = ENVS[i % ENVS.length]!;
  const tags: Array<[string, string]> = [['env', env], ['role', role], ['team', `team-${i % 40}`]];
  const groups = [`g${i % 20}`, ...(i % 7 === 0 ? ['canary'] : [])];
  const at = new Date(NOW - 30 * 86_400_000).toISOString();
  const node = {
    id, hostname, status, state: i % 200 === 0 ? 'stopped' : 'running', accepted: i % 100 === 1 ? 'pending' : 'accepted',
    certificate_fingerprint: id.replace(/-/g, '').padEnd(64, 'f'), os_name: 'debian', os_version: '12',
    agent_version: '0.1.0', policy_server: `relay-${i % 10}`, created_at: at, updated_at: at, accepted_at: at,
    last_inventory_at: lastRun, last_run_at: lastRun, last_config_id: lastRun ? `cfg-${i % 5}` : null,
    name: hostname, address: null, manager: 'agent', region: REGIONS[i % REGIONS.length]!, source_id: null, account_id: null,
    tags_json: JSON.stringify(Object.fromEntries(tags)), groups_json: JSON.stringify(groups), last_contact_at: lastRun,
    state_changed_at: at, policy_config_id: `cfg-${i % 5}`, relay: 0,
    conflict_certificate: null, conflict_fingerprint: null, conflict_at: null, clock_skew: null, clock_skew_at: null,
  } satisfies Record<(typeof NODE_COLUMNS)[number], unknown>;
  const directives = Array.from({ length: DIRECTIVES_PER_NODE }, (_, d) => {
    // In RUN_STATES order: success, repaired, error, non compliant, audit compliant, not applicable, unexpected, missing.
    const counts = [3, i % 11 === d ? 1 : 0, i % 13 === d ? 1 : 0, i % 17 === d ? 1 : 0, 0, d === 4 ? 1 : 0, 0, i % 19 === d ? 1 : 0];
    return { rule: `rule-${d % 3}`, directive: `directive-${d}`, counts };
  });
  const compliance = RUN_STATES.map((_, c) => directives.reduce((s, d) => s + d.counts[c]!, 0));
  return { node, tags, groups, compliance: lastRun ? compliance : [], directives: lastRun ? directives : [] };
}

/** When the node's last run was received (epoch seconds): spread over the day before NOW, so some go silent each minute. */
const answeredS = (r: Row) => Math.floor(Date.parse(r.node.last_run_at as string) / 1000);

const sqlValue = (v: unknown) => (v === undefined ? null : v);

export function loadSqlite(path: string, n: number): void {
  const db = new Database(path);
  try {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = OFF');
    const insNode = db.prepare(`INSERT INTO nodes (${NODE_COLUMNS.join(', ')}) VALUES (${NODE_COLUMNS.map(() => '?').join(', ')})`);
    const insCert = db.prepare('INSERT INTO node_certificates (node_id, certificate) VALUES (?, ?)');
    const insTag = db.prepare('INSERT INTO node_tags (node_id, key, value) VALUES (?, ?, ?)');
    const insGroup = db.prepare('INSERT INTO node_groups (node_id, group_id) VALUES (?, ?)');
    const cats = RUN_STATES.join(', ');
    const insComp = db.prepare(`INSERT INTO node_compliance (node_id, run_id, run_started_at, run_started_utc, config_id, expected, computed_at, outcomes, answered_s, ${cats})
      VALUES (?, ?, ?, ?, ?, 1, ?, '[]', ?, ${RUN_STATES.map(() => '?').join(', ')})`);
    const insDir = db.prepare(`INSERT INTO node_compliance_directives (node_id, rule_id, directive_id, ${cats}) VALUES (?, ?, ?, ${RUN_STATES.map(() => '?').join(', ')})`);
    // The kept-compliance triggers cost minutes over 100,000 nodes row by row: off while loading,
    // the counters then made from the rows at once, as the migration does for an old database.
    const triggers = db.prepare("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'kept\\_%' ESCAPE '\\'").all() as Array<{ name: string; sql: string }>;
    for (const tr of triggers) db.exec(`DROP TRIGGER ${tr.name}`);
    db.transaction(() => {
      for (let i = 0; i < n; i++) {
        const r = row(i);
        insNode.run(...NODE_COLUMNS.map((c) => sqlValue(r.node[c])));
        insCert.run(r.node.id, CERT);
        for (const [k, v] of r.tags) insTag.run(r.node.id, k, v);
        for (const g of r.groups) insGroup.run(r.node.id, g);
        if (r.compliance.length) {
          insComp.run(r.node.id, i, r.node.last_run_at, r.node.last_run_at, r.node.last_config_id, r.node.last_run_at, answeredS(r), ...r.compliance);
          for (const d of r.directives) insDir.run(r.node.id, d.rule, d.directive, ...d.counts);
        }
      }
      db.exec(sqliteKeptRefill + sqliteKeptGroupsRefill + sqliteKeptSharesRefill + sqliteKeptTargetsRefill);
      for (const tr of triggers) db.exec(tr.sql);
    })();
    db.exec('ANALYZE');
  } finally {
    db.close();
  }
}

export async function loadPostgres(c: pg.Client, n: number): Promise<void> {
  const CHUNK = 5000;
  const cats = RUN_STATES.join(', ');
  for (let start = 0; start < n; start += CHUNK) {
    const rows = Array.from({ length: Math.min(CHUNK, n - start) }, (_, k) => row(start + k));
    const cols = NODE_COLUMNS.map((col) => rows.map((r) => sqlValue(r.node[col])));
    // Each array cast to its column's type (`relay`, migration 9, and `clock_skew`, migration 13, are the integer columns).
    const types = NODE_COLUMNS.map((col) => (/_at$/.test(col) ? 'timestamptz[]' : /_json$/.test(col) ? 'jsonb[]'
      : col === 'relay' ? 'smallint[]' : col === 'clock_skew' ? 'integer[]' : 'text[]'));
    await c.query(`INSERT INTO nodes (${NODE_COLUMNS.join(', ')}) SELECT * FROM unnest(${types.map((t, i) => `$${i + 1}::${t}`).join(', ')})`, cols);
    await c.query('INSERT INTO node_certificates (node_id, certificate) SELECT unnest($1::text[]), $2', [rows.map((r) => r.node.id), CERT]);
    const tags = rows.flatMap((r) => r.tags.map(([k, v]) => [r.node.id, k, v]));
    await c.query('INSERT INTO node_tags (node_id, key, value) SELECT * FROM unnest($1::text[], $2::text[], $3::text[])', [0, 1, 2].map((j) => tags.map((x) => x[j])));
    const groups = rows.flatMap((r) => r.groups.map((g) => [r.node.id, g]));
    await c.query('INSERT INTO node_groups (node_id, group_id) SELECT * FROM unnest($1::text[], $2::text[])', [0, 1].map((j) => groups.map((x) => x[j])));
    const comp = rows.filter((r) => r.compliance.length);
    await c.query(`INSERT INTO node_compliance (node_id, run_id, run_started_at, run_started_utc, config_id, expected, computed_at, outcomes, answered_s, ${cats})
      SELECT node_id, run_id, started, started::timestamptz, config_id, true, started::timestamptz, '[]'::jsonb, answered_s, ${cats}
      FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::bigint[], ${RUN_STATES.map((_, i) => `$${i + 6}::int[]`).join(', ')})
        AS u(node_id, run_id, started, config_id, answered_s, ${cats})`,
    [comp.map((r) => r.node.id), comp.map((_, k) => start + k), comp.map((r) => r.node.last_run_at), comp.map((r) => r.node.last_config_id),
      comp.map(answeredS), ...RUN_STATES.map((_, ci) => comp.map((r) => r.compliance[ci]))]);
    const dirs = comp.flatMap((r) => r.directives.map((d) => ({ id: r.node.id, ...d })));
    await c.query(`INSERT INTO node_compliance_directives (node_id, rule_id, directive_id, ${cats})
      SELECT * FROM unnest($1::text[], $2::text[], $3::text[], ${RUN_STATES.map((_, i) => `$${i + 4}::int[]`).join(', ')})`,
    [dirs.map((d) => d.id), dirs.map((d) => d.rule), dirs.map((d) => d.directive), ...RUN_STATES.map((_, ci) => dirs.map((d) => d.counts[ci]))]);
  }
  // What autovacuum would have done by the time a fleet this size is queried (visibility map).
  await c.query('VACUUM ANALYZE');
}

/** `fn` run `rounds` times after one warm-up: the median and the worst. */
export async function time(rounds: number, fn: () => Promise<unknown>): Promise<Timing> {
  await fn(); // warm-up: statement caches, page cache
  const ms: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const t0 = process.hrtime.bigint();
    await fn();
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  ms.sort((a, b) => a - b);
  const round = (x: number) => Math.round(x * 10) / 10;
  return { median_ms: round(ms[Math.floor(ms.length / 2)]!), max_ms: round(ms[ms.length - 1]!) };
}

/** The list cases: what an admin of a big fleet filters on. */
function listCases(n: number): Record<string, Partial<NodeListQuery>> {
  const f = (...filters: NodeFilter[]) => ({ filters });
  return {
    'all, by name': {},
    'name=web*': f({ key: 'name', values: ['web*'] }),
    'tag:env=prod & region=eu-*': f({ key: 'tag:env', values: ['prod'] }, { key: 'region', values: ['eu-*'] }),
    'status=unreachable|unknown & not tag:env=dev': f({ key: 'status', values: ['unreachable', 'unknown'] }, { key: 'tag:env', values: ['dev'], exclude: true }),
    'group=g3, by last run desc': { ...f({ key: 'group', values: ['g3'] }), sort: 'last_run_at', order: 'desc' },
    'last_run in the last hour': f({ key: 'last_run', values: [`${new Date(NOW - 3_600_000).toISOString()}..`] }),
    'name=db* & state=running, deep page': { ...f({ key: 'name', values: ['db*'] }, { key: 'state', values: ['running'] }), page: Math.max(1, Math.floor(n / 5 / 100) - 1) },
  };
}

async function measure(store: Store, kind: 'sqlite' | 'postgres', n: number, rounds: number, loadMs: number, log: (l: string) => void): Promise<RegistryBenchResult> {
  const list: RegistryBenchResult['list'] = {};
  for (const [name, q] of Object.entries(listCases(n))) {
    let total = 0;
    const timing = await time(rounds, async () => {
      total = (await store.listNodes({ page: 1, per_page: 100, ...q })).total;
    });
    list[name] = { ...timing, total };
    log(`${kind} list ${name}: ${timing.median_ms} ms (max ${timing.max_ms}), ${total} nodes`);
  }
  // The fleet as it stands at NOW (its runs are spread over the day before); the counters are
  // swept there once, as the server's sweep does every 30 s.
  const settings = { runIntervalMs: 300_000, missedRuns: 3, applyingGraceMs: 300_000 };
  const clock = complianceClock(settings, new Date(NOW));
  const later = complianceClock(settings, new Date(NOW + 600_000));
  const s0 = process.hrtime.bigint();
  const swept = await store.sweepCompliance(clock);
  const sweepMs = Math.round(Number(process.hrtime.bigint() - s0) / 1e5) / 10;
  log(`${kind} compliance sweep after the load: ${sweepMs} ms (${swept.checked} nodes looked at, ${swept.folded} log rows folded)`);
  const compliance: RegistryBenchResult['compliance'] = {
    global: await time(rounds, () => store.complianceSummary([], clock)),
    'global, tag:env=prod': await time(rounds, () => store.complianceSummary([{ key: 'tag:env', values: ['prod'] }], clock)),
    'by rule': await time(rounds, () => store.complianceByRule('rule', clock)),
    'by directive': await time(rounds, () => store.complianceByRule('directive', clock)),
    'by directive, 10 min after the sweep': await time(rounds, () => store.complianceByRule('directive', later)),
    'global, summed afresh': await time(1, () => store.complianceSummaryFresh(clock)),
    'by rule, summed afresh': await time(1, () => store.complianceByRuleFresh('rule', clock)),
    'by directive, summed afresh': await time(1, () => store.complianceByRuleFresh('directive', clock)),
  };
  compliance['sweep after the load'] = { median_ms: sweepMs, max_ms: sweepMs };
  for (const [name, timing] of Object.entries(compliance)) log(`${kind} compliance ${name}: ${timing.median_ms} ms (max ${timing.max_ms})`);
  // The kept figures must be the fresh ones, or the timing means nothing.
  for (const at of [clock, later]) {
    const same = JSON.stringify([await store.complianceSummary([], at), await store.complianceByRule('directive', at)])
      === JSON.stringify([await store.complianceSummaryFresh(at), await store.complianceByRuleFresh('directive', at)]);
    if (!same) throw new Error(`${kind}: kept compliance differs from the fresh sums`);
  }
  const listMs = Math.max(...Object.values(list).map((x) => x.median_ms));
  const compMs = Math.max(...['global', 'by rule', 'by directive', 'by directive, 10 min after the sweep'].map((k) => compliance[k]!.median_ms));
  return {
    store: kind, nodes: n, load_ms: loadMs, list, compliance,
    targets: {
      list_ms: listMs, list_ok: listMs <= LIST_TARGET_MS,
      compliance_ms: compMs, compliance_ok: compMs <= COMPLIANCE_TARGET_MS,
    },
  };
}

export async function benchRegistry(opts: RegistryBenchOptions = {}): Promise<RegistryBenchResult[]> {
  const n = opts.nodes ?? 100_000;
  const rounds = opts.rounds ?? 5;
  const log = opts.log ?? (() => undefined);
  const results: RegistryBenchResult[] = [];

  if (opts.sqlite !== false) await withSqlite('capstan-bench-registry-', async (path) => {
    const t0 = Date.now();
    loadSqlite(path, n);
    const loadMs = Date.now() - t0;
    log(`sqlite: ${n} nodes loaded in ${loadMs} ms`);
    results.push(await withSqliteStore(path, (store) => measure(store, 'sqlite', n, rounds, loadMs, log)));
  });

  if (opts.databaseUrl) {
    await withPostgres(opts.databaseUrl, { schemaPrefix: 'capstan_bench_', poolSize: 2 }, async (store, admin) => {
      const t0 = Date.now();
      await loadPostgres(admin, n);
      const loadMs = Date.now() - t0;
      log(`postgres: ${n} nodes loaded in ${loadMs} ms`);
      results.push(await measure(store, 'postgres', n, rounds, loadMs, log));
    });
  }
  return results;
}
