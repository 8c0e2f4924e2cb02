// @ts-check
/**
 * The store's batch insert alone, on both stores, for comparing builds quickly: N nodes' run logs
 * are signed, verified and summarized untimed (as the ingest workers hand them over), their first
 * runs and settling rounds stored untimed, then their next runs stored in batches of the
 * server's batch size, one transaction each, one batch at a time. Reported per run log: wall µs,
 * this process's CPU µs, and on PostgreSQL the database's own CPU (its backends for a database
 * made for the run, read from /proc; the cluster's shared processes apart).
 *
 *   node bench/store-insert.mjs [--nodes 500] [--reports 100] [--rounds 3] [--only sqlite,postgres] [--keep-db]
 *                               [--sqlite-db FILE --seed TEXT]
 *
 * `--keep-db` leaves the PostgreSQL database in place afterwards (its name is printed), to look
 * at its plans with EXPLAIN. `--sqlite-db` stores into an existing SQLite database instead of a
 * fresh one (a copy of a fleet run's, say: what a node's runs cost beside 300,000 others); its
 * nodes are new ones, so give each such run its own `--seed`. The nodes' first runs are timed
 * too, and on SQLite the bytes this process wrote (the WAL and its checkpoints, /proc/self/io).
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { certificateFingerprint, parseRunInfo } from '@capstan/shared';
import { openRegistry } from '@capstan/bench/store';
import { loadServerConfig } from '@capstan/server/config';
import { prepareRunLog } from '@capstan/server/ingest/runlog-prepare';
import { prepareFleet } from './lib/fixtures.mjs';
import { freshDatabase, pgCpuDelta, pgCpuSample, pgUnavailable } from './lib/postgres.mjs';

const { values } = parseArgs({
  options: {
    nodes: { type: 'string', default: '500' }, reports: { type: 'string', default: '100' }, rounds: { type: 'string', default: '3' },
    only: { type: 'string', default: 'sqlite,postgres' }, 'keep-db': { type: 'boolean', default: false },
    'sqlite-db': { type: 'string' }, seed: { type: 'string' },
  },
});
const config = loadServerConfig({});
const fleet = await prepareFleet({
  nodes: Number(values.nodes), reports: Number(values.reports), steady: true, rounds: Number(values.rounds), ...(values.seed && { seed: values.seed }),
});
const certs = new Map(fleet.identities.map((id) => [id.nodeId, id.certPem]));
const limits = { maxDecompressedBytes: config.limits.max_decompressed_size, maxReports: config.limits.max_reports, maxLineBytes: config.limits.max_line_length };

/** @param {{ nodeId: string, name: string, body: Buffer }[]} files */
async function prepared(files) {
  const out = [];
  for (const f of files) {
    const run = await prepareRunLog({ raw: f.body, compression: 'zstd', nodeId: f.nodeId, timestamp: parseRunInfo(f.name).timestamp,
      certificate: /** @type {string} */ (certs.get(f.nodeId)), limits });
    out.push({ ...run, file_name: f.name, received_at: new Date().toISOString() });
  }
  return out;
}
const first = await prepared(fleet.files);
const settle = await prepared(fleet.settle);
const next = await prepared(fleet.next);
const size = config.processing.batch_size;

/** @param {import('@capstan/bench/store').Store} store @param {any[]} rows */
async function insertAll(store, rows) {
  for (let i = 0; i < rows.length; i += size) {
    const results = await store.insertRuns(rows.slice(i, i + size));
    const bad = results.find((r) => !r.ok);
    if (bad) throw /** @type {{ error: unknown }} */ (bad).error;
  }
}

const cpuUs = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};
/** Bytes this process has written through system calls (SQLite's WAL and checkpoints). */
const written = async () => Number(/^wchar: (\d+)$/m.exec(await readFile('/proc/self/io', 'utf8'))?.[1] ?? Number.NaN);

/**
 * Stores `rows` in batches and measures it: wall and CPU µs per run, and on SQLite KiB written.
 * @param {import('@capstan/bench/store').Store} store @param {any[]} rows @param {boolean} sqlite
 */
async function timed(store, rows, sqlite) {
  const [w0, c0, t0] = [await written(), cpuUs(), performance.now()];
  await insertAll(store, rows);
  const wallMs = performance.now() - t0;
  const [cpu, w] = [cpuUs() - c0, await written() - w0];
  const n = rows.length;
  return {
    wallMs,
    figures: {
      us_per_run_wall: Math.round((wallMs * 1000) / n), us_per_run_cpu: Math.round(cpu / n),
      ...(sqlite && { kib_written_per_run: Math.round(w / n / 1024) }),
    },
  };
}

/** @param {'sqlite' | 'postgres'} kind */
async function measure(kind) {
  const dir = await mkdtemp(join(tmpdir(), 'capstan-store-insert-'));
  const db = kind === 'postgres' ? await freshDatabase() : null;
  const store = db
    ? await openRegistry({ databaseUrl: db.url, poolSize: config.database.pool_size })
    : await openRegistry({ sqlitePath: values['sqlite-db'] ?? join(dir, 'capstan.db') });
  try {
    for (const id of fleet.identities) {
      // An existing database may hold this seed's nodes from an earlier run: their first runs are stored already.
      if (values['sqlite-db'] && !db && await store.getNode(id.nodeId)) {
        throw new Error(`node ${id.nodeId} is already in ${values['sqlite-db']}: give another --seed`);
      }
      await store.createNode({ id: id.nodeId, hostname: id.hostname, certificate: id.certPem, certificate_fingerprint: certificateFingerprint(id.certPem) });
    }
    const firsts = await timed(store, first, !db);
    await insertAll(store, settle);
    const pg0 = db ? await pgCpuSample(db.name) : null;
    const steady = await timed(store, next, !db);
    const pg = db ? pgCpuDelta(pg0, await pgCpuSample(db.name)) : null;
    const n = next.length;
    return {
      store: kind, runs: n, batch: size, ...steady.figures, runs_per_s: Math.round((n / steady.wallMs) * 1000),
      first_runs: { runs: first.length, ...firsts.figures },
      ...(pg ? { db_backend_us_per_run: Math.round((pg.backend * 1e6) / n), db_shared_us_per_run: Math.round((pg.shared * 1e6) / n) } : {}),
    };
  } finally {
    await store.close();
    if (values['keep-db'] && db) console.log(JSON.stringify({ kept: db.name }));
    else await db?.drop();
    await rm(dir, { recursive: true, force: true });
  }
}

const kinds = values.only.split(',');
const load = [loadavg()[0].toFixed(2)];
for (const kind of kinds) {
  if (kind === 'postgres') {
    const why = await pgUnavailable();
    if (why) {
      console.log(JSON.stringify({ store: kind, skipped: why }));
      continue;
    }
  }
  try {
    console.log(JSON.stringify(await measure(/** @type {'sqlite' | 'postgres'} */ (kind))));
  } catch (err) {
    process.stderr.write(`store-insert: ${kind}: ${/** @type {Error} */ (err).message}\n`);
    process.exit(1);
  }
}
load.push(loadavg()[0].toFixed(2));
console.log(JSON.stringify({ load_start: load[0], load_end: load[1] }));
