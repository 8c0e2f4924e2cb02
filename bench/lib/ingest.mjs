// @ts-check
/**
 * Ingest end to end: pre-signed, pre-compressed run logs of N distinct accepted nodes PUT
 * concurrently to a real capstan-relayd that forwards to a real capstan-server. The figure is run
 * logs per second from the first PUT until the registry holds all of them; each run log's latency
 * is from its PUT to the moment the store shows its row.
 *
 * Visibility is read from the store the server writes (a read-only SQLite connection, or a pg
 * client on the same database), polling `runs` by id every few milliseconds: cheap for the server
 * and precise to the poll interval. At the end the admin API must agree (every node's last_run_at
 * set), so the figure never rests on the store read alone.
 */
import { createServer } from 'node:http';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { eachLimited, listNodes, registerNode } from '@capstan/bench/sim/admin';
import { cpuSplit, percentiles, procSample } from '@capstan/bench/sim/stats';
import { Uploader } from '@capstan/bench/sim/upload';
import { freshDatabase, pgCpuDelta, pgCpuSample } from './postgres.mjs';
import { programPaths, startProgram } from './programs.mjs';

const POLL_MS = 5;

/**
 * Rows of `runs` appear in id order; remember how far we have read.
 * @param {'sqlite' | 'postgres'} kind
 * @param {string} where  the SQLite file or the database URL
 */
async function runWatcher(kind, where) {
  let last = 0;
  if (kind === 'sqlite') {
    const db = new Database(where, { readonly: true, fileMustExist: true });
    const q = db.prepare('SELECT id, node_id FROM runs WHERE id > ? ORDER BY id LIMIT 10000');
    return {
      /** @returns {Promise<{ id: number, node_id: string }[]>} */
      async poll() {
        const rows = /** @type {{ id: number, node_id: string }[]} */ (q.all(last));
        if (rows.length > 0) last = rows[rows.length - 1].id;
        return rows;
      },
      async close() {
        db.close();
      },
    };
  }
  // PostgreSQL hands out ids when a row is inserted, but concurrent transactions commit in any
  // order: a row may become visible below ids already read. Every tenth poll re-reads a window
  // below the highest id seen, and ids are deduplicated.
  const c = new pg.Client({ connectionString: where });
  await c.connect();
  /** @type {Set<number>} */
  const seen = new Set();
  let polls = 0;
  return {
    async poll() {
      const from = ++polls % 10 === 0 ? Math.max(0, last - 5000) : last;
      const r = await c.query({ name: 'watch', text: 'SELECT id, node_id FROM runs WHERE id > $1 ORDER BY id LIMIT 20000', values: [from] });
      const rows = [];
      for (const x of r.rows) {
        const id = Number(x.id);
        if (seen.has(id)) continue;
        seen.add(id);
        rows.push({ id, node_id: String(x.node_id) });
        last = Math.max(last, id);
      }
      return rows;
    },
    async close() {
      await c.end();
    },
  };
}

/**
 * Bytes the SQLite database holds: its pages in use (file plus WAL, minus free pages), and per
 * table and index through the dbstat virtual table when the build has it.
 * @param {string} path
 * @returns {Promise<{ total: number, tables: Record<string, number> }>}
 */
async function sqliteBytes(path) {
  const db = new Database(path, { readonly: true, fileMustExist: true });
  try {
    const pageSize = Number(db.pragma('page_size', { simple: true }));
    const pages = Number(db.pragma('page_count', { simple: true })) - Number(db.pragma('freelist_count', { simple: true }));
    /** @type {Record<string, number>} */
    const tables = {};
    try {
      for (const r of /** @type {{ name: string, bytes: number }[]} */ (db.prepare('SELECT name, sum(pgsize) AS bytes FROM dbstat GROUP BY name').all())) tables[r.name] = r.bytes;
    } catch {
      /* dbstat not compiled in: totals only */
    }
    return { total: pages * pageSize, tables };
  } finally {
    db.close();
  }
}

/** Bytes of every table with its indexes and TOAST in the database's public schema. @param {string} url */
/** A loopback HTTP server that reads each request and never answers it (stopped with the programs). */
async function neverAnswering() {
  /** @type {import('node:http').ServerResponse[]} */
  const held = [];
  let requests = 0;
  const server = createServer((req, res) => {
    requests++;
    req.resume();
    held.push(res);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', () => r(undefined)));
  const { port } = /** @type {import('node:net').AddressInfo} */ (server.address());
  return {
    url: `http://127.0.0.1:${port}/never`,
    get requests() {
      return requests;
    },
    stop: () => new Promise((r) => {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      server.close(() => r(0));
    }),
  };
}

async function pgBytes(url) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const r = await c.query(`SELECT c.relname AS name, pg_total_relation_size(c.oid) AS bytes FROM pg_class c
      JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')`);
    /** @type {Record<string, number>} */
    const tables = {};
    let total = 0;
    for (const row of r.rows) {
      tables[row.name] = Number(row.bytes);
      total += Number(row.bytes);
    }
    return { total, tables };
  } finally {
    await c.end();
  }
}

/**
 * @param {{
 *   kind: 'sqlite' | 'postgres',
 *   dir: string,
 *   files: { nodeId: string, name: string, body: Buffer }[],
 *   warmFiles?: { nodeId: string, name: string, body: Buffer }[],
 *   identities: import('@capstan/bench/sim/identities').SimIdentity[],
 *   putConcurrency?: number,
 *   timeoutMs?: number,
 *   profileDir?: string,
 *   progress?: (m: string) => void,
 *   webhook?: 'never',
 * }} o
 */
export async function benchIngest(o) {
  const say = o.progress ?? (() => undefined);
  const bins = programPaths();
  const dir = join(o.dir, `ingest-${o.kind}-${Date.now()}`);
  await mkdir(dir, { recursive: true });
  const db = o.kind === 'postgres' ? await freshDatabase() : null;
  // One directory per program: its worker threads (ingest, spool writers) write profiles of their
  // own there, which a fixed --cpu-prof-name would let overwrite the main thread's.
  const prof = (/** @type {string} */ name) => (o.profileDir ? ['--cpu-prof', `--cpu-prof-dir=${join(o.profileDir, name)}`] : []);
  /** @type {Awaited<ReturnType<typeof startProgram>>[]} */
  const started = [];
  let failed = false;
  try {
    // CAPSTAN_BENCH_SERVER_CONFIG: a server configuration to measure (e.g. another [processing] batch_window).
    const serverConfig = process.env.CAPSTAN_BENCH_SERVER_CONFIG ? ['--config', resolve(process.env.CAPSTAN_BENCH_SERVER_CONFIG)] : [];
    const server = await startProgram(bins.server, ['serve', ...serverConfig, '--listen', '127.0.0.1:0', '--data-dir', join(dir, 'server'), '--log-level', 'warn', ...(db ? ['--database', db.url] : [])], { nodeFlags: prof(`${o.kind}-server`) });
    started.push(server);
    // Every upload comes from this one address, where a fleet's come from many: no per-address limit.
    await writeFile(join(dir, 'relayd.toml'), '[http]\nmax_uploads_per_client = 0\n');
    const relay = await startProgram(bins.relayd, ['--config', join(dir, 'relayd.toml'), '--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'), '--upstream', server.url, '--log-level', 'warn'], { nodeFlags: prof(`${o.kind}-relayd`) });
    started.push(relay);
    const admin = { url: server.url, token: (await readFile(join(dir, 'server', 'admin.token'), 'utf8')).trim() };
    if (o.webhook === 'never') {
      // A subscription to every event, whose receiver takes each request and never answers: the
      // server's sends hang until webhook_timeout, again and again, beside the ingest measured.
      const hook = await neverAnswering();
      started.push(hook);
      const res = await fetch(`${admin.url}/api/1/subscriptions`, {
        method: 'POST', headers: { authorization: `Bearer ${admin.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ id: 'bench-never', kind: 'webhook', url: hook.url, group_window_ms: 0 }),
      });
      if (res.status !== 201) throw new Error(`subscription refused: ${res.status} ${await res.text()}`);
      say(`ingest (${o.kind}): a webhook subscription whose receiver never answers (${hook.url})`);
    }

    say(`ingest (${o.kind}): registering ${o.identities.length} accepted nodes through POST /api/1/nodes`);
    await eachLimited(o.identities, 16, async (id) => {
      await registerNode(admin, id);
    });

    const watcher = await runWatcher(o.kind, db ? db.url : join(dir, 'server', 'capstan.db'));
    if (o.warmFiles) {
      // Steady state: every node has reported before the measured run logs go out (its first run, the settling rounds).
      say(`ingest (${o.kind}): ${o.warmFiles.length} earlier run logs (first runs and settling rounds, not measured)`);
      const up = new Uploader(relay.url, { sockets: o.putConcurrency ?? 64, timeoutMs: 60_000 });
      await eachLimited(o.warmFiles, o.putConcurrency ?? 64, async (f) => {
        const r = await up.put('reports', f.name, f.body);
        if (r.status < 200 || r.status >= 300) throw new Error(`earlier run refused: ${r.code ?? r.status}`);
      });
      up.close();
      let seen = 0;
      const until = performance.now() + (o.timeoutMs ?? 180_000);
      while (seen < o.warmFiles.length && performance.now() < until) {
        const rows = await watcher.poll();
        seen += rows.length;
        if (rows.length === 0) await new Promise((r) => setTimeout(r, 50));
      }
      if (seen < o.warmFiles.length) throw new Error(`only ${seen} of ${o.warmFiles.length} earlier run logs visible`);
    }
    const storeBytes = () => (db ? pgBytes(db.url) : sqliteBytes(join(dir, 'server', 'capstan.db')));
    const bytesBefore = await storeBytes();
    const uploader = new Uploader(relay.url, { sockets: o.putConcurrency ?? 64, timeoutMs: 60_000 });
    const n = o.files.length;
    // A node may send several runs (the steady state's rounds): its PUT times wait in order, and
    // each of its rows that becomes visible takes the oldest.
    /** @type {Map<string, number[]>} */ const putAt = new Map();
    /** @type {number[]} */ const latency = [];
    /** @type {Record<string, number>} */ const errors = {};
    let visible = 0;
    let lastVisibleAt = 0;
    let putDoneAt = 0;
    const cpu0 = { server: procSample(server.pid), relay: procSample(relay.pid) };
    const db0 = db ? await pgCpuSample(db.name).catch(() => null) : null;
    // This process is the load: the uploads, their signatures already made, and the watcher.
    const harness0 = process.cpuUsage();
    const split0 = { server: cpuSplit(server.pid), relay: cpuSplit(relay.pid) };

    say(`ingest (${o.kind}): PUT ${n} run logs, ${o.putConcurrency ?? 64} at a time`);
    const t0 = performance.now();
    const t0Us = Number(process.hrtime.bigint() / 1000n);
    let watching = true;
    const watch = (async () => {
      while (watching && visible < n) {
        const rows = await watcher.poll();
        const now = performance.now();
        for (const r of rows) {
          const at = putAt.get(r.node_id)?.shift();
          if (at === undefined) continue;
          latency.push(now - at);
          visible++;
          lastVisibleAt = now;
        }
        if (rows.length === 0) await new Promise((r) => setTimeout(r, POLL_MS));
      }
    })();
    await eachLimited(o.files, o.putConcurrency ?? 64, async (f) => {
      const times = putAt.get(f.nodeId);
      if (times) times.push(performance.now());
      else putAt.set(f.nodeId, [performance.now()]);
      const r = await uploader.put('reports', f.name, f.body);
      if (r.status < 200 || r.status >= 300) errors[r.code ?? `HTTP_${r.status}`] = (errors[r.code ?? `HTTP_${r.status}`] ?? 0) + 1;
    });
    putDoneAt = performance.now();
    uploader.close();
    if (Object.keys(errors).length > 0) throw new Error(`uploads refused: ${JSON.stringify(errors)}`);

    const deadline = performance.now() + (o.timeoutMs ?? 180_000);
    let lastShown = -1;
    while (visible < n && performance.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
      if (Math.floor((visible / n) * 4) !== lastShown) say(`ingest (${o.kind}): ${visible}/${n} visible`);
      lastShown = Math.floor((visible / n) * 4);
    }
    const tEndUs = Number(process.hrtime.bigint() / 1000n);
    watching = false;
    await watch;
    await watcher.close();
    const cpu1 = { server: procSample(server.pid), relay: procSample(relay.pid) };
    const dbCpu = db ? pgCpuDelta(db0, await pgCpuSample(db.name).catch(() => null)) : null;
    const harness = process.cpuUsage(harness0);
    const split1 = { server: cpuSplit(server.pid), relay: cpuSplit(relay.pid) };
    if (visible < n) throw new Error(`only ${visible} of ${n} run logs visible after ${o.timeoutMs ?? 180_000} ms`);

    // The admin API must agree with the store: every node has its runs (at least its last).
    const bytesAfter = await storeBytes();
    const nodes = await listNodes(admin);
    const ours = new Set(o.files.map((f) => f.nodeId));
    const withRun = nodes.filter((x) => ours.has(x.id) && x.last_run_at !== null).length;
    if (withRun !== ours.size) throw new Error(`the API shows a run for ${withRun} of ${ours.size} nodes`);

    const seconds = (lastVisibleAt - t0) / 1000;
    const splitPer = (/** @type {'server' | 'relay'} */ k) => {
      const a = split0[k];
      const b = split1[k];
      if (!a || !b) return null;
      const ms = (/** @type {keyof typeof a} */ f) => Math.round(((b[f] - a[f]) * 1e5) / n) / 100;
      return { mainUser: ms('mainUser'), mainSys: ms('mainSys'), otherUser: ms('otherUser'), otherSys: ms('otherSys') };
    };
    const cpu = (/** @type {'server' | 'relay'} */ k) => {
      const a = cpu0[k];
      const b = cpu1[k];
      return a && b ? Math.round((b.cpuSeconds - a.cpuSeconds) * 100) / 100 : null;
    };
    return {
      runLogsPerSec: Math.round(n / seconds),
      seconds: Math.round(seconds * 100) / 100,
      putPhasePerSec: Math.round(n / ((putDoneAt - t0) / 1000)),
      latencyMs: percentiles(latency),
      count: n,
      cpuSeconds: { server: cpu('server'), relay: cpu('relay'), harness: Math.round((harness.user + harness.system) / 1e4) / 100 },
      /** PostgreSQL's own CPU over the window (bench/lib/postgres.mjs pgCpuSample): the database's backends, the cluster's shared processes. */
      databaseCpuSeconds: dbCpu,
      /** The machine's cores busy over the window: server, relay and harness CPU per second of it. */
      coresBusy: (() => {
        const server = cpu('server');
        const relay = cpu('relay');
        return server === null || relay === null ? null : Math.round(((server + relay + (harness.user + harness.system) / 1e6) / seconds) * 100) / 100;
      })(),
      /** CPU per run log (ms), by thread (the event loop, the others) and mode (user, kernel). */
      cpuSplitMs: { server: splitPer('server'), relay: splitPer('relay') },
      /** What the run logs added to the database, per run log (all tables and indexes). */
      storeBytesPerRun: Math.round((bytesAfter.total - bytesBefore.total) / n),
      storeTables: Object.fromEntries(Object.entries(bytesAfter.tables).map(([k, v]) => [k, Math.round((v - (bytesBefore.tables[k] ?? 0)) / n)])),
      peakRssMb: { server: cpu1.server?.peakRssMb ?? null, relay: cpu1.relay?.peakRssMb ?? null },
      /** The measured window on the monotonic clock, for cutting CPU profiles to it. */
      windowUs: { from: t0Us, to: tEndUs },
    };
  } catch (err) {
    failed = true;
    // Keep what the programs left (spools, failed/ reasons, logs) for a look at what went wrong.
    const logs = started.map((p) => p.stderr.join('')).join('\n').slice(-4000);
    throw new Error(`${/** @type {Error} */ (err).message} (kept ${dir} for inspection)${logs ? `\n${logs}` : ''}`, { cause: err });
  } finally {
    for (const p of started.reverse()) await p.stop();
    if (db && !failed) await db.drop().catch(() => undefined);
    if (!failed) await rm(dir, { recursive: true, force: true });
  }
}
