/**
 * Planner statistics kept up with the store's own bulk writes.
 *
 * The kept counters' triggers look rows up by node (a node's groups, its directive rows, its
 * kept row). A connection plans each such statement once and keeps the plan for its life. A plan
 * made while a table was empty (a new install, or a table a migration has just created on an
 * existing fleet) scans the whole table, and keeps scanning it while the table fills: the first
 * generation of a 100,000-node fleet took over half an hour that way, each node's trigger
 * reading all of policy_group_members twice. ANALYZE makes every connection plan again with the
 * table's real size. autovacuum does that too, when it is on, after its naptime (a minute); this
 * does it at the pace of the writes.
 *
 * After a write transaction, at most once per `intervalMs` and never two at once, the tables of
 * the store's schema whose rows changed since their last analysis by more than `minRows` plus
 * `growthPercent` % of their rows (autovacuum's own rule, with its defaults at 50 rows and 10 %)
 * are analysed, one at a time, on the pool. A failure is told and tried again at the next check.
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

export const ANALYZE_DEFAULTS: AnalyzeOptions = { intervalMs: 2_000, minRows: 1_000, growthPercent: 10 };

/** Tables of the current schema past the threshold (`pg_stat_user_tables` counts changed rows). */
const DUE = `SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
  WHERE s.schemaname = current_schema() AND c.relkind = 'r'
    AND s.n_mod_since_analyze > $1::bigint + $2::float8 / 100 * greatest(c.reltuples, 0)
  ORDER BY s.n_mod_since_analyze DESC`;

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
    try {
      const { rows } = await this.pool.query<{ relname: string }>(DUE, [this.o.minRows, this.o.growthPercent]);
      for (const { relname } of rows) {
        if (this.stopped) break;
        // The name comes from the catalog of this schema; quoted all the same.
        await this.pool.query(`ANALYZE "${relname.replace(/"/g, '""')}"`);
        done.push(relname);
      }
    } catch (err) {
      if (!this.stopped) this.o.onError?.('table statistics not brought up to date; tried again at the next check', err);
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
