/**
 * `npm run bench` (inventory): filter-language queries over a fleet with realistic inventories.
 *
 * The fleet is the registry bench's (100,000 nodes), plus what migration 15 keeps of each
 * node's inventory: about 500 packages per node drawn from a shared pool of 3,000 (name,
 * version) pairs (1,000 package names, three versions each), OS and hardware, two addresses and
 * 20 facts. It is generated straight into the tables, in the order the indexes want it (the
 * ingest path writes the same rows, one inventory at a time: store/nodes/inventory/indexing.ts). Then, on each
 * store, the median of a few rounds of a node-list page (per_page 100, with totals) for:
 * - a package-version query (`package:pkg-0007 < 2.0`),
 * - a three-clause OS + package + fact query,
 * and the storage the queryable inventory takes per node (tables and indexes of migration 15).
 */
import Database from 'better-sqlite3';
import pg from 'pg';
import { addressKey, versionKey } from '@capstan/shared';
import { loadPostgres, loadSqlite, time, type Timing } from './registry.js';
import { withPostgres, withSqlite, withSqliteStore, type Store } from './store.js';

export interface InventoryBenchOptions {
  nodes?: number;
  rounds?: number;
  databaseUrl?: string;
  /** Leave SQLite out (a PostgreSQL-only run); default false. */
  skipSqlite?: boolean;
  log?: (line: string) => void;
}

export interface InventoryBenchResult {
  store: 'sqlite' | 'postgres';
  nodes: number;
  packages_per_node: number;
  pool_pairs: number;
  load_ms: number;
  queries: Record<string, Timing & { total: number }>;
  /** Bytes the queryable inventory (migration 15's tables and indexes) takes per node. */
  index_bytes_per_node: number;
}

const NAMES = 1000;
const VERSIONS = ['1.0-1', '2.0.1-3', '3.0.11-1~deb12u2'];
const FACTS = 20;
const ROLES = ['web', 'db', 'app', 'cache', 'queue'];

/** A small integer hash: which packages node i has, and which version of each. */
function mix(i: number, k: number): number {
  let h = Math.imul(i ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(k + 0x632be5ab, 0xc2b2ae35);
  h ^= h >>> 15;
  h = Math.imul(h, 0x2c1b3c6d);
  return (h ^ (h >>> 13)) >>> 0;
}
const has = (i: number, k: number) => k < 100 || (mix(i, k) & 7) < 4; // 100 everywhere + half of the rest
const versionOf = (i: number, k: number) => (mix(k, i) % 3);
const pkgName = (k: number) => `pkg-${String(k).padStart(4, '0')}`;
const nodeId = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
const osName = (i: number) => (i % 4 === 3 ? 'rocky' : 'debian');

function facts(i: number): Array<[string, string, number | null]> {
  const out: Array<[string, string, number | null]> = [['role', ROLES[i % ROLES.length]!, null], ['rack.row', String(i % 40), i % 40]];
  for (let f = 2; f < FACTS; f++) out.push([`app.setting${f}`, `value-${(i * f) % 97}`, null]);
  return out;
}

export function loadInventorySqlite(path: string, n: number): void {
  const db = new Database(path);
  try {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = OFF');
    db.transaction(() => {
      const pool = db.prepare('INSERT INTO package_versions (id, name, version, version_key) VALUES (?, ?, ?, ?)');
      for (let k = 0; k < NAMES; k++) VERSIONS.forEach((v, j) => pool.run(k * 3 + j + 1, pkgName(k), v, versionKey(v)));
      const inv = db.prepare(`INSERT INTO node_inventory (key, node_id, fqdn, os_kernel, arch, os_version_key, cpus, memory, package_ids)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`);
      const addr = db.prepare('INSERT INTO node_addresses (address, node_id) VALUES (?, ?)');
      const fact = db.prepare('INSERT INTO node_facts (node_id, path, value, num) VALUES (?, ?, ?, ?)');
      const nodeOs = db.prepare('UPDATE nodes SET os_name = ? WHERE id = ?');
      const nodeKey = db.prepare('UPDATE nodes SET inventory_key = ? WHERE id = ?');
      for (let i = 0; i < n; i++) {
        const ids: number[] = [];
        for (let k = 0; k < NAMES; k++) if (has(i, k)) ids.push(k * 3 + versionOf(i, k) + 1);
        inv.run(i + 1, nodeId(i), `host-${i}.example.com`, '6.1.0-18-amd64', 'x86_64', versionKey(i % 4 === 3 ? '9.3' : '12'), 2 + (i % 8), (4 + (i % 4) * 4) * 1024 ** 3, JSON.stringify(ids));
        addr.run(addressKey(`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`), nodeId(i));
        addr.run(addressKey(`fe80::${(i & 0xffff).toString(16)}`), nodeId(i));
        for (const [p, v, num] of facts(i)) fact.run(nodeId(i), p, v, num);
        if (osName(i) !== 'debian') nodeOs.run(osName(i), nodeId(i));
        nodeKey.run(i + 1, nodeId(i));
      }
      // Postings in primary-key order: package by package, node by node.
      const post = db.prepare('INSERT INTO node_packages (package_id, node_key) VALUES (?, ?)');
      for (let k = 0; k < NAMES; k++) {
        for (let j = 0; j < 3; j++) {
          for (let i = 0; i < n; i++) if (has(i, k) && versionOf(i, k) === j) post.run(k * 3 + j + 1, i + 1);
        }
      }
    })();
    db.exec('ANALYZE');
  } finally {
    db.close();
  }
}

export async function loadInventoryPostgres(c: pg.Client, n: number): Promise<void> {
  const names: string[] = [];
  const versions: string[] = [];
  for (let k = 0; k < NAMES; k++) for (const v of VERSIONS) { names.push(pkgName(k)); versions.push(v); }
  await c.query(`INSERT INTO package_versions (id, name, version, version_key) SELECT * FROM unnest($1::int[], $2::text[], $3::text[], $4::text[])`,
    [names.map((_, x) => x + 1), names, versions, versions.map(versionKey)]);
  // The GIN index is built once after the load, as a restore would.
  await c.query('DROP INDEX node_inventory_packages_idx');
  const CHUNK = 2000;
  for (let start = 0; start < n; start += CHUNK) {
    const is = Array.from({ length: Math.min(CHUNK, n - start) }, (_, k) => start + k);
    const pk = is.map((i) => {
      const ids: number[] = [];
      for (let k = 0; k < NAMES; k++) if (has(i, k)) ids.push(k * 3 + versionOf(i, k) + 1);
      return `{${ids.join(',')}}`;
    });
    await c.query(`INSERT INTO node_inventory (node_id, fqdn, os_kernel, arch, os_version_key, cpus, memory, packages)
      SELECT id, 'host-' || i || '.example.com', '6.1.0-18-amd64', 'x86_64', vk, 2 + (i % 8), (4 + (i % 4) * 4)::bigint * 1073741824, p::int[]
      FROM unnest($1::text[], $2::int[], $3::text[], $4::text[]) AS u(id, i, vk, p)`,
    [is.map(nodeId), is, is.map((i) => versionKey(i % 4 === 3 ? '9.3' : '12')), pk]);
    const addrs = is.flatMap((i) => [[addressKey(`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`)!, nodeId(i)], [addressKey(`fe80::${(i & 0xffff).toString(16)}`)!, nodeId(i)]]);
    await c.query('INSERT INTO node_addresses (address, node_id) SELECT * FROM unnest($1::text[], $2::text[])', [addrs.map((a) => a[0]), addrs.map((a) => a[1])]);
    const fs = is.flatMap((i) => facts(i).map(([p, v, num]) => [nodeId(i), p, v, num] as const));
    await c.query('INSERT INTO node_facts (node_id, path, value, num) SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[])',
      [fs.map((f) => f[0]), fs.map((f) => f[1]), fs.map((f) => f[2]), fs.map((f) => f[3])]);
    const rocky = is.filter((i) => osName(i) !== 'debian').map(nodeId);
    await c.query(`UPDATE nodes SET os_name = 'rocky' WHERE id = ANY($1::text[])`, [rocky]);
  }
  await c.query('CREATE INDEX node_inventory_packages_idx ON node_inventory USING gin (packages)');
  await c.query('VACUUM ANALYZE');
}

const CASES: Record<string, string> = {
  'package version': 'package:pkg-0007 < 2.0',
  'os + package + fact': 'os.name = debian and package:pkg-0500 >= 2.0 and fact:role = web',
  'package absent, ip range': 'not package:pkg-0600 and ip in 10.0.0.0/16',
};

async function measure(store: Store, rounds: number, log: (l: string) => void, kind: string): Promise<InventoryBenchResult['queries']> {
  const out: InventoryBenchResult['queries'] = {};
  for (const [name, q] of Object.entries(CASES)) {
    let total = 0;
    const t = await time(rounds, async () => {
      total = (await store.listNodes({ filters: [{ key: 'q', values: [q] }], page: 1, per_page: 100 })).total;
    });
    out[name] = { ...t, total };
    log(`${kind} ${name} (${q}): ${t.median_ms} ms (max ${t.max_ms}), ${total} nodes`);
  }
  return out;
}

const INDEX_TABLES = ['package_versions', 'node_inventory', 'node_packages', 'node_addresses', 'node_facts', 'node_properties'];

export async function benchInventory(opts: InventoryBenchOptions = {}): Promise<InventoryBenchResult[]> {
  const n = opts.nodes ?? 100_000;
  const rounds = opts.rounds ?? 5;
  const log = opts.log ?? (() => undefined);
  const results: InventoryBenchResult[] = [];
  let perNode = 0;
  for (let i = 0; i < 200; i++) for (let k = 0; k < NAMES; k++) if (has(i, k)) perNode++;
  perNode = Math.round(perNode / 200);

  if (!opts.skipSqlite) {
    await withSqlite('capstan-bench-inventory-', async (path) => {
      const t0 = Date.now();
      loadSqlite(path, n);
      loadInventorySqlite(path, n);
      const loadMs = Date.now() - t0;
      log(`sqlite: ${n} nodes with inventories loaded in ${loadMs} ms`);
      const db = new Database(path, { readonly: true });
      const list = INDEX_TABLES.map(() => '?').join(', ');
      const bytes = (db.prepare(`SELECT sum(pgsize) AS b FROM dbstat WHERE name IN (SELECT name FROM sqlite_master WHERE tbl_name IN (${list}))`)
        .get(...INDEX_TABLES) as { b: number }).b;
      db.close();
      const queries = await withSqliteStore(path, (store) => measure(store, rounds, log, 'sqlite'));
      results.push({ store: 'sqlite', nodes: n, packages_per_node: perNode, pool_pairs: NAMES * 3, load_ms: loadMs, queries, index_bytes_per_node: Math.round(bytes / n) });
    });
  }

  if (opts.databaseUrl) {
    await withPostgres(opts.databaseUrl, { schemaPrefix: 'capstan_bench_inv_', poolSize: 2 }, async (store, admin, schema) => {
      const t0 = Date.now();
      await loadPostgres(admin, n);
      await loadInventoryPostgres(admin, n);
      const loadMs = Date.now() - t0;
      log(`postgres: ${n} nodes with inventories loaded in ${loadMs} ms`);
      const { rows } = await admin.query(`SELECT sum(pg_total_relation_size(r)) AS b FROM unnest($2::text[]) AS t, to_regclass(format('%I.%I', $1::text, t)) AS r WHERE r IS NOT NULL`, [schema, INDEX_TABLES]);
      const bytes = Number((rows[0] as { b: string }).b);
      results.push({ store: 'postgres', nodes: n, packages_per_node: perNode, pool_pairs: NAMES * 3, load_ms: loadMs, queries: await measure(store, rounds, log, 'postgres'), index_bytes_per_node: Math.round(bytes / n) });
    });
  }
  return results;
}
