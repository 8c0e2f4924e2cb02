/**
 * The kept compliance counters on PostgreSQL (kept.ts). Readers take one snapshot of counters,
 * logs and thresholds. The sweep takes the advisory lock every writer holds shared while it
 * decides a node's mode, so thresholds never move under a writer, for one step (sweepStep) of
 * at most `[compliance] kept_sweep_step` nodes at a time; it gives up after
 * `lock_timeout` rather than wait behind a long ingest (a writer waiting for it while holding a
 * row the sweep needs would otherwise be a deadlock), and tries again next time. Folding the
 * triggers' logs into the counters needs no lock: only the sweep writes the counters.
 */
import type pg from 'pg';
import type { PostgresDb } from '../postgres/db.js';
import {
  correctionParams, correctionSql, FOLD_SQL, FOLD_VACUUM_ROWS, KEPT_SWEEP_MAX_STEPS, KEPT_SWEEP_STEP, keptByGroup, keptByRule, keptSql, keptSummary,
  sameThresholds, sweepStep, sweepTouchSql, thresholdsOf, touchedCountSql, worstKeptSql, type KeptSweep, type KeptThresholds,
} from './kept.js';
import { complianceClassSql, nodeComplianceFromRow } from './rows.js';
import { membershipChanges } from './members.js';
import { KEPT_LOCK_ARGS } from '../migrations/0025_kept_groups.js';
import { CHANGES_FOLD_SQL } from '../changes/kept.js';
import type { ComplianceAggregate, ComplianceClock, GroupComplianceRow, NodeComplianceRow, RuleComplianceRow } from './types.js';

const SQL = keptSql(true);
type Rows = Record<string, unknown>[];

/**
 * How long the sweep waits for writers before it gives up until next time: under PostgreSQL's
 * `deadlock_timeout` (1 s by default), so that in a wait cycle with a writer the sweep is the one
 * that gives up, never the writer's transaction.
 */
export const SWEEP_LOCK_TIMEOUT_MS = 500;

/** The thresholds the counters are swept to (kept_sweep), in the caller's snapshot. */
export async function postgresSwept(c: pg.PoolClient | pg.Pool): Promise<KeptThresholds> {
  const r = (await c.query('SELECT silent_before, applying_after FROM kept_sweep WHERE id = 1')).rows[0] as Record<string, unknown>;
  return { silent_before: Number(r.silent_before), applying_after: Number(r.applying_after) };
}

/** `fn` in a read-only transaction of one snapshot. */
export async function snapshot<T>(db: PostgresDb, what: string, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  return db.tx(what, async (c) => {
    await c.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY');
    return fn(c);
  });
}

async function corrections(c: pg.PoolClient, what: 'directives' | 'fleet' | 'groups', at: KeptThresholds): Promise<Rows> {
  const kept = await postgresSwept(c);
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

export function postgresKeptByGroup(db: PostgresDb, clock: ComplianceClock): Promise<GroupComplianceRow[]> {
  const at = thresholdsOf(clock);
  return snapshot(db, 'complianceByGroup', async (c) => keptByGroup((await c.query(SQL.groups)).rows as Rows, await corrections(c, 'groups', at)));
}

/** The worst nodes at `clock` from the kept shares (kept.ts worstKeptSql), in one snapshot. */
export function postgresKeptWorst(db: PostgresDb, limit: number, clock: ComplianceClock): Promise<NodeComplianceRow[]> {
  const at = thresholdsOf(clock);
  return snapshot(db, 'worstNodes', async (c) => {
    const values: unknown[] = [];
    const sql = worstKeptSql((v) => `$${values.push(v)}`, complianceClassSql, await postgresSwept(c), at, limit);
    return ((await c.query(sql, values)).rows as Rows).map(nodeComplianceFromRow);
  });
}

export async function postgresKeptSweep(db: PostgresDb, clock: ComplianceClock, step = KEPT_SWEEP_STEP): Promise<KeptSweep> {
  const at = thresholdsOf(clock);
  let checked = 0;
  let steps = 0;
  let longest = 0;
  let reached = false;
  let done = true;
  try {
    // A step at a time (sweepStep), each in its own transaction: writers go on between them.
    for (; ; steps++) {
      const kept = await postgresSwept(db.pool);
      if ((reached = sameThresholds(kept, at)) || steps === KEPT_SWEEP_MAX_STEPS) break;
      const to = await sweepStep(kept, at, step, async (t) => Number((await db.query('sweepCompliance', db.pool, {
        text: touchedCountSql((i) => `$${i}::bigint`, step + 1), values: correctionParams(kept, t).slice(0, 4),
      })).rows[0]?.n ?? 0));
      const t0 = performance.now();
      checked += await db.tx('sweepCompliance', async (c) => {
        await c.query(`SET LOCAL lock_timeout = ${SWEEP_LOCK_TIMEOUT_MS}`);
        await c.query(`SELECT pg_advisory_xact_lock(${KEPT_LOCK_ARGS})`);
        // Another server may have swept meanwhile: the next step starts from where it left them.
        if (!sameThresholds(await postgresSwept(c), kept)) return 0;
        await c.query('UPDATE kept_sweep SET silent_before = $1, applying_after = $2 WHERE id = 1', [to.silent_before, to.applying_after]);
        return (await c.query(sweepTouchSql((i) => `$${i}::bigint`), correctionParams(kept, to).slice(0, 4))).rowCount ?? 0;
      });
      longest = Math.max(longest, performance.now() - t0);
    }
  } catch (err) {
    if (!isLockTimeout(err)) throw err;
    done = false;
  }
  let folded = 0;
  await db.tx('sweepCompliance', async (c) => {
    // The changes histogram's counters (migration 26) fold with them.
    for (const sql of [...FOLD_SQL, ...CHANGES_FOLD_SQL]) folded += Number((await c.query(sql)).rows[0]?.n ?? 0);
  });
  // VACUUM runs outside a transaction. Not truncating: the logs fill again at once, and cutting
  // their empty tail takes a lock every writer's trigger would queue behind (VACUUM waits up to
  // 5 s for it, seen as VacuumTruncate in pg_stat_activity during the fleet run).
  if (folded > FOLD_VACUUM_ROWS) await db.query('sweepCompliance', 'VACUUM (TRUNCATE false) kept_directives_log, kept_rules_log, kept_fleet_log, kept_groups_log, kept_node_counts_log, kept_changes_log');
  return { checked, folded, done: done && reached, steps, longest_step_ms: Math.round(longest) };
}

/** Tries of a membership write whose lock wait ran over (each `SWEEP_LOCK_TIMEOUT_MS`) before it is left to the next generation. */
export const MEMBERS_LOCK_TRIES = 5;

/**
 * Policy group memberships of `nodeIds` brought to `groups` (migration 25), changes only.
 *
 * The members' triggers read each node's class and compliance row. Every writer of those holds
 * the node's row lock (ingest, expectations, a class change, a deletion, `setKeepLast`) or the
 * kept lock exclusively (the sweep). So the rows of the nodes whose memberships change are
 * locked here, in id order as every batch takes them, then the kept lock is taken shared: a
 * membership never reads a class or compliance row that a concurrent transaction is changing,
 * and writers of other nodes are not kept waiting. (Taking the kept lock exclusively instead
 * made every generation wait for all the fleet's writers in flight, and all of them wait behind
 * it: an enrolment wave, one generation per batch of newcomers, went at ~25 nodes a second.)
 *
 * The stored memberships are compared without a lock first: a generation that moves nobody
 * locks nothing. A wait over `SWEEP_LOCK_TIMEOUT_MS` gives up and tries again; after
 * MEMBERS_LOCK_TRIES the rows stay as they are and the answer is -1: the next generation of
 * those nodes compares them again.
 */
export async function postgresPutGroupMembers(db: PostgresDb, nodeIds: readonly string[], groups: ReadonlyMap<string, readonly string[]>): Promise<number> {
  if (nodeIds.length === 0) return 0;
  const read = async (c: pg.PoolClient | pg.Pool, ids: readonly string[]) => membershipChanges(ids, groups,
    (await c.query('SELECT node_id, group_id FROM policy_group_members WHERE node_id = ANY($1::text[])', [ids])).rows as Array<{ node_id: string; group_id: string }>);
  const first = await read(db.pool, nodeIds);
  if (first.added.length + first.removed.length === 0) return 0;
  const moving = [...new Set([...first.added, ...first.removed].map((x) => x[1]))];
  for (let attempt = 1; ; attempt++) {
    try {
      return await db.tx('putGroupMembers', async (c) => {
        await c.query(`SET LOCAL lock_timeout = ${SWEEP_LOCK_TIMEOUT_MS}`);
        await c.query('SELECT id FROM nodes WHERE id = ANY($1::text[]) ORDER BY id FOR NO KEY UPDATE', [moving]);
        await c.query(`SELECT pg_advisory_xact_lock_shared(${KEPT_LOCK_ARGS})`);
        // Read again under the locks: another server may have written them meanwhile.
        const { added, removed } = await read(c, moving);
        if (removed.length) {
          await c.query(`DELETE FROM policy_group_members m USING unnest($1::text[], $2::text[]) AS u(group_id, node_id)
            WHERE m.group_id = u.group_id AND m.node_id = u.node_id`, [removed.map((x) => x[0]), removed.map((x) => x[1])]);
        }
        if (added.length) {
          // A node deleted meanwhile gets none (its deletion took its memberships).
          await c.query(`INSERT INTO policy_group_members (group_id, node_id)
            SELECT u.group_id, u.node_id FROM unnest($1::text[], $2::text[]) AS u(group_id, node_id) JOIN nodes n ON n.id = u.node_id
            ON CONFLICT DO NOTHING`, [added.map((x) => x[0]), added.map((x) => x[1])]);
        }
        return added.length + removed.length;
      });
    } catch (err) {
      if (!isLockTimeout(err)) throw err;
      if (attempt >= MEMBERS_LOCK_TRIES) return -1;
    }
  }
}

/** A lock wait over `lock_timeout` (55P03), as the store reports it (the driver's error as cause). */
function isLockTimeout(err: unknown): boolean {
  for (let e = err as { code?: unknown; cause?: unknown } | undefined; e; e = e.cause as typeof e) {
    if (e.code === '55P03') return true;
  }
  return false;
}
