/**
 * Reads from PostgreSQL streaming replicas (`[database] replicas`): the fleet-wide reads the
 * admin API, the console and exports make (node lists, inventories, runs, compliance, changes,
 * findings, events, counts) go to a replica whose staleness is within `replica_max_lag`; every
 * other read, every write and everything that decides (acceptance, deduplication, identity,
 * tokens, job claims, policy bundles) stays on the primary, whatever the replicas' state.
 *
 * Staleness is measured, not assumed. Every `replica_check_interval` the primary's current WAL
 * position is read first, then each replica's replay position: a replica that has replayed past
 * it holds everything committed on the primary before that moment, so its staleness is at most
 * the time since the last check it passed. One that falls behind for longer than the bound, does
 * not answer, or is not a standby being replayed, is left out until a check passes again; a read
 * that fails on a replica is answered by the primary.
 */
import type pg from 'pg';
import { shownUrl as redact } from './check.js';
import type { Store } from './store.js';

/** The Store's methods a replica may answer (reads shown to people; nothing decides on them). */
export const REPLICA_READS: ReadonlySet<string> = new Set([
  'listNodes', 'listNodeIds', 'getNode', 'getHistory', 'getInventory', 'inventoryHistory', 'listSoftware',
  'listRuns', 'getRunLog', 'getRunLogText',
  'complianceSummary', 'complianceByRule', 'complianceByGroup', 'complianceNodes', 'worstNodes', 'targetNodes',
  'listChanges', 'changesHistogram', 'listFindings', 'listEvents', 'counts',
]);

export interface ReplicaOptions {
  primaryUrl: string;
  urls: readonly string[];
  /** A replica further behind than this is not read from. */
  maxLagMs: number;
  checkMs: number;
  /** Opens a store (read-only use) on a replica's URL. */
  open: (url: string) => Promise<Store>;
  /** Told when a replica starts or stops being read from. */
  onChange?: (url: string, inUse: boolean, why: string) => void;
}

export interface ReplicaStatus {
  /** The replica's URL without its password. */
  url: string;
  in_use: boolean;
  /** At most this far behind the primary, ms (null: never caught up). */
  staleness_ms: number | null;
  last_check: string | null;
  error?: string;
}

interface Replica {
  url: string;
  store: Store;
  probe: pg.Pool;
  /** When it last held everything the primary had committed (ms since epoch). */
  freshAt: number | null;
  checkedAt: number | null;
  error: string | null;
  inUse: boolean;
}

export class ReplicaReads {
  private readonly replicas: Replica[] = [];
  private primaryProbe: pg.Pool | null = null;
  private timer: NodeJS.Timeout | null = null;
  private checking: Promise<void> | null = null;
  private next = 0;

  private constructor(private readonly primary: Store, private readonly opts: ReplicaOptions) {}

  /** Opens a store and a probe connection per replica, checks them once, and checks them every checkMs after. */
  static async open(primary: Store, opts: ReplicaOptions): Promise<ReplicaReads> {
    const r = new ReplicaReads(primary, opts);
    const { default: driver } = await import('pg');
    r.primaryProbe = probePool(driver, opts.primaryUrl);
    for (const url of opts.urls) {
      r.replicas.push({ url, store: await opts.open(url), probe: probePool(driver, url), freshAt: null, checkedAt: null, error: null, inUse: false });
    }
    await r.check();
    r.timer = setInterval(() => void r.check(), opts.checkMs);
    r.timer.unref();
    return r;
  }

  /**
   * The primary's Store, with the reads of REPLICA_READS answered by a replica in use (in turn),
   * or by the primary when none is.
   */
  reads(): Store {
    return new Proxy(this.primary, {
      get: (target, prop) => {
        const own = Reflect.get(target, prop, target) as unknown;
        if (typeof prop !== 'string' || !REPLICA_READS.has(prop) || typeof own !== 'function') {
          return typeof own === 'function' ? (own as (...a: unknown[]) => unknown).bind(target) : own;
        }
        return (...args: unknown[]) => this.read(prop, args, (own as (...a: unknown[]) => unknown).bind(target));
      },
    });
  }

  private async read(method: string, args: unknown[], onPrimary: (...a: unknown[]) => unknown): Promise<unknown> {
    const r = this.pick();
    if (!r) return onPrimary(...args);
    try {
      return await (r.store as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>)[method]!(...args);
    } catch (err) {
      // A replica that cannot answer is left out until a check passes; a coded refusal (a bad
      // filter, an unknown node) would be the primary's answer too.
      if ((err as { code?: string }).code !== 'ERR_STORE') throw err;
      this.leave(r, `a read failed: ${(err as Error).message}`);
      return onPrimary(...args);
    }
  }

  private pick(): Replica | null {
    const now = Date.now();
    for (let k = 0; k < this.replicas.length; k++) {
      const r = this.replicas[(this.next + k) % this.replicas.length]!;
      if (r.inUse && r.freshAt !== null && now - r.freshAt <= this.opts.maxLagMs) {
        this.next = (this.next + k + 1) % this.replicas.length;
        return r;
      }
    }
    return null;
  }

  /** One round of checks (a round still running is waited for, not doubled). */
  check(): Promise<void> {
    this.checking ??= this.round().finally(() => {
      this.checking = null;
    });
    return this.checking;
  }

  private async round(): Promise<void> {
    const at = Date.now();
    let lsn: string;
    try {
      lsn = (await this.primaryProbe!.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!.lsn;
    } catch (err) {
      // Without the primary's position nothing can be judged: staleness keeps growing.
      for (const r of this.replicas) this.judge(r, at, `the primary's WAL position could not be read: ${(err as Error).message}`);
      return;
    }
    await Promise.all(this.replicas.map(async (r) => {
      try {
        const row = (await r.probe.query<{ standby: boolean; caught_up: boolean | null }>(
          'SELECT pg_is_in_recovery() AS standby, pg_wal_lsn_diff(pg_last_wal_replay_lsn(), $1::pg_lsn) >= 0 AS caught_up', [lsn],
        )).rows[0]!;
        if (!row.standby) return this.judge(r, at, 'it is not a standby (pg_is_in_recovery() is false)');
        if (row.caught_up) r.freshAt = at;
        this.judge(r, at, row.caught_up ? null : 'replay is behind the primary');
      } catch (err) {
        this.judge(r, at, `it does not answer: ${(err as Error).message}`);
      }
    }));
  }

  private judge(r: Replica, at: number, problem: string | null): void {
    r.checkedAt = at;
    const fresh = r.freshAt !== null && Date.now() - r.freshAt <= this.opts.maxLagMs;
    const standbyProblem = problem !== null && problem !== 'replay is behind the primary';
    r.error = problem;
    if (fresh && !standbyProblem) {
      if (!r.inUse) {
        r.inUse = true;
        this.opts.onChange?.(redact(r.url), true, 'within replica_max_lag');
      }
    } else {
      this.leave(r, problem ?? 'further behind than replica_max_lag');
    }
  }

  private leave(r: Replica, why: string): void {
    if (!r.inUse) return;
    r.inUse = false;
    this.opts.onChange?.(redact(r.url), false, why);
  }

  status(): ReplicaStatus[] {
    const now = Date.now();
    return this.replicas.map((r) => ({
      url: redact(r.url),
      in_use: r.inUse && r.freshAt !== null && now - r.freshAt <= this.opts.maxLagMs,
      staleness_ms: r.freshAt === null ? null : now - r.freshAt,
      last_check: r.checkedAt === null ? null : new Date(r.checkedAt).toISOString(),
      ...(r.error ? { error: r.error } : {}),
    }));
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.checking?.catch(() => undefined);
    await Promise.all([
      this.primaryProbe?.end(),
      ...this.replicas.flatMap((r) => [r.probe.end(), r.store.close()]),
    ].map((p) => p?.catch(() => undefined)));
  }
}

/** One connection for the checks, short timeouts: a replica that hangs is one that does not answer. */
function probePool(driver: typeof pg, url: string): pg.Pool {
  const pool = new driver.Pool({ connectionString: url, max: 1, connectionTimeoutMillis: 5_000, statement_timeout: 5_000, query_timeout: 5_000 });
  pool.on('error', () => undefined);
  return pool;
}
