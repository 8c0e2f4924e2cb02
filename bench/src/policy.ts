/**
 * Policy generation benchmark (target: 100,000 nodes regenerate in ≤ 10 s). A SQLite
 * registry of `nodes` nodes is filled in bulk (registry.ts's fleet), and with `databaseUrl` a
 * PostgreSQL one too (its figures under `postgres`), a model of a few rules over
 * static and dynamic groups is saved, and then timed: the first generation of every node, a
 * second pass with nothing to change, and one directive change reaching its rule's nodes.
 * Then the same fleet with node data in play: properties at three levels (global, two groups
 * of different priorities, a tenth of the nodes their own), an inventory per node, and
 * directives whose templates read a group property, a node property, the host name and a fact,
 * so every node is rendered on its own; timed the same three ways, the change being one group
 * property's (regenerating only that group's members).
 * Each change is also made to a static group of 1 % of the fleet (a rule of its own, then a
 * property of that group): what it regenerates must stay at its members. Every step is reported
 * in wall and CPU time (`*_cpu_ms`, this process's user + system: on a machine shared with other
 * work, the wall time also counts waiting for a core); on PostgreSQL also the CPU time of the
 * database backends serving the store (`*_db_cpu_ms`, from /proc, when the server is local).
 * This fleet's runs carry no outcomes; under `reported`, a fleet whose runs reported on every
 * component is timed too (policy-reported.ts).
 */
import { randomBytes } from 'node:crypto';
import Database from 'better-sqlite3';
import type pg from 'pg';
import { silentLogger } from '@capstan/shared';
import { PolicyGenerator } from '@capstan/server/policy/generate';
import { defaultRenderThreads } from '@capstan/server/policy/render-pool';
import { endedChildrenCpuSeconds, parentPid, processCpuSeconds, processSetDelta, type ProcessSetSample } from './proc-cpu.js';
import { benchReported, type ReportedResult } from './policy-reported.js';
import { loadPostgres, loadSqlite } from './registry.js';
import { withPostgres, withSqlite, withSqliteStore, type Store } from './store.js';

/** The timed steps. */
type Step = 'first' | 'unchanged' | 'directive_change' | 'one_percent_directive_change' | 'templated_first' | 'templated_unchanged'
  | 'group_property_change' | 'one_percent_property_change';
/** On PostgreSQL, the CPU time of the database backends serving the store in each step (ms), when the server runs on this machine. */
type DbCpu = Partial<Record<`${Step}_db_cpu_ms`, number>>;

export interface PolicyBenchResult extends DbCpu {
  nodes: number;
  first_ms: number;
  first_changed: number;
  unchanged_ms: number;
  directive_change_ms: number;
  directive_change_nodes: number;
  /** With properties at three levels and templates reading node data (every node rendered). */
  templated_first_ms: number;
  templated_first_changed: number;
  templated_unchanged_ms: number;
  group_property_change_ms: number;
  group_property_change_nodes: number;
  /** A directive of a rule reaching 1 % of the fleet changed: nodes regenerated (gone through) and changed. */
  one_percent_directive_change_ms: number;
  one_percent_directive_change_regenerated: number;
  one_percent_directive_change_nodes: number;
  /** A property of that 1 % group changed, node data in play. */
  one_percent_property_change_ms: number;
  one_percent_property_change_regenerated: number;
  one_percent_property_change_nodes: number;
  /** CPU time of each step above (user + system of this process). */
  first_cpu_ms: number;
  unchanged_cpu_ms: number;
  directive_change_cpu_ms: number;
  one_percent_directive_change_cpu_ms: number;
  templated_first_cpu_ms: number;
  templated_unchanged_cpu_ms: number;
  /** The bundles' tables and their indexes after the first generation (null: not measured here). */
  first_bundles_bytes: number | null;
  first_bundles_per_node_bytes: number | null;
  group_property_change_cpu_ms: number;
  one_percent_property_change_cpu_ms: number;
  target_ms: number;
  ok: boolean;
  /** Render threads the generators had (a server's default for this machine). */
  render_threads: number;
}

/** Node data for the templated pass, node i's: an inventory, and for a tenth a property of their own. */
function nodeData(id: string, i: number, at: string): { inventory: string; owner?: string } {
  const inventory = JSON.stringify({ node_id: id, hostname: `host-${i}`, os: { name: 'debian', version: '12' }, cpus: { count: 4 }, facts: { site: { room: `R${i % 40}` } } });
  return i % 10 === 0 ? { inventory, owner: `team-${i % 7}` } : { inventory };
}

/** Node data for the templated pass: an inventory per node and a tenth with properties of their own. */
export function loadNodeData(path: string, nodes: number): void {
  const db = new Database(path);
  try {
    db.pragma('journal_mode = WAL');
    const ids = db.prepare("SELECT id FROM nodes WHERE accepted = 'accepted'").pluck().all() as string[];
    const inv = db.prepare('INSERT OR REPLACE INTO inventories (node_id, received_at, document) VALUES (?, ?, ?)');
    // Values as JSON text, with their leaves for filters, as the store writes them (schema 24).
    const prop = db.prepare('INSERT OR REPLACE INTO node_properties (node_id, key, value) VALUES (?, ?, ?)');
    const leaf = db.prepare('INSERT OR REPLACE INTO node_property_leaves (node_id, path, value, num) VALUES (?, ?, ?, NULL)');
    const at = new Date().toISOString();
    db.transaction(() => {
      ids.forEach((id, i) => {
        const d = nodeData(id, i, at);
        inv.run(id, at, d.inventory);
        if (d.owner !== undefined) {
          prop.run(id, 'owner', JSON.stringify(d.owner));
          leaf.run(id, 'owner', d.owner);
        }
      });
    })();
    if (ids.length > nodes) throw new Error('more accepted nodes than loaded');
  } finally {
    db.close();
  }
}

/** loadNodeData on PostgreSQL, through a client whose search_path is the store's schema. */
export async function loadNodeDataPostgres(c: pg.Client): Promise<void> {
  const ids = (await c.query("SELECT id FROM nodes WHERE accepted = 'accepted' ORDER BY id")).rows.map((r) => r.id as string);
  const at = new Date().toISOString();
  const data = ids.map((id, i) => ({ id, ...nodeData(id, i, at) }));
  const owned = data.filter((d) => d.owner !== undefined);
  await c.query(`INSERT INTO inventories (node_id, received_at, document) SELECT u.id, $2, u.doc::json FROM unnest($1::text[], $3::text[]) AS u(id, doc)
    ON CONFLICT (node_id) DO UPDATE SET received_at = excluded.received_at, document = excluded.document`, [data.map((d) => d.id), at, data.map((d) => d.inventory)]);
  await c.query(`INSERT INTO node_properties (node_id, key, value) SELECT u.id, 'owner', u.v FROM unnest($1::text[], $2::text[]) AS u(id, v)
    ON CONFLICT (node_id, key) DO UPDATE SET value = excluded.value`, [owned.map((d) => d.id), owned.map((d) => JSON.stringify(d.owner))]);
  await c.query(`INSERT INTO node_property_leaves (node_id, path, value, num) SELECT u.id, 'owner', u.v, NULL FROM unnest($1::text[], $2::text[]) AS u(id, v)
    ON CONFLICT DO NOTHING`, [owned.map((d) => d.id), owned.map((d) => d.owner!)]);
  await c.query('ANALYZE');
}

export const POLICY_TARGET_MS = 10_000;

/** What the bundles take on SQLite at `path`: their tables and indexes, by SQLite's dbstat. */
function sqliteBundleBytes(path: string): number {
  const db = new Database(path, { readonly: true });
  try {
    return Number(db.prepare(`SELECT coalesce(sum(pgsize), 0) FROM dbstat
      WHERE name IN (SELECT name FROM sqlite_master WHERE tbl_name IN ('policy_bundles', 'policy_texts'))`).pluck().get());
  } finally {
    db.close();
  }
}

/** The CPU seconds of the database backends serving the store so far (PostgreSQL), or null. */
type DbCpuSample = () => Promise<ProcessSetSample | null>;

/** A step's stats with the CPU time this process spent in it, and with `db` the database backends' (ms). */
export async function cpuTimed<T>(fn: () => Promise<T>, db?: DbCpuSample): Promise<{ value: T; cpu_ms: number; db_cpu_ms: number | null }> {
  const d0 = await db?.();
  const c0 = process.cpuUsage();
  const value = await fn();
  const c = process.cpuUsage(c0);
  const d1 = await db?.();
  let dbMs: number | null = null;
  // The pool closes a connection idle for 10 s, during a step too: its backend's CPU is then
  // read from what the postmaster collected (taking it as lost undercounted a step by up to half).
  if (d0 && d1) dbMs = Math.round(processSetDelta(d0, d1) * 1000);
  return { value, cpu_ms: Math.round((c.user + c.system) / 1000), db_cpu_ms: dbMs };
}

/**
 * The CPU of the PostgreSQL backends whose application_name is `name` (the store's pool), read
 * from /proc, with the postmaster's collected CPU of those that closed: null when the server is
 * not on this machine.
 */
export function backendCpu(admin: pg.Client, name: string): DbCpuSample {
  let postmaster: number | null | undefined;
  return async () => {
    if (postmaster === undefined) {
      const own = (await admin.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      postmaster = parentPid(own);
    }
    const ended = postmaster === null ? null : endedChildrenCpuSeconds(postmaster);
    if (ended === null) return null;
    const { rows } = await admin.query('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [name]);
    const live = new Map<number, number>();
    for (const r of rows) {
      // null: ended meanwhile (its CPU reaches `ended` by the next reading).
      const seconds = processCpuSeconds(r.pid as number);
      if (seconds !== null) live.set(r.pid as number, seconds);
    }
    return { live, ended };
  };
}

export interface PolicyBenchOptions {
  nodes?: number;
  log?: (line: string) => void;
  /** Measure on PostgreSQL too (a schema of its own, dropped after); its figures go under `postgres`. */
  databaseUrl?: string;
  /** false: PostgreSQL only (the SQLite figures left out). */
  sqlite?: boolean;
  /** false: without the fleet whose runs reported (policy-reported.ts). */
  reported?: boolean;
}

/**
 * SQLite's figures at the top level (as they always were), PostgreSQL's under `postgres`, and
 * those of the fleet whose runs reported under `reported`.
 */
export type PolicyBenchOutput = Partial<PolicyBenchResult> & { postgres?: PolicyBenchResult; reported?: { sqlite?: ReportedResult; postgres?: ReportedResult } };

/** 1 % of the fleet, by id (registry.ts's node i; every hundredth is pending, none of these). */
const onePercentOf = (nodes: number) => Array.from({ length: Math.max(1, Math.floor(nodes / 100)) }, (_, k) => `00000000-0000-4000-8000-${String(k * 100 + 3).padStart(12, '0')}`);

/** Batches a PostgreSQL server writes at once by default (`[policy] write_batches`). */
const PG_WRITE_BATCHES = 2;

export async function benchPolicy(opts: PolicyBenchOptions = {}): Promise<PolicyBenchOutput> {
  const nodes = opts.nodes ?? 100_000;
  const log = opts.log ?? (() => undefined);
  const out: PolicyBenchOutput = {};
  if (opts.sqlite !== false) {
    Object.assign(out, await withSqlite('capstan-policy-bench-', async (path) => {
      loadSqlite(path, nodes);
      return withSqliteStore(path, (store) => measure(store, nodes, 1, (line) => log(`sqlite ${line}`), async () => loadNodeData(path, nodes), undefined, async () => sqliteBundleBytes(path)));
    }));
  }
  if (opts.databaseUrl) {
    // The store's connections named, so that their backends' CPU can be told from any other's.
    const app = `capstan_policy_bench_${randomBytes(4).toString('hex')}`;
    const url = new URL(opts.databaseUrl);
    url.searchParams.set('application_name', app);
    out.postgres = await withPostgres(url.toString(), { schemaPrefix: 'capstan_bench_', poolSize: 4 }, async (store, admin) => {
      const t0 = Date.now();
      await loadPostgres(admin, nodes);
      log(`postgres policy bench: ${nodes} nodes loaded in ${Date.now() - t0} ms`);
      return measure(store, nodes, PG_WRITE_BATCHES, (line) => log(`postgres ${line}`), () => loadNodeDataPostgres(admin), backendCpu(admin, app), async () => Number((await admin.query(
        "SELECT pg_total_relation_size('policy_bundles') + coalesce(pg_total_relation_size(to_regclass('policy_texts')), 0) AS b")).rows[0].b));
    });
  }
  if (opts.reported !== false) {
    const app = `capstan_policy_bench_${randomBytes(4).toString('hex')}`;
    const url = opts.databaseUrl ? new URL(opts.databaseUrl) : null;
    url?.searchParams.set('application_name', app);
    out.reported = await benchReported({
      nodes, log: (line) => log(`reported: ${line}`), sqlite: opts.sqlite !== false, timed: (fn) => cpuTimed(fn),
      ...(url && { postgres: { url: url.toString(), writeBatches: PG_WRITE_BATCHES, timed: (admin: pg.Client) => (fn) => cpuTimed(fn, backendCpu(admin, app)) } }),
    });
  }
  return out;
}

/**
 * The model saved, then every step timed on `store`, its generations writing `writeBatches`
 * batches at once; `loadData` adds the node data before the templated steps.
 */
async function measure(store: Store, nodes: number, writeBatches: number, log: (line: string) => void, loadData: () => Promise<void>, dbCpu?: DbCpuSample, bundleBytes?: () => Promise<number>): Promise<PolicyBenchResult> {
  const onePercent = onePercentOf(nodes);
  const db: DbCpu = {};
  const timed = async <T>(step: Step, fn: () => Promise<T>) => {
    const r = await cpuTimed(fn, dbCpu);
    if (r.db_cpu_ms !== null) db[`${step}_db_cpu_ms`] = r.db_cpu_ms;
    return r;
  };
  const at = new Date().toISOString();
  for (let d = 0; d < 10; d++) {
    await store.putPolicyObject('directive', `d${d}`, { id: `d${d}`, name: `d${d}`, method: 'file_content', mode: 'enforce', params: { path: `/etc/capstan-${d}`, content: `value ${d}\n` } }, at);
  }
  await store.putPolicyObject('group', 'all', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] }, at);
  await store.putPolicyObject('group', 'prod', { id: 'prod', name: 'prod', filter: [{ key: 'tag:env', values: ['prod'] }] }, at);
  await store.putPolicyObject('group', 'web', { id: 'web', name: 'web', filter: [{ key: 'hostname', values: ['web-*'] }] }, at);
  await store.putPolicyObject('group', 'canary', { id: 'canary', name: 'canary', filter: [{ key: 'group', values: ['canary'] }] }, at);
  await store.putPolicyObject('rule', 'base', { id: 'base', name: 'base', directives: ['d0', 'd1', 'd2', 'd3'], groups: ['all'] }, at);
  await store.putPolicyObject('rule', 'prod', { id: 'prod', name: 'prod', directives: ['d4', 'd5'], groups: ['prod'] }, at);
  await store.putPolicyObject('rule', 'web', { id: 'web', name: 'web', directives: ['d6', 'd7'], groups: ['web'] }, at);
  await store.putPolicyObject('rule', 'canary', { id: 'canary', name: 'canary', directives: ['d8', 'd9'], groups: ['canary'] }, at);
  await store.putPolicyObject('directive', 'd10', { id: 'd10', name: 'd10', method: 'file_content', mode: 'enforce', params: { path: '/etc/capstan-10', content: 'value 10\n' } }, at);
  await store.putPolicyObject('group', 'pct', { id: 'pct', name: 'pct', nodes: onePercent }, at);
  await store.putPolicyObject('rule', 'pct', { id: 'pct', name: 'pct', directives: ['d10'], groups: ['pct'] }, at);
  // Render threads as a server has them by default (`[policy] render_threads = -1`).
  const threads = defaultRenderThreads();
  const gen = new PolicyGenerator({ store, log: silentLogger, renderThreads: threads, writeBatches });
  log(`policy bench: ${nodes} nodes loaded, ${threads} render threads`);
  const { value: first, cpu_ms: firstCpu } = await timed('first', () => gen.regenerateAll());
  const bundles = (await bundleBytes?.()) ?? null;
  log(`policy bench: first generation ${first.ms.toFixed(0)} ms, ${firstCpu} ms CPU (${first.changed} bundles${bundles === null ? '' : `, ${(bundles / 1048576).toFixed(1)} MiB stored`})`);
  const { value: again, cpu_ms: againCpu } = await timed('unchanged', () => gen.regenerateAll());
  log(`policy bench: unchanged pass ${again.ms.toFixed(0)} ms, ${againCpu} ms CPU`);
  const { value: change, cpu_ms: changeCpu } = await timed('directive_change', () => gen.change('directive', 'd6', () =>
    store.putPolicyObject('directive', 'd6', { id: 'd6', name: 'd6', method: 'file_content', mode: 'enforce', params: { path: '/etc/capstan-6', content: 'changed\n' } }, new Date().toISOString())));
  log(`policy bench: one directive change ${change.stats.ms.toFixed(0)} ms, ${changeCpu} ms CPU (${change.stats.changed} of ${nodes} nodes)`);
  const { value: pct, cpu_ms: pctCpu } = await timed('one_percent_directive_change', () => gen.change('directive', 'd10', () =>
    store.putPolicyObject('directive', 'd10', { id: 'd10', name: 'd10', method: 'file_content', mode: 'enforce', params: { path: '/etc/capstan-10', content: 'changed\n' } }, new Date().toISOString())));
  log(`policy bench: one directive change reaching 1 % ${pct.stats.ms.toFixed(0)} ms, ${pctCpu} ms CPU (${pct.stats.nodes} regenerated, ${pct.stats.changed} changed)`);

  // Node data in play: every node's bundle rendered on its own.
  await loadData();
  const t = new Date().toISOString();
  await store.putPolicyObject('property', 'owner', { id: 'owner', value: 'ops' }, t);
  await store.putPolicyObject('property', 'dc', { id: 'dc', value: { dns: '10.0.0.1', ntp: 'pool.ntp.org' } }, t);
  await store.putPolicyObject('property', 'limits', { id: 'limits', value: { nofile: 1024 } }, t);
  await store.putPolicyObject('group', 'prod', { id: 'prod', name: 'prod', filter: [{ key: 'tag:env', values: ['prod'] }], priority: 1, properties: { dc: { value: { dns: '10.1.0.1' } } } }, t);
  await store.putPolicyObject('group', 'web', { id: 'web', name: 'web', filter: [{ key: 'hostname', values: ['web-*'] }], priority: 2, properties: { limits: { value: { nofile: 65536 } } } }, t);
  await store.putPolicyObject('directive', 'd0', { id: 'd0', name: 'd0', method: 'file_content', mode: 'enforce',
    params: { path: '/etc/motd', content: 'owner ${node.properties.owner}, dns {{node.properties.dc.dns}}, host {{node.hostname}}, room {{facts.site.room}}\n' } }, t);
  await store.putPolicyObject('directive', 'd1', { id: 'd1', name: 'd1', method: 'file_from_template', mode: 'enforce',
    params: { path: '/etc/limits.conf', template: '* soft nofile {{node.properties.limits.nofile}}\n# {{os.name}} {{os.version}}, {{cpus.count}} cpus\n' } }, t);
  await store.putPolicyObject('group', 'pct', { id: 'pct', name: 'pct', nodes: onePercent, priority: 3, properties: { limits: { value: { nofile: 4096 } } } }, t);
  const gen2 = new PolicyGenerator({ store, log: silentLogger, renderThreads: threads, writeBatches });
  const { value: tFirst, cpu_ms: tFirstCpu } = await timed('templated_first', () => gen2.regenerateAll());
  log(`policy bench: templated, first generation ${tFirst.ms.toFixed(0)} ms, ${tFirstCpu} ms CPU (${tFirst.changed} bundles)`);
  const { value: tAgain, cpu_ms: tAgainCpu } = await timed('templated_unchanged', () => gen2.regenerateAll());
  log(`policy bench: templated, unchanged pass ${tAgain.ms.toFixed(0)} ms, ${tAgainCpu} ms CPU`);
  const { value: gChange, cpu_ms: gChangeCpu } = await timed('group_property_change', () => gen2.change('group', 'web', () => store.putPolicyObject('group', 'web',
    { id: 'web', name: 'web', filter: [{ key: 'hostname', values: ['web-*'] }], priority: 2, properties: { limits: { value: { nofile: 131072 } } } }, new Date().toISOString())));
  log(`policy bench: templated, one group property change ${gChange.stats.ms.toFixed(0)} ms, ${gChangeCpu} ms CPU (${gChange.stats.changed} of ${nodes} nodes)`);
  const { value: pChange, cpu_ms: pChangeCpu } = await timed('one_percent_property_change', () => gen2.change('group', 'pct', () => store.putPolicyObject('group', 'pct',
    { id: 'pct', name: 'pct', nodes: onePercent, priority: 3, properties: { limits: { value: { nofile: 8192 } } } }, new Date().toISOString())));
  log(`policy bench: templated, a property of a 1 % group changed ${pChange.stats.ms.toFixed(0)} ms, ${pChangeCpu} ms CPU (${pChange.stats.nodes} regenerated, ${pChange.stats.changed} changed)`);
  await gen.close();
  await gen2.close();
  return {
    nodes, render_threads: threads, first_ms: Math.round(first.ms), first_changed: first.changed, unchanged_ms: Math.round(again.ms),
    directive_change_ms: Math.round(change.stats.ms), directive_change_nodes: change.stats.changed,
    templated_first_ms: Math.round(tFirst.ms), templated_first_changed: tFirst.changed, templated_unchanged_ms: Math.round(tAgain.ms),
    group_property_change_ms: Math.round(gChange.stats.ms), group_property_change_nodes: gChange.stats.changed,
    one_percent_directive_change_ms: Math.round(pct.stats.ms), one_percent_directive_change_regenerated: pct.stats.nodes, one_percent_directive_change_nodes: pct.stats.changed,
    one_percent_property_change_ms: Math.round(pChange.stats.ms), one_percent_property_change_regenerated: pChange.stats.nodes, one_percent_property_change_nodes: pChange.stats.changed,
    first_cpu_ms: firstCpu, unchanged_cpu_ms: againCpu, directive_change_cpu_ms: changeCpu, one_percent_directive_change_cpu_ms: pctCpu,
    first_bundles_bytes: bundles, first_bundles_per_node_bytes: bundles === null || first.changed === 0 ? null : Math.round(bundles / first.changed),
    templated_first_cpu_ms: tFirstCpu, templated_unchanged_cpu_ms: tAgainCpu, group_property_change_cpu_ms: gChangeCpu, one_percent_property_change_cpu_ms: pChangeCpu,
    ...db,
    target_ms: POLICY_TARGET_MS, ok: first.ms <= POLICY_TARGET_MS && tFirst.ms <= POLICY_TARGET_MS,
  };
}
