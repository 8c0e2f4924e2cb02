// @ts-check
/**
 * PostgreSQL for the benchmarks: the same server the test suite uses (CAPSTAN_BENCH_PG_URL, else
 * CAPSTAN_TEST_PG_URL, else postgres://postgres@127.0.0.1:5432/test), a fresh database or schema
 * per measurement, dropped afterwards. Unreachable → the PostgreSQL figures say why they are missing.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import pg from 'pg';

export const PG_URL = process.env.CAPSTAN_BENCH_PG_URL ?? process.env.CAPSTAN_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** @param {string} url */
export function shown(url) {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparsable url)';
  }
}

/**
 * @template T
 * @param {string} url
 * @param {(c: pg.Client) => Promise<T>} fn
 */
async function withClient(url, fn) {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end().catch(() => undefined);
  }
}

/** null when reachable, else the reason. @param {string} url */
export async function pgUnavailable(url = PG_URL) {
  try {
    await withClient(url, (c) => c.query('SELECT 1'));
    return null;
  } catch (err) {
    return `PostgreSQL unavailable at ${shown(url)}: ${/** @type {Error} */ (err).message || String(err)}`;
  }
}

/** @param {string} url */
export async function pgVersion(url = PG_URL) {
  return withClient(url, async (c) => String((await c.query('SHOW server_version')).rows[0].server_version));
}

/**
 * Write out what PostgreSQL still holds dirty (a checkpoint), so that the next benchmark's fsyncs
 * do not compete with the previous one's deferred writes. Errors are ignored: it only helps.
 * @param {string} url
 */
export async function pgCheckpoint(url = PG_URL) {
  await withClient(url, (c) => c.query('CHECKPOINT')).catch(() => undefined);
}

/** A new empty database (for a server process, which takes a URL and uses its default schema). */
export async function freshDatabase(url = PG_URL) {
  const name = `capstan_bench_${randomBytes(6).toString('hex')}`;
  await withClient(url, (c) => c.query(`CREATE DATABASE ${name}`));
  const u = new URL(url);
  u.pathname = `/${name}`;
  return {
    url: u.toString(),
    name,
    drop: () => withClient(url, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => undefined),
  };
}

/** A schema name for an in-process store (openRegistry creates it), dropped afterwards. */
export function freshSchema(url = PG_URL) {
  const schema = `capstan_bench_${randomBytes(6).toString('hex')}`;
  return {
    schema,
    drop: () => withClient(url, (c) => c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)).then(() => undefined),
  };
}

/** utime + stime (fields 14 and 15) and cutime + cstime (16 and 17) of `pid`, in seconds, or null. */
function procCpu(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // In clock ticks of 1/100 s on Linux; f[1] is the parent's pid.
    return { own: (Number(f[11]) + Number(f[12])) / 100, ended: (Number(f[13]) + Number(f[14])) / 100, parent: Number(f[1]) };
  } catch {
    return null; // ended meanwhile, or not on this machine
  }
}

/**
 * The database's own CPU (seconds) from /proc: the server processes PostgreSQL runs for the
 * database `name` (its backends, one per pooled connection), the cluster's shared background
 * processes (WAL writer, checkpointer, background writer, autovacuum), and what the postmaster
 * has collected from its children that ended (backends of closed connections: a pool closes a
 * connection idle for 10 s, and without this its backend's CPU was lost), read on this machine.
 * Backends of other databases are not counted while they run; the shared processes, and the
 * children that end, serve every database of the cluster, so they are exact only where nothing
 * else uses it. Call at the window's start and end and subtract with `pgCpuDelta` (a backend
 * started meanwhile counts from zero). Null when the server is not on this machine.
 * @param {string} name @param {string} [url]
 * @returns {Promise<{ procs: Map<number, { kind: 'backend' | 'shared', seconds: number }>, ended: number } | null>}
 */
export async function pgCpuSample(name, url = PG_URL) {
  const { rows, parent } = await withClient(url, async (c) => ({
    rows: (await c.query(
      `SELECT pid, datname, backend_type FROM pg_stat_activity
        WHERE datname = $1 OR backend_type IN ('walwriter', 'checkpointer', 'background writer', 'autovacuum launcher', 'autovacuum worker')`, [name],
    )).rows,
    // The postmaster is this connection's backend's parent (read while the backend lives).
    parent: procCpu(Number((await c.query('SELECT pg_backend_pid() AS pid')).rows[0].pid))?.parent,
  }));
  const ended = parent === undefined ? null : procCpu(parent)?.ended;
  if (ended === undefined || ended === null) return null;
  /** @type {Map<number, { kind: 'backend' | 'shared', seconds: number }>} */
  const procs = new Map();
  for (const r of rows) {
    const cpu = procCpu(Number(r.pid));
    if (cpu) procs.set(Number(r.pid), { kind: r.datname === name ? 'backend' : 'shared', seconds: cpu.own });
  }
  return { procs, ended };
}

/**
 * CPU seconds between two samples, by kind. A process that ended between them is counted through
 * the postmaster (what it collected meanwhile, less what that process had used at the first
 * sample), with the backends.
 * @param {Awaited<ReturnType<typeof pgCpuSample>>} a @param {Awaited<ReturnType<typeof pgCpuSample>>} b
 */
export function pgCpuDelta(a, b) {
  if (!a || !b) return null;
  let backend = b.ended - a.ended;
  let shared = 0;
  for (const [pid, start] of a.procs) if (!b.procs.has(pid)) backend -= start.seconds;
  for (const [pid, end] of b.procs) {
    const d = end.seconds - (a.procs.get(pid)?.seconds ?? 0);
    if (end.kind === 'backend') backend += d;
    else shared += d;
  }
  return { backend: Math.round(backend * 100) / 100, shared: Math.round(shared * 100) / 100 };
}

/**
 * The settings that decide how PostgreSQL writes under a fleet's load (the buffer pool, how far
 * apart checkpoints are, whether page images in the WAL are compressed, autovacuum), as the
 * server has them.
 * @param {string} [url]
 * @returns {Promise<Record<string, string>>}
 */
export async function pgSettings(url = PG_URL) {
  const names = ['shared_buffers', 'max_wal_size', 'checkpoint_timeout', 'wal_compression', 'autovacuum', 'synchronous_commit'];
  const { rows } = await withClient(url, (c) => c.query('SELECT name, setting, unit FROM pg_settings WHERE name = ANY($1::text[])', [names]));
  /** @type {Record<string, string>} */
  const out = {};
  for (const r of rows) {
    // Sizes come in units of the setting (8 kB pages, MB): shown as the server would in SHOW.
    const unit = r.unit === '8kB' ? 8 * 1024 : r.unit === 'MB' ? 1024 * 1024 : r.unit === 'kB' ? 1024 : null;
    out[r.name] = unit ? `${Math.round((Number(r.setting) * unit) / (1024 * 1024))} MB` : `${r.setting}${r.unit ? ` ${r.unit}` : ''}`;
  }
  return out;
}

/**
 * The cluster's WAL and checkpoint counters (pg_stat_wal, pg_stat_bgwriter): what it wrote, how
 * much of it as full-page images (a page's first change after each checkpoint), how many
 * checkpoints the WAL's size forced, and the buffers backends had to write out themselves.
 * Cluster-wide: exact where nothing else uses the cluster. Subtract with `pgWalDelta`.
 * @param {string} [url]
 */
export async function pgWalSample(url = PG_URL) {
  return withClient(url, async (c) => {
    const w = (await c.query('SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal')).rows[0];
    const b = (await c.query('SELECT checkpoints_timed, checkpoints_req, buffers_backend FROM pg_stat_bgwriter')).rows[0];
    return {
      wal_records: Number(w.wal_records), wal_fpi: Number(w.wal_fpi), wal_bytes: Number(w.wal_bytes),
      checkpoints_timed: Number(b.checkpoints_timed), checkpoints_req: Number(b.checkpoints_req), buffers_backend: Number(b.buffers_backend),
    };
  });
}

/**
 * @param {Awaited<ReturnType<typeof pgWalSample>> | null} a @param {Awaited<ReturnType<typeof pgWalSample>> | null} b
 * @returns {Record<keyof Awaited<ReturnType<typeof pgWalSample>>, number> | null}
 */
export function pgWalDelta(a, b) {
  if (!a || !b) return null;
  return /** @type {any} */ (Object.fromEntries(Object.keys(a).map((k) => [k, b[/** @type {keyof typeof a} */ (k)] - a[/** @type {keyof typeof a} */ (k)]])));
}
