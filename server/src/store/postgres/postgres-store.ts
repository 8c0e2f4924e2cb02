/**
 * Policies and the lifecycle sweep on PostgreSQL. The sweep takes its batches with `FOR UPDATE
 * SKIP LOCKED`: it never waits for a node the ingest holds, and two servers sweeping at once
 * share the work instead of doing it twice. Runs are partitioned by day (migration 2): retention
 * drops whole days, and `prepareRunStorage` creates the next days' partitions ahead of the runs.
 */
import type pg from 'pg';
import type { RegistryCounts, RegistryStore, PolicyBundleRecord, PolicyKind, PolicyObjectRecord, PolicyWrite } from '../store.js';
import { checkBundleRecord, checkPolicyKey, policyBodyJson } from '../policy-rows.js';
import { checkExpectations } from '../input.js';
import { LIVE_STATES, MISSING, PURGEABLE_STATES } from '../nodes/rules.js';
import { toUtcIso } from '../time.js';
import type { PostgresDb } from './db.js';
import type { PostgresCompliance } from '../compliance/postgres.js';
import { dayPartitions, dropExpiredPartitions } from './partitions.js';

const inList = (values: readonly string[]) => values.map((s) => `'${s}'`).join(', ');

export class PostgresRegistry implements RegistryStore {
  private readonly skippedPartitions = new Set<string>();
  private readonly onMaintenance: (message: string, err?: unknown) => void;

  constructor(private readonly db: PostgresDb, private readonly compliance: PostgresCompliance, opts: { onMaintenance?: (message: string, err?: unknown) => void } = {}) {
    this.onMaintenance = opts.onMaintenance ?? (() => undefined);
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

  // --- lifecycle sweep ----------------------------------------------------------------------

  async markUnreachable(before: string, at: string, limit: number): Promise<number> {
    const [b, when] = [toUtcIso(before, 'before'), toUtcIso(at, 'at')];
    const { rows } = await this.db.query<{ n: string }>('markUnreachable', this.db.pool, {
      text: `WITH picked AS (
          SELECT id FROM nodes WHERE status = 'reachable' AND last_contact_at < $1 ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED),
        upd AS (
          UPDATE nodes n SET status = 'unreachable', updated_at = GREATEST(n.updated_at, $2)
          FROM picked WHERE n.id = picked.id AND n.status = 'reachable' RETURNING n.id),
        h AS (
          INSERT INTO node_history (node_id, at, field, from_value, to_value, cause)
          SELECT id, $2, 'status', 'reachable', 'unreachable', 'missed runs' FROM upd ORDER BY id)
        SELECT count(*) AS n FROM upd`,
      values: [b, when, limit],
    });
    return Number(rows[0]!.n);
  }

  async markMissing(before: string, at: string, limit: number): Promise<number> {
    const [b, when] = [toUtcIso(before, 'before'), toUtcIso(at, 'at')];
    const { rows } = await this.db.query<{ n: string }>('markMissing', this.db.pool, {
      text: `WITH picked AS (
          SELECT id, state, status FROM nodes WHERE state IN (${inList(LIVE_STATES)}) AND last_contact_at < $1
          ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED),
        upd AS (
          UPDATE nodes n SET state = '${MISSING}', status = 'unreachable', state_changed_at = $2,
            updated_at = GREATEST(n.updated_at, $2)
          FROM picked p WHERE n.id = p.id RETURNING n.id, p.state AS old_state, p.status AS old_status),
        h AS (
          INSERT INTO node_history (node_id, at, field, from_value, to_value, cause)
          SELECT id, $2, field, from_value, to_value, 'silence' FROM (
            SELECT id, 1 AS o, 'state' AS field, old_state AS from_value, '${MISSING}' AS to_value FROM upd
            UNION ALL
            SELECT id, 2, 'status', old_status, 'unreachable' FROM upd WHERE old_status <> 'unreachable') e
          ORDER BY id, o)
        SELECT count(*) AS n FROM upd`,
      values: [b, when, limit],
    });
    return Number(rows[0]!.n);
  }

  async purgeNodes(before: string, limit: number): Promise<number> {
    const b = toUtcIso(before, 'before');
    return this.db.tx('purgeNodes', async (c) => {
      const { rows } = await this.db.query<{ n: string }>('purgeNodes', c, {
        text: `WITH picked AS (
            SELECT id FROM nodes WHERE state IN (${inList(PURGEABLE_STATES)}) AND state_changed_at < $1
            ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED),
          del AS (DELETE FROM nodes n USING picked WHERE n.id = picked.id RETURNING n.id)
          SELECT count(*) AS n FROM del`,
        values: [b, limit],
      });
      const n = Number(rows[0]!.n);
      await this.bump(c, 'purged_nodes', n);
      return n;
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

  async prepareRunStorage(now: Date): Promise<void> {
    await dayPartitions(this.db.pool, this.db.schema, now, this.onMaintenance, this.skippedPartitions);
  }

  private async bump(c: pg.PoolClient, name: string, by: number): Promise<void> {
    if (by > 0) await this.db.query('counters', c, { text: 'UPDATE registry_counters SET value = value + $2 WHERE name = $1', values: [name, by] });
  }

  async counts(): Promise<RegistryCounts> {
    const { rows } = await this.db.query<{ k: string; col: string; c: string }>('counts', this.db.pool, {
      text: `SELECT 'status' AS col, status AS k, count(*) AS c FROM nodes GROUP BY status
        UNION ALL SELECT 'state', state, count(*) FROM nodes GROUP BY state
        UNION ALL SELECT 'accepted', accepted, count(*) FROM nodes GROUP BY accepted
        UNION ALL SELECT 'counter', name, value FROM registry_counters`,
    });
    const pick = (col: string) => Object.fromEntries(rows.filter((r) => r.col === col).sort((x, y) => (x.k < y.k ? -1 : 1)).map((r) => [r.k, Number(r.c)]));
    const counters = pick('counter');
    return {
      by_status: pick('status'), by_state: pick('state'), by_acceptance: pick('accepted'),
      purged_nodes: counters.purged_nodes ?? 0, deleted_runs: counters.deleted_runs ?? 0,
    };
  }
  async listPolicyObjects(kind: PolicyKind): Promise<PolicyObjectRecord[]> {
    const { rows } = await this.db.query('listPolicyObjects', this.db.pool, {
      text: 'SELECT kind, id, body, updated_at FROM policy_objects WHERE kind = $1 ORDER BY id', values: [kind],
    });
    return rows.map(policyFromRow);
  }

  async getPolicyObject(kind: PolicyKind, id: string): Promise<PolicyObjectRecord | null> {
    const { rows } = await this.db.query('getPolicyObject', this.db.pool, {
      text: 'SELECT kind, id, body, updated_at FROM policy_objects WHERE kind = $1 AND id = $2', values: [kind, id],
    });
    return rows[0] ? policyFromRow(rows[0]) : null;
  }

  async putPolicyObject(kind: PolicyKind, id: string, body: Record<string, unknown>, at: string): Promise<boolean> {
    checkPolicyKey(kind, id);
    const json = policyBodyJson(body);
    const when = toUtcIso(at, 'at');
    // xmax = 0 only on a freshly inserted row: tells created from replaced in one statement.
    const { rows } = await this.db.query('putPolicyObject', this.db.pool, {
      text: `INSERT INTO policy_objects (kind, id, body, updated_at) VALUES ($1, $2, $3::jsonb, $4)
        ON CONFLICT (kind, id) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at
        RETURNING (xmax = 0) AS created`,
      values: [kind, id, json, when],
    });
    return rows[0]?.created === true;
  }

  async deletePolicyObject(kind: PolicyKind, id: string): Promise<boolean> {
    const res = await this.db.query('deletePolicyObject', this.db.pool, { text: 'DELETE FROM policy_objects WHERE kind = $1 AND id = $2', values: [kind, id] });
    return (res.rowCount ?? 0) > 0;
  }

  async getPolicyBundle(nodeId: string): Promise<PolicyBundleRecord | null> {
    const { rows } = await this.db.query('getPolicyBundle', this.db.pool, {
      name: 'bundle_get', text: 'SELECT node_id, config_id, generated_at, bundle FROM policy_bundles WHERE node_id = $1', values: [nodeId],
    });
    const r = rows[0];
    return r ? { node_id: r.node_id, config_id: r.config_id, generated_at: new Date(r.generated_at).toISOString(), bundle: r.bundle } : null;
  }

  async putPolicyBundle(b: PolicyBundleRecord): Promise<boolean> {
    checkBundleRecord(b);
    const when = toUtcIso(b.generated_at, 'generated_at');
    // INSERT … SELECT from nodes: an unknown node inserts nothing instead of failing on the key.
    const res = await this.db.query('putPolicyBundle', this.db.pool, {
      text: `INSERT INTO policy_bundles (node_id, config_id, generated_at, bundle)
        SELECT id, $2, $3, $4 FROM nodes WHERE id = $1
        ON CONFLICT (node_id) DO UPDATE SET config_id = excluded.config_id, generated_at = excluded.generated_at, bundle = excluded.bundle`,
      values: [b.node_id, b.config_id, when, b.bundle],
    });
    return (res.rowCount ?? 0) > 0;
  }

  async policyConfigIds(nodeIds: string[]): Promise<Map<string, string>> {
    const { rows } = await this.db.query('policyConfigIds', this.db.pool, {
      text: 'SELECT node_id, config_id FROM policy_bundles WHERE node_id = ANY($1::text[])', values: [nodeIds],
    });
    return new Map(rows.map((r) => [r.node_id as string, r.config_id as string]));
  }

  async putPolicies(items: PolicyWrite[]): Promise<number> {
    const checked = items.map((it) => {
      checkBundleRecord(it.bundle);
      return { ...it, when: toUtcIso(it.bundle.generated_at, 'generated_at'), expected: checkExpectations(it.bundle.config_id, it.expected) };
    });
    return this.db.tx('putPolicies', async (c) => {
      let n = 0;
      for (const it of checked) {
        if (!(await this.compliance.expectationsTx(c, it.bundle.node_id, it.bundle.config_id, it.expected, it.when))) continue;
        n++;
        if (it.expectationsOnly) continue;
        await this.db.query('putPolicies', c, {
          name: 'bundle_put',
          text: `INSERT INTO policy_bundles (node_id, config_id, generated_at, bundle) VALUES ($1, $2, $3, $4)
            ON CONFLICT (node_id) DO UPDATE SET config_id = excluded.config_id, generated_at = excluded.generated_at, bundle = excluded.bundle`,
          values: [it.bundle.node_id, it.bundle.config_id, it.when, it.bundle.bundle],
        });
      }
      return n;
    });
  }

  async deletePolicyBundle(nodeId: string): Promise<boolean> {
    const res = await this.db.query('deletePolicyBundle', this.db.pool, { text: 'DELETE FROM policy_bundles WHERE node_id = $1', values: [nodeId] });
    return (res.rowCount ?? 0) > 0;
  }
}

function policyFromRow(r: Record<string, unknown>): PolicyObjectRecord {
  return { kind: r.kind as PolicyKind, id: r.id as string, body: r.body as Record<string, unknown>, updated_at: new Date(r.updated_at as string).toISOString() };
}
