/**
 * The kept compliance counters on PostgreSQL (kept.ts). Readers take one snapshot of counters,
 * logs and thresholds. The sweep takes the advisory lock every writer holds shared while it
 * decides a node's mode, so thresholds never move under a writer; it gives up after
 * `lock_timeout` rather than wait behind a long ingest (a writer waiting for it while holding a
 * row the sweep needs would otherwise be a deadlock), and tries again next time. Folding the
 * triggers' logs into the counters needs no lock: only the sweep writes the counters.
 */
import type pg from 'pg';
import type { PostgresDb } from '../postgres/db.js';
import {
  correctionParams, correctionSql, FOLD_SQL, FOLD_VACUUM_ROWS, KEPT_LOCK, keptByRule, keptSql, keptSummary, sameThresholds, sweepTouchSql, thresholdsOf,
  type KeptSweep, type KeptThresholds,
} from './kept.js';
import type { ComplianceAggregate, ComplianceClock, RuleComplianceRow } from './types.js';

const SQL = keptSql(true);
type Rows = Record<string, unknown>[];

/**
 * How long the sweep waits for writers before it gives up until next time: under PostgreSQL's
 * `deadlock_timeout` (1 s by default), so that in a wait cycle with a writer the sweep is the one
 * that gives up, never the writer's transaction.
 */
export const SWEEP_LOCK_TIMEOUT_MS = 500;

async function swept(c: pg.PoolClient): Promise<KeptThresholds> {
  const r = (await c.query('SELECT silent_before, applying_after FROM kept_sweep WHERE id = 1')).rows[0] as Record<string, unknown>;
  return { silent_before: Number(r.silent_before), applying_after: Number(r.applying_after) };
}

async function snapshot<T>(db: PostgresDb, what: string, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  return db.tx(what, async (c) => {
    await c.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY');
    return fn(c);
  });
}

async function corrections(c: pg.PoolClient, what: 'directives' | 'fleet', at: KeptThresholds): Promise<Rows> {
  const kept = await swept(c);
  if (sameThresholds(kept, at)) return [];
  return (await c.query(correctionSql((i) => `$${i}::bigint`, what), correctionParams(kept, at))).rows as Rows;
}

export function postgresKeptByRule(db: PostgresDb, by: 'rule' | 'directive', clock: ComplianceClock): Promise<RuleComplianceRow[]> {
  const at = thresholdsOf(clock);
  return snapshot(db, 'complianceByRule', async (c) => keptByRule(by, (await c.query(SQL.directives)).rows as Rows,
    by === 'rule' ? (await c.query(SQL.rules)).rows as Rows : [], await corrections(c, 'directives', at)));
}

export function postgresKeptSummary(db: PostgresDb, clock: ComplianceClock): Promise<ComplianceAggregate> {
  const at = thresholdsOf(clock);
  return snapshot(db, 'complianceSummary', async (c) => keptSummary((await c.query(SQL.fleet)).rows as Rows, await corrections(c, 'fleet', at)));
}

export async function postgresKeptSweep(db: PostgresDb, clock: ComplianceClock): Promise<KeptSweep> {
  const at = thresholdsOf(clock);
  let checked = 0;
  let done = true;
  try {
    checked = await db.tx('sweepCompliance', async (c) => {
      await c.query(`SET LOCAL lock_timeout = ${SWEEP_LOCK_TIMEOUT_MS}`);
      await c.query('SELECT pg_advisory_xact_lock($1)', [KEPT_LOCK]);
      const kept = await swept(c);
      if (sameThresholds(kept, at)) return 0;
      await c.query('UPDATE kept_sweep SET silent_before = $1, applying_after = $2 WHERE id = 1', [at.silent_before, at.applying_after]);
      return (await c.query(sweepTouchSql((i) => `$${i}::bigint`), correctionParams(kept, at).slice(0, 4))).rowCount ?? 0;
    });
  } catch (err) {
    if (!isLockTimeout(err)) throw err;
    done = false;
  }
  let folded = 0;
  await db.tx('sweepCompliance', async (c) => {
    for (const sql of FOLD_SQL) folded += Number((await c.query(sql)).rows[0]?.n ?? 0);
  });
  // VACUUM runs outside a transaction.
  if (folded > FOLD_VACUUM_ROWS) await db.query('sweepCompliance', 'VACUUM kept_directives_log, kept_rules_log, kept_fleet_log');
  return { checked, folded, done };
}

/** A lock wait over `lock_timeout` (55P03), as the store reports it (the driver's error as cause). */
function isLockTimeout(err: unknown): boolean {
  for (let e = err as { code?: unknown; cause?: unknown } | undefined; e; e = e.cause as typeof e) {
    if (e.code === '55P03') return true;
  }
  return false;
}
