/**
 * Planner statistics kept up with the store's own bulk writes.
 *
 * The kept counters' triggers look rows up by node (a node's groups, its directive rows, its kept
 * row). A connection plans each such statement once and keeps the plan for its life. A plan made
 * while a table was empty (a new install, or a table a migration has just created on an existing
 * fleet) scans the whole table, and keeps scanning it while the table fills: a first generation of
 * 100,000 nodes had written a quarter of its bundles after 13 minutes that way, each node's
 * trigger reading all of policy_group_members twice. ANALYZE makes every connection plan again
 * with the table's real size. autovacuum does that too, when it is on, after its naptime (a
 * minute); this does it at the pace of the writes.
 *
 * After a write transaction, at most once per `intervalMs` and never two at once, the tables of
 * the store's schema (but the kept counters' logs, FOLDED_LOGS) whose row count moved since their
 * last analysis by more than `minRows` plus `growthPercent` % of the count then are analysed, one
 * at a time, on one pooled connection. Rows rewritten in place (each run rewrites its node's
 * compliance rows) do not count: they change no plan, and on a 2 GB table one ANALYZE is seconds
 * of a core. An advisory lock, held by the checking connection, keeps the servers on one database
 * from analysing at the same time: the one that does not get it skips its check. A failure is told
 * and tried again at the next check.
 *
 * By default a table is analysed again when its count has doubled (growthPercent 100): a plan
 * made on a table goes wrong when the table grows by a factor, not by a tenth. With 10 %, a
 * 10,000-node fleet's first runs analysed the directive rows and the drill-down keys 31 times
 * each in five minutes, about 180 ms each (all analyses: 13 s of the database's 137 s of
 * statements); doubling takes a table from 1,000 rows to a million in ten.
 */
import type pg from 'pg';

export interface AnalyzeOptions {
  /** Least time between two checks; 0 turns the checks off (autovacuum alone keeps statistics). */
  intervalMs: number;
  /** Rows changed since a table's last analysis before it is analysed again, plus growthPercent of its rows. */
  minRows: number;
  growthPercent: number;
  /** Told about an ANALYZE that failed (tried again at the next check). */
  onError?: (message: string, err: unknown) => void;
}

export const ANALYZE_DEFAULTS: AnalyzeOptions = { intervalMs: 2_000, minRows: 1_000, growthPercent: 100 };

/**
 * Tables of the current schema past the threshold: live rows now (`pg_stat_user_tables`, moved by
 * inserts and deletes) against the count their last analysis recorded (`reltuples`, -1 before
 * the first).
 */
const DUE = `SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
  WHERE s.schemaname = current_schema() AND c.relkind = 'r' AND s.relname <> ALL ($3::text[])
    AND abs(s.n_live_tup - greatest(c.reltuples, 0)) > $1::bigint + $2::float8 / 100 * greatest(c.reltuples, 0)
  ORDER BY abs(s.n_live_tup - greatest(c.reltuples, 0)) DESC`;

/**
 * The kept counters' logs (migrations 23, 25, 26): written by the compliance writers' triggers
 * and emptied by each fold of the sweep, so their row count swings between nothing and
 * thousands from one check to the next, and every check found them due. Every statement that
 * reads them reads them whole (the fold's DELETE … RETURNING, the readers' UNION ALL … GROUP BY):
 * no plan of theirs turns on their statistics, and analysing them took 4.2 s of a first
 * generation's 67.6 s of statements at 100,000 nodes (pg_stat_statements). Left to autovacuum.
 */
export const FOLDED_LOGS = ['kept_fleet_log', 'kept_directives_log', 'kept_rules_log', 'kept_groups_log', 'kept_node_counts_log', 'kept_changes_log'];

/** The lock one server's checking connection holds (the schema's own: tests share a database). */
const LOCK = 'SELECT pg_try_advisory_lock(7263, hashtext(current_schema())) AS ok';
const UNLOCK = 'SELECT pg_advisory_unlock(7263, hashtext(current_schema()))';

export class TableStatistics {
  private last = 0;
  private running: Promise<unknown> | null = null;
  private stopped = false;

  constructor(private readonly pool: pg.Pool, private readonly o: AnalyzeOptions, private readonly clock: () => number = Date.now) {}

  /** A write transaction committed: check the tables if the interval has passed (in the background). */
  wrote(): void {
    if (this.stopped || this.o.intervalMs <= 0 || this.running) return;
    const now = this.clock();
    if (now - this.last < this.o.intervalMs) return;
    this.last = now;
    this.running = this.check().finally(() => {
      this.running = null;
    });
  }

  /** Analyse the tables due now; resolves when done (tests and the bench wait on it). */
  async check(): Promise<string[]> {
    const done: string[] = [];
    let c: pg.PoolClient | null = null;
    let locked = false;
    try {
      c = await this.pool.connect();
      locked = (await c.query<{ ok: boolean }>(LOCK)).rows[0]?.ok === true;
      if (!locked) return done; // another server is at it
      const { rows } = await c.query<{ relname: string }>(DUE, [this.o.minRows, this.o.growthPercent, FOLDED_LOGS]);
      for (const { relname } of rows) {
        if (this.stopped) break;
        // The name comes from the catalog of this schema; quoted all the same.
        await c.query(`ANALYZE "${relname.replace(/"/g, '""')}"`);
        done.push(relname);
      }
    } catch (err) {
      if (!this.stopped) this.o.onError?.('table statistics not brought up to date; tried again at the next check', err);
    } finally {
      if (c) {
        // A connection that could not give the lock back is closed, which gives it back.
        const kept = !locked || (await c.query(UNLOCK).then(() => true, () => false));
        c.release(!kept);
      }
    }
    return done;
  }

  /** Resolves when no check is running. */
  async idle(): Promise<void> {
    await this.running;
  }

  /** No new check, and one in progress stops after its current table; waits for it. */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.running;
  }
}
