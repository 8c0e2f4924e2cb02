/**
 * Policy generation over a fleet that has run (for `benchPolicy`): the same 100,000 nodes as the
 * policy bench (registry.ts), but each node's last run reported on every component its policy
 * expects, as an agent's run does, so that a generation judges real outcomes: about a hundred a
 * node, packed as the ingest packs them. The model is the policy bench's rules plus a hardening
 * technique every node has (three directives of thirty lines each, one component a line), the
 * shape of a RUDDER technique with its calls.
 *
 * Each node's list is what a first generation of this model gives it, taken from a first
 * generation on an SQLite fleet of its own (untimed); then, on each store, a fresh fleet whose
 * runs carry those outcomes is timed twice:
 * - `first`: every node's first policy, judged against its run;
 * - `rule_change`: a directive added to the rule every node has, so that every node's list
 *   changes and its run is judged again against the new list.
 */
import Database from 'better-sqlite3';
import type pg from 'pg';
import { silentLogger } from '@capstan/shared';
import { PolicyGenerator } from '@capstan/server/policy/generate';
import { defaultRenderThreads } from '@capstan/server/policy/render-pool';
import { loadPostgres, loadSqlite } from './registry.js';
import { packOutcomes, withPostgres, withSqlite, withSqliteStore, type Store } from './store.js';

/** Technique directives every node has, and the lines (components) of each. */
const TECHNIQUE_DIRECTIVES = 3;
const LINES = 30;

export interface ReportedResult {
  nodes: number;
  /** Nodes whose run carries outcomes, and the average outcomes and packed bytes of one. */
  reported_nodes: number;
  outcomes_per_node: number;
  packed_bytes_per_node: number;
  first_ms: number;
  first_cpu_ms: number;
  first_changed: number;
  rule_change_ms: number;
  rule_change_cpu_ms: number;
  rule_change_nodes: number;
  /** On PostgreSQL, when the server is local: the database backends' CPU in each step. */
  first_db_cpu_ms?: number;
  rule_change_db_cpu_ms?: number;
}

/** What a step is timed with (policy.ts cpuTimed, with the database's CPU when it can be read). */
export type Timed = <T>(fn: () => Promise<T>) => Promise<{ value: T; cpu_ms: number; db_cpu_ms: number | null }>;

/** The model: the policy bench's rules, and the hardening rule every node has. */
async function saveModel(store: Store, withExtra: boolean): Promise<void> {
  const at = new Date().toISOString();
  for (let d = 0; d < 11; d++) {
    await store.putPolicyObject('directive', `d${d}`, { id: `d${d}`, name: `d${d}`, method: 'file_content', mode: 'enforce', params: { path: `/etc/capstan-${d}`, content: `value ${d}\n` } }, at);
  }
  await store.putPolicyObject('technique', 'hardening', {
    id: 'hardening', name: 'Hardening', version: '1.0', parameters: [{ name: 'lines', type: 'list', default: [] }],
    calls: [{ id: 'line', name: 'Line {{item}}', foreach: 'lines', method: 'file_line_present', params: { path: '/etc/hardening.conf', line: '{{item}}' } }],
  }, at);
  const hardening = Array.from({ length: TECHNIQUE_DIRECTIVES }, (_, t) => `h${t}`);
  for (const [t, id] of hardening.entries()) {
    await store.putPolicyObject('directive', id, {
      id, name: id, method: 'technique', technique: { id: 'hardening', version: '1.0' }, mode: 'enforce',
      params: { lines: Array.from({ length: LINES }, (_, k) => `setting.${t}.${k} = value ${k}`) },
    }, at);
  }
  await store.putPolicyObject('group', 'all', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] }, at);
  await store.putPolicyObject('group', 'prod', { id: 'prod', name: 'prod', filter: [{ key: 'tag:env', values: ['prod'] }] }, at);
  await store.putPolicyObject('group', 'web', { id: 'web', name: 'web', filter: [{ key: 'hostname', values: ['web-*'] }] }, at);
  await store.putPolicyObject('group', 'canary', { id: 'canary', name: 'canary', filter: [{ key: 'group', values: ['canary'] }] }, at);
  await store.putPolicyObject('rule', 'base', { id: 'base', name: 'base', directives: ['d0', 'd1', 'd2', 'd3', ...(withExtra ? ['d10'] : [])], groups: ['all'] }, at);
  await store.putPolicyObject('rule', 'hardening', { id: 'hardening', name: 'hardening', directives: hardening, groups: ['all'] }, at);
  await store.putPolicyObject('rule', 'prod', { id: 'prod', name: 'prod', directives: ['d4', 'd5'], groups: ['prod'] }, at);
  await store.putPolicyObject('rule', 'web', { id: 'web', name: 'web', directives: ['d6', 'd7'], groups: ['web'] }, at);
  await store.putPolicyObject('rule', 'canary', { id: 'canary', name: 'canary', directives: ['d8', 'd9'], groups: ['canary'] }, at);
}

type Component = { rule_id: string; directive_id: string; component: string };

/** Each node's expectation list under the model, from a first generation on a fleet of its own. */
async function listsOf(nodes: number, threads: number): Promise<{ lists: Map<string, Component[]>; listOf: Map<string, string> }> {
  const lists = new Map<string, Component[]>();
  const listOf = new Map<string, string>();
  await withSqlite('capstan-policy-lists-', async (path) => {
    loadSqlite(path, nodes);
    await withSqliteStore(path, async (store) => {
      await saveModel(store, false);
      const gen = new PolicyGenerator({ store, log: silentLogger, renderThreads: threads, writeBatches: 1 });
      await gen.regenerateAll();
      await gen.close();
    });
    const db = new Database(path, { readonly: true });
    try {
      for (const r of db.prepare('SELECT e.node_id, l.digest, l.components FROM node_expectations e JOIN expectation_lists l ON l.digest = e.list').all() as Array<{ node_id: string; digest: string; components: string }>) {
        if (!lists.has(r.digest)) lists.set(r.digest, JSON.parse(r.components) as Component[]);
        listOf.set(r.node_id, r.digest);
      }
    } finally {
      db.close();
    }
  });
  return { lists, listOf };
}

/**
 * Node `id`'s run: every component of its list reported, most of them successes, one in
 * seventeen repaired, and on one node in 97 one error (a finding to open), each with 1–3 reports.
 */
function outcomesOf(list: readonly Component[], i: number): Buffer {
  return packOutcomes(JSON.stringify(list.map((c, k) => ({
    ...c, outcome: i % 97 === 5 && k === 3 ? 'result_error' : (i + k) % 17 === 0 ? 'result_repaired' : 'result_success', count: 1 + (k % 3),
  }))));
}

/** The node number of a bench node id (registry.ts). */
const numberOf = (id: string) => Number(id.slice(-12));

/** The model saved on a loaded fleet whose runs reported, then both steps timed. */
async function steps(store: Store, writeBatches: number, threads: number, timed: Timed, log: (line: string) => void) {
  await saveModel(store, false);
  const gen = new PolicyGenerator({ store, log: silentLogger, renderThreads: threads, writeBatches });
  const first = await timed(() => gen.regenerateAll());
  log(`first generation over runs that reported ${first.value.ms.toFixed(0)} ms, ${first.cpu_ms} ms CPU (${first.value.changed} bundles)`);
  const change = await timed(() => gen.change('rule', 'base', () => saveModel(store, true)));
  log(`a directive added to the rule every node has ${change.value.stats.ms.toFixed(0)} ms, ${change.cpu_ms} ms CPU (${change.value.stats.changed} nodes)`);
  await gen.close();
  return {
    first_ms: Math.round(first.value.ms), first_cpu_ms: first.cpu_ms, first_changed: first.value.changed,
    rule_change_ms: Math.round(change.value.stats.ms), rule_change_cpu_ms: change.cpu_ms, rule_change_nodes: change.value.stats.changed,
    ...(first.db_cpu_ms !== null && { first_db_cpu_ms: first.db_cpu_ms }), ...(change.db_cpu_ms !== null && { rule_change_db_cpu_ms: change.db_cpu_ms }),
  };
}

export interface ReportedOptions {
  nodes: number;
  log: (line: string) => void;
  sqlite: boolean;
  /** SQLite's timing (this process's CPU). */
  timed: Timed;
  /** PostgreSQL: its URL (with the application name `dbTimed` reads the backends by), its batches at once, its timing. */
  postgres?: { url: string; writeBatches: number; timed: (admin: pg.Client) => Timed };
}

export async function benchReported(o: ReportedOptions): Promise<{ sqlite?: ReportedResult; postgres?: ReportedResult }> {
  const threads = defaultRenderThreads();
  const { lists, listOf } = await listsOf(o.nodes, threads);
  const stats = { reported: 0, outcomes: 0, bytes: 0 };
  const packedFor = (id: string): Buffer | null => {
    const digest = listOf.get(id);
    if (digest === undefined) return null;
    const list = lists.get(digest)!;
    const packed = outcomesOf(list, numberOf(id));
    stats.reported++;
    stats.outcomes += list.length;
    stats.bytes += packed.length;
    return packed;
  };
  const summary = () => {
    const r = { reported_nodes: stats.reported, outcomes_per_node: Math.round(stats.outcomes / Math.max(1, stats.reported)), packed_bytes_per_node: Math.round(stats.bytes / Math.max(1, stats.reported)) };
    Object.assign(stats, { reported: 0, outcomes: 0, bytes: 0 });
    return r;
  };
  const out: { sqlite?: ReportedResult; postgres?: ReportedResult } = {};
  if (o.sqlite) {
    out.sqlite = await withSqlite('capstan-policy-reported-', async (path) => {
      loadSqlite(path, o.nodes);
      const db = new Database(path);
      try {
        const put = db.prepare("UPDATE node_compliance SET outcomes_packed = ?, outcomes = '[]' WHERE node_id = ?");
        db.transaction(() => {
          for (const id of db.prepare('SELECT node_id FROM node_compliance').pluck().all() as string[]) {
            const packed = packedFor(id);
            if (packed) put.run(packed, id);
          }
        })();
      } finally {
        db.close();
      }
      const reported = summary();
      return withSqliteStore(path, async (store) => ({ nodes: o.nodes, ...reported, ...(await steps(store, 1, threads, o.timed, (l) => o.log(`sqlite ${l}`))) }));
    });
  }
  if (o.postgres) {
    const { url, writeBatches, timed } = o.postgres;
    out.postgres = await withPostgres(url, { schemaPrefix: 'capstan_bench_', poolSize: 4 }, async (store, admin) => {
      await loadPostgres(admin, o.nodes);
      const ids = (await admin.query<{ node_id: string }>('SELECT node_id FROM node_compliance ORDER BY node_id')).rows.map((r) => r.node_id);
      for (let s = 0; s < ids.length; s += 5000) {
        const chunk = ids.slice(s, s + 5000).flatMap((id) => {
          const packed = packedFor(id);
          return packed ? [[id, packed] as const] : [];
        });
        await admin.query("UPDATE node_compliance x SET outcomes_packed = u.p, outcomes = '[]'::jsonb FROM unnest($1::text[], $2::bytea[]) AS u(id, p) WHERE x.node_id = u.id",
          [chunk.map(([id]) => id), chunk.map(([, p]) => p)]);
      }
      await admin.query('VACUUM ANALYZE');
      const reported = summary();
      return { nodes: o.nodes, ...reported, ...(await steps(store, writeBatches, threads, timed(admin), (l) => o.log(`postgres ${l}`))) };
    });
  }
  return out;
}
