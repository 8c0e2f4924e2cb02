/**
 * Day partitions of `runs` (PostgreSQL): `runs_pYYYYMMDD` holds the runs that started that UTC
 * day; `runs_default` catches any day without its own partition (runs from far in the past, or
 * from an agent whose clock runs ahead).
 *
 * Partitions are created ahead of time (today and the next two days) by the lifecycle sweep, never
 * in the ingest's path. A day whose runs already sit in the default partition gets no partition
 * of its own (Postgres refuses to create one over rows of the default); those runs are deleted
 * row by row by retention, like every run of the default partition.
 *
 * Expired days are dropped whole: `DROP TABLE` is a catalogue change, not a delete of millions of
 * rows, but it needs a brief exclusive lock on `runs`. It waits at most LOCK_TIMEOUT for it; if
 * ingest or a long report query holds the table longer, the drop is skipped and retried at the
 * next sweep, so the ingest never queues behind retention for more than that.
 */
import type pg from 'pg';

const DAY_MS = 86_400_000;
const LOCK_TIMEOUT = '2s';
/** How many days ahead of today get their partition. */
const DAYS_AHEAD = 2;
const NAME = /^runs_p(\d{4})(\d{2})(\d{2})$/;

const dayStart = (d: Date) => new Date(Math.floor(d.getTime() / DAY_MS) * DAY_MS);
const nameOf = (day: Date) => `runs_p${day.toISOString().slice(0, 10).replace(/-/g, '')}`;

/** The day partitions of `runs` in the connection's schema, with their first instant. */
async function listPartitions(q: pg.Pool | pg.PoolClient): Promise<Array<{ name: string; day: Date }>> {
  const { rows } = await q.query<{ name: string }>(`SELECT c.relname AS name FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
    WHERE p.oid = 'runs'::regclass`);
  const out: Array<{ name: string; day: Date }> = [];
  for (const r of rows) {
    const m = NAME.exec(r.name);
    if (m) out.push({ name: r.name, day: new Date(Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]))) });
  }
  return out.sort((a, b) => a.day.getTime() - b.day.getTime());
}

/** Create the partitions of today and the next days if they are missing. */
export async function dayPartitions(
  pool: pg.Pool,
  schema: string | undefined,
  now: Date,
  onMaintenance: (message: string, err?: unknown) => void,
  /** Days given up on (their runs stay in the default partition): not retried, not logged again. */
  skipped: Set<string> = new Set(),
): Promise<void> {
  const c = await pool.connect();
  try {
    const existing = new Set((await listPartitions(c)).map((p) => p.name));
    for (let i = 0; i <= DAYS_AHEAD; i++) {
      const day = new Date(dayStart(now).getTime() + i * DAY_MS);
      const name = nameOf(day);
      if (existing.has(name) || skipped.has(name)) continue;
      try {
        await c.query('BEGIN');
        // Several servers sweep at once: one creates, the others then find it.
        await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`capstan.partitions:${schema ?? ''}`]);
        await c.query(`SET LOCAL lock_timeout = '${LOCK_TIMEOUT}'`);
        await c.query(`CREATE TABLE IF NOT EXISTS ${name} PARTITION OF runs
          FOR VALUES FROM ('${day.toISOString()}') TO ('${new Date(day.getTime() + DAY_MS).toISOString()}')`);
        await c.query('COMMIT');
      } catch (err) {
        await c.query('ROLLBACK').catch(() => undefined);
        // 23514: the default partition already holds runs of that day, for good (55P03, a lock
        // timeout, is worth another try at the next sweep).
        if ((err as { code?: string }).code === '23514') skipped.add(name);
        onMaintenance(`runs partition ${name} not created; that day's runs stay in runs_default`, err);
      }
    }
  } finally {
    c.release();
  }
}

/**
 * Drop the day partitions that end at or before `before`, counting their rows first (the count
 * goes to the deleted-runs total). Returns how many runs went.
 */
export async function dropExpiredPartitions(
  pool: pg.Pool,
  before: Date,
  onMaintenance: (message: string, err?: unknown) => void,
  bump: (c: pg.PoolClient, n: number) => Promise<void>,
): Promise<number> {
  const c = await pool.connect();
  let deleted = 0;
  try {
    for (const p of await listPartitions(c)) {
      if (p.day.getTime() + DAY_MS > before.getTime()) break;
      try {
        await c.query('BEGIN');
        // Counted without a lock: a run back-filled into that day between the count and the drop
        // is deleted uncounted (the total is for people, the deletion is what retention promises).
        const { rows } = await c.query<{ n: string }>(`SELECT count(*) AS n FROM ${p.name}`);
        await c.query(`SET LOCAL lock_timeout = '${LOCK_TIMEOUT}'`);
        await c.query(`DROP TABLE ${p.name}`);
        await bump(c, Number(rows[0]!.n));
        await c.query('COMMIT');
        deleted += Number(rows[0]!.n);
      } catch (err) {
        await c.query('ROLLBACK').catch(() => undefined);
        onMaintenance(`runs partition ${p.name} not dropped; retried at the next sweep`, err);
        break;
      }
    }
  } finally {
    c.release();
  }
  return deleted;
}
