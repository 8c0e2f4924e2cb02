/**
 * The kept compliance counters on SQLite (kept.ts): read in one snapshot, swept a step at a time,
 * each step a write transaction (SQLite has one writer: no writer can decide a mode under moving
 * thresholds).
 */
import type { SqliteDb } from '../sqlite/db.js';
import {
  correctionParams, correctionSql, KEPT_SWEEP_MAX_STEPS, KEPT_SWEEP_STEP, keptByGroup, keptByRule, keptSql, keptSummary, sameThresholds, sweepStep,
  sweepTouchSql, thresholdsOf, touchedCountSql, worstKeptSql, type KeptSweep, type KeptThresholds,
} from './kept.js';
import { complianceClassSql, nodeComplianceFromRow } from './rows.js';
import type { ComplianceAggregate, ComplianceClock, GroupComplianceRow, NodeComplianceRow, RuleComplianceRow } from './types.js';

const SQL = keptSql(false);
type Rows = Record<string, unknown>[];

/** The thresholds the counters are swept to (kept_sweep), inside the caller's read. */
export function sqliteSwept(db: SqliteDb): KeptThresholds {
  return db.stmt('SELECT silent_before, applying_after FROM kept_sweep WHERE id = 1').get() as KeptThresholds;
}

function corrections(db: SqliteDb, what: 'directives' | 'fleet' | 'groups', at: KeptThresholds): Rows {
  const kept = sqliteSwept(db);
  if (sameThresholds(kept, at)) return [];
  return db.stmt(correctionSql(() => '?', what)).all(...correctionParams(kept, at)) as Rows;
}

export function sqliteKeptByRule(db: SqliteDb, by: 'rule' | 'directive', clock: ComplianceClock): RuleComplianceRow[] {
  const at = thresholdsOf(clock);
  return db.read('complianceByRule', () => keptByRule(by, db.stmt(SQL.directives).all() as Rows,
    by === 'rule' ? db.stmt(SQL.rules).all() as Rows : [], corrections(db, 'directives', at)));
}

export function sqliteKeptSummary(db: SqliteDb, clock: ComplianceClock): ComplianceAggregate {
  const at = thresholdsOf(clock);
  return db.read('complianceSummary', () => keptSummary(db.stmt(SQL.fleet).all() as Rows, corrections(db, 'fleet', at)));
}

export function sqliteKeptByGroup(db: SqliteDb, clock: ComplianceClock): GroupComplianceRow[] {
  const at = thresholdsOf(clock);
  return db.read('complianceByGroup', () => keptByGroup(db.stmt(SQL.groups).all() as Rows, corrections(db, 'groups', at)));
}

/** The worst nodes at `clock` from the kept shares (kept.ts worstKeptSql), in one snapshot. */
export function sqliteKeptWorst(db: SqliteDb, limit: number, clock: ComplianceClock): NodeComplianceRow[] {
  const at = thresholdsOf(clock);
  return db.read('worstNodes', () => {
    const values: unknown[] = [];
    const sql = worstKeptSql((v) => (values.push(v), '?'), complianceClassSql, sqliteSwept(db), at, limit);
    return (db.stmt(sql).all(...values) as Rows).map(nodeComplianceFromRow);
  });
}

export async function sqliteKeptSweep(db: SqliteDb, clock: ComplianceClock, step = KEPT_SWEEP_STEP): Promise<KeptSweep> {
  const at = thresholdsOf(clock);
  let checked = 0;
  let steps = 0;
  let longest = 0;
  let reached = false;
  // A step at a time (sweepStep), each a write of its own, the event loop turning between them.
  for (; ; steps++) {
    const kept = db.read('sweepCompliance', () => sqliteSwept(db));
    if ((reached = sameThresholds(kept, at)) || steps === KEPT_SWEEP_MAX_STEPS) break;
    if (steps > 0) await new Promise<void>((resolve) => setImmediate(resolve));
    const to = await sweepStep(kept, at, step, (t) => Number((db.read('sweepCompliance', () =>
      db.stmt(touchedCountSql(() => '?', step + 1)).get(...correctionParams(kept, t).slice(0, 4))) as { n: number }).n));
    const t0 = performance.now();
    checked += db.write('sweepCompliance', () => {
      if (!sameThresholds(sqliteSwept(db), kept)) return 0;
      db.stmt('UPDATE kept_sweep SET silent_before = ?, applying_after = ? WHERE id = 1').run(to.silent_before, to.applying_after);
      return db.stmt(sweepTouchSql(() => '?')).run(...correctionParams(kept, to).slice(0, 4)).changes;
    });
    longest = Math.max(longest, performance.now() - t0);
  }
  return { checked, folded: 0, done: reached, steps, longest_step_ms: Math.round(longest) };
}
