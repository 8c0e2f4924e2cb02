/**
 * The lifecycle sweep and retention on PostgreSQL. The sweep takes its batches with `FOR UPDATE
 * SKIP LOCKED`: it never waits for a node the ingest holds, and two servers sweeping at once
 * share the work instead of doing it twice. Runs are partitioned by day (migration 2):
 * retention drops whole days (partitions.ts), and `prepareRunStorage` creates the next days'
 * partitions ahead of the runs that will fill them.
 */
import type pg from 'pg';
import type { PostgresDb } from '../postgres/db.js';
import type { NodeRules } from '../rules.js';
import { isoOf, toUtcIso } from '../time.js';
import { dayPartitions, dropExpiredPartitions } from './partitions.js';
import type { RegistryCounts, SweepStore, SweptNode } from './types.js';
import { deleteUnusedTexts } from '../policy/postgres-texts.js';

const inList = (values: readonly string[]) => values.map((s) => `'${s}'`).join(', ');

type Who = { hostname: string; policy_server: string | null; last_contact_at: Date | string | null };
const who = (r: Who) => ({ hostname: r.hostname, policy_server: r.policy_server, last_contact_at: r.last_contact_at === null ? null : isoOf(r.last_contact_at) });

export class PostgresSweep implements SweepStore {
  private readonly onMaintenance: (message: string, err?: unknown) => void;
  /** Days given up on (their runs stay in the default partition): not retried, not logged again. */
  private readonly skippedPartitions = new Set<string>();

  constructor(private readonly db: PostgresDb, private readonly rules: NodeRules, onMaintenance?: (message: string, err?: unknown) => void) {
    this.onMaintenance = onMaintenance ?? (() => undefined);
  }

  async markUnreachable(before: string, at: string, limit: number): Promise<SweptNode[]> {
    const [b, when] = [toUtcIso(before, 'before'), toUtcIso(at, 'at')];
    const { rows } = await this.db.query<{ id: string; state: string } & Who>('markUnreachable', this.db.pool, {
      text: `WITH picked AS (
          SELECT id FROM nodes WHERE status = 'reachable' AND last_contact_at < $1 ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED),
        upd AS (
          UPDATE nodes n SET status = 'unreachable', updated_at = GREATEST(n.updated_at, $2)
          FROM picked WHERE n.id = picked.id AND n.status = 'reachable' RETURNING n.id, n.state, n.hostname, n.policy_server, n.last_contact_at),
        h AS (
          INSERT INTO node_history (node_id, at, field, from_value, to_value, cause)
          SELECT id, $2, 'status', 'reachable', 'unreachable', 'missed runs' FROM upd ORDER BY id)
        SELECT id, state, hostname, policy_server, last_contact_at FROM upd ORDER BY id`,
      values: [b, when, limit],
    });
    return rows.map((r) => ({ id: r.id, ...who(r), before: { state: r.state, status: 'reachable' }, after: { state: r.state, status: 'unreachable' } }));
  }

  async markMissing(before: string, at: string, limit: number): Promise<SweptNode[]> {
    const [b, when] = [toUtcIso(before, 'before'), toUtcIso(at, 'at')];
    const { rows } = await this.db.query<{ id: string; old_state: string; old_status: string } & Who>('markMissing', this.db.pool, {
      text: `WITH picked AS (
          SELECT id, state, status FROM nodes WHERE state IN (${inList(this.rules.liveStates)}) AND last_contact_at < $1
          ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED),
        upd AS (
          UPDATE nodes n SET state = '${this.rules.missing}', status = 'unreachable', state_changed_at = $2,
            updated_at = GREATEST(n.updated_at, $2)
          FROM picked p WHERE n.id = p.id RETURNING n.id, p.state AS old_state, p.status AS old_status, n.hostname, n.policy_server, n.last_contact_at),
        h AS (
          INSERT INTO node_history (node_id, at, field, from_value, to_value, cause)
          SELECT id, $2, field, from_value, to_value, 'silence' FROM (
            SELECT id, 1 AS o, 'state' AS field, old_state AS from_value, '${this.rules.missing}' AS to_value FROM upd
            UNION ALL
            SELECT id, 2, 'status', old_status, 'unreachable' FROM upd WHERE old_status <> 'unreachable') e
          ORDER BY id, o)
        SELECT id, old_state, old_status, hostname, policy_server, last_contact_at FROM upd ORDER BY id`,
      values: [b, when, limit],
    });
    return rows.map((r) => ({ id: r.id, ...who(r), before: { state: r.old_state, status: r.old_status }, after: { state: this.rules.missing, status: 'unreachable' } }));
  }

  async purgeNodes(before: string, limit: number): Promise<SweptNode[]> {
    const b = toUtcIso(before, 'before');
    return this.db.tx('purgeNodes', async (c) => {
      const { rows } = await this.db.query<{ id: string; state: string; status: string } & Who>('purgeNodes', c, {
        text: `WITH picked AS (
            SELECT id FROM nodes WHERE state IN (${inList(this.rules.purgeable)}) AND state_changed_at < $1
            ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED),
          del AS (DELETE FROM nodes n USING picked WHERE n.id = picked.id RETURNING n.id, n.state, n.status, n.hostname, n.policy_server, n.last_contact_at)
          SELECT id, state, status, hostname, policy_server, last_contact_at FROM del ORDER BY id`,
        values: [b, limit],
      });
      await this.bump(c, 'purged_nodes', rows.length);
      return rows.map((r) => ({ id: r.id, ...who(r), before: { state: r.state, status: r.status }, after: null }));
    });
  }

  async deleteRunsBefore(before: string, limit: number): Promise<number> {
    const b = toUtcIso(before, 'before');
    // Whole days first (no row-by-row delete at all), then what lies outside the day partitions.
    let deleted = await dropExpiredPartitions(this.db.pool, new Date(b), this.onMaintenance, (c, n) => this.bump(c, 'deleted_runs', n));
    deleted += await this.db.tx('deleteRunsBefore', async (c) => {
      const res = await this.db.query('deleteRunsBefore', c, {
        text: `DELETE FROM runs WHERE (id, started_at_utc) IN (
          SELECT id, started_at_utc FROM runs WHERE started_at_utc < $1 ORDER BY started_at_utc LIMIT $2)`,
        values: [b, limit],
      });
      const n = res.rowCount ?? 0;
      await this.bump(c, 'deleted_runs', n);
      // Then the bases of days no run refers to any more (a base serves only runs of its day).
      if (n < limit) {
        await this.db.query('deleteRunsBefore', c, {
          text: `DELETE FROM run_bases WHERE id IN (SELECT x.id FROM run_bases x WHERE x.day < ($1::timestamptz AT TIME ZONE 'UTC')::date AND NOT EXISTS (
              SELECT 1 FROM runs r WHERE r.node_id = x.node_id AND r.started_at_utc >= x.day::timestamp AT TIME ZONE 'UTC'
                AND r.started_at_utc < (x.day + 1)::timestamp AT TIME ZONE 'UTC')
            LIMIT $2)`,
          values: [b, limit - n],
        });
      }
      return n;
    });
    return deleted;
  }

  async pruneHistory(before: string, limit: number): Promise<number> {
    const b = toUtcIso(before, 'before');
    const res = await this.db.query('pruneHistory', this.db.pool, {
      text: 'DELETE FROM node_history WHERE id IN (SELECT id FROM node_history WHERE at < $1 ORDER BY id LIMIT $2)',
      values: [b, limit],
    });
    return res.rowCount ?? 0;
  }

  async deleteChangesBefore(before: string, limit: number): Promise<number> {
    const b = toUtcIso(before, 'before');
    const res = await this.db.query('deleteChangesBefore', this.db.pool, {
      text: 'DELETE FROM changes WHERE id IN (SELECT id FROM changes WHERE at < $1 ORDER BY at LIMIT $2 FOR UPDATE SKIP LOCKED)',
      values: [b, limit],
    });
    // Inventory changes are kept as long (GET /api/1/nodes/<id>/inventory/history).
    const inv = await this.db.query('deleteChangesBefore', this.db.pool, {
      text: 'DELETE FROM inventory_changes WHERE id IN (SELECT id FROM inventory_changes WHERE at < $1 ORDER BY at LIMIT $2 FOR UPDATE SKIP LOCKED)',
      values: [b, limit],
    });
    return (res.rowCount ?? 0) + (inv.rowCount ?? 0);
  }

  async deleteUnusedExpectationLists(limit: number): Promise<number> {
    // A list a writer is taking back into use is locked by it (postgres-policy.ts, touchLists): skipped.
    const res = await this.db.query('deleteUnusedExpectationLists', this.db.pool, {
      text: `DELETE FROM expectation_lists WHERE digest IN (SELECT l.digest FROM expectation_lists l
        WHERE l.used_at < now() - interval '2 hours' AND NOT EXISTS (SELECT 1 FROM node_expectations e WHERE e.list = l.digest)
        LIMIT $1 FOR UPDATE SKIP LOCKED)`,
      values: [limit],
    });
    return res.rowCount ?? 0;
  }

  async deleteUnusedPolicyTexts(limit: number): Promise<number> {
    return deleteUnusedTexts(this.db, this.db.pool, limit);
  }

  async prepareRunStorage(now: Date): Promise<void> {
    await dayPartitions(this.db.pool, this.db.schema, now, this.onMaintenance, this.skippedPartitions);
  }

  private async bump(c: pg.PoolClient, name: string, by: number): Promise<void> {
    if (by > 0) await this.db.query('counters', c, { text: 'UPDATE registry_counters SET value = value + $2 WHERE name = $1', values: [name, by] });
  }

  async counts(): Promise<RegistryCounts> {
    // The kept counters and the triggers' log not folded yet (migration 25), in one statement: one snapshot.
    return this.countsFrom(`SELECT field AS col, value AS k, sum(nodes) AS c FROM (SELECT field, value, nodes FROM kept_node_counts
        UNION ALL SELECT field, value, nodes FROM kept_node_counts_log) s GROUP BY field, value HAVING sum(nodes) <> 0
      UNION ALL SELECT 'counter', name, value FROM registry_counters`);
  }

  async countsFresh(): Promise<RegistryCounts> {
    return this.countsFrom(`SELECT 'status' AS col, status AS k, count(*) AS c FROM nodes GROUP BY status
        UNION ALL SELECT 'state', state, count(*) FROM nodes GROUP BY state
        UNION ALL SELECT 'accepted', accepted, count(*) FROM nodes GROUP BY accepted
        UNION ALL SELECT 'counter', name, value FROM registry_counters`);
  }

  private async countsFrom(text: string): Promise<RegistryCounts> {
    const { rows } = await this.db.query<{ k: string; col: string; c: string }>('counts', this.db.pool, { text });
    const pick = (col: string) => Object.fromEntries(rows.filter((r) => r.col === col).sort((x, y) => (x.k < y.k ? -1 : 1)).map((r) => [r.k, Number(r.c)]));
    const counters = pick('counter');
    return {
      by_status: pick('status'), by_state: pick('state'), by_acceptance: pick('accepted'),
      purged_nodes: counters.purged_nodes ?? 0, deleted_runs: counters.deleted_runs ?? 0,
    };
  }
}
