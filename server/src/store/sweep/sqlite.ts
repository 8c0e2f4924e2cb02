/**
 * The lifecycle sweep and retention on SQLite: each call is one IMMEDIATE transaction over a
 * bounded batch, so the ingest waits for one batch at most. Runs live in one table with a time
 * index: retention deletes rows, then the node-day bases no run refers to any more.
 */
import type { SqliteDb } from '../sqlite/db.js';
import type { HistoryInsert } from '../nodes/types.js';
import type { SqliteNodes } from '../nodes/sqlite.js';
import { runDay } from '../runs/run-codec.js';
import { toUtcIso } from '../time.js';
import type { RegistryCounts, SweepStore, SweptNode } from './types.js';

const inList = (values: readonly string[]) => values.map((s) => `'${s}'`).join(', ');

/**
 * The sweep's questions (parameters: the cut-off, the limit), each answered from migration 34's
 * indexes, in the order of the index they read, instead of a read of the whole nodes table.
 */
export const sweepSql = {
  unreachable: `SELECT id, state, hostname, policy_server, last_contact_at FROM nodes WHERE status = 'reachable' AND last_contact_at < ?
        ORDER BY last_contact_at, id LIMIT ?`,
  missing: (live: readonly string[]) => `SELECT id, state, status, hostname, policy_server, last_contact_at FROM nodes
        WHERE state IN (${inList(live)}) AND last_contact_at < ? ORDER BY last_contact_at, id LIMIT ?`,
  purge: (purgeable: readonly string[]) => `SELECT id, state, status, hostname, policy_server, last_contact_at FROM nodes
        WHERE state IN (${inList(purgeable)}) AND state_changed_at < ? ORDER BY id LIMIT ?`,
};

type Who = { hostname: string; policy_server: string | null; last_contact_at: string | null };
const who = (r: Who): Who => ({ hostname: r.hostname, policy_server: r.policy_server, last_contact_at: r.last_contact_at });

export class SqliteSweep implements SweepStore {
  constructor(private readonly db: SqliteDb, private readonly nodes: SqliteNodes) {}

  async markUnreachable(before: string, at: string, limit: number): Promise<SweptNode[]> {
    const [b, when] = [toUtcIso(before, 'before'), toUtcIso(at, 'at')];
    return this.db.write('markUnreachable', () => {
      const rows = this.db.stmt(sweepSql.unreachable).all(b, limit) as Array<{ id: string; state: string } & Who>;
      const upd = this.db.stmt(`UPDATE nodes SET status = 'unreachable', updated_at = max(updated_at, ?) WHERE id = ?`);
      for (const { id } of rows) {
        upd.run(when, id);
        this.nodes.history([{ node_id: id, at: when, field: 'status', from: 'reachable', to: 'unreachable', cause: 'missed runs' }]);
      }
      return rows.map((r) => ({ id: r.id, ...who(r), before: { state: r.state, status: 'reachable' }, after: { state: r.state, status: 'unreachable' } }));
    });
  }

  async markMissing(before: string, at: string, limit: number): Promise<SweptNode[]> {
    const [b, when] = [toUtcIso(before, 'before'), toUtcIso(at, 'at')];
    return this.db.write('markMissing', () => {
      const rows = this.db.stmt(sweepSql.missing(this.nodes.rules.liveStates)).all(b, limit) as Array<{ id: string; state: string; status: string } & Who>;
      const upd = this.db.stmt(`UPDATE nodes SET state = '${this.nodes.rules.missing}', status = 'unreachable', state_changed_at = ?,
        updated_at = max(updated_at, ?) WHERE id = ?`);
      for (const r of rows) {
        upd.run(when, when, r.id);
        const h: HistoryInsert[] = [{ node_id: r.id, at: when, field: 'state', from: r.state, to: this.nodes.rules.missing, cause: 'silence' }];
        if (r.status !== 'unreachable') h.push({ node_id: r.id, at: when, field: 'status', from: r.status, to: 'unreachable', cause: 'silence' });
        this.nodes.history(h);
      }
      return rows.map((r) => ({ id: r.id, ...who(r), before: { state: r.state, status: r.status }, after: { state: this.nodes.rules.missing, status: 'unreachable' } }));
    });
  }

  async purgeNodes(before: string, limit: number): Promise<SweptNode[]> {
    const b = toUtcIso(before, 'before');
    return this.db.write('purgeNodes', () => {
      const rows = this.db.stmt(sweepSql.purge(this.nodes.rules.purgeable)).all(b, limit) as Array<{ id: string; state: string; status: string } & Who>;
      const del = this.db.stmt('DELETE FROM nodes WHERE id = ?');
      for (const r of rows) del.run(r.id);
      this.bump('purged_nodes', rows.length);
      return rows.map((r) => ({ id: r.id, ...who(r), before: { state: r.state, status: r.status }, after: null }));
    });
  }

  async deleteRunsBefore(before: string, limit: number): Promise<number> {
    const b = toUtcIso(before, 'before');
    return this.db.write('deleteRunsBefore', () => {
      const { changes } = this.db.stmt(`DELETE FROM runs WHERE id IN (
        SELECT id FROM runs WHERE started_at_utc < ? ORDER BY started_at_utc LIMIT ?)`).run(b, limit);
      this.bump('deleted_runs', changes);
      // Then the bases of days no run refers to any more (a base serves only runs of its day).
      if (changes < limit) {
        this.db.stmt(`DELETE FROM run_bases WHERE id IN (SELECT x.id FROM run_bases x WHERE x.day < ? AND NOT EXISTS (
            SELECT 1 FROM runs r WHERE r.node_id = x.node_id AND r.started_at_utc >= x.day AND r.started_at_utc < x.day || 'T99')
          LIMIT ?)`).run(runDay(b), limit - changes);
      }
      return changes;
    });
  }

  async pruneHistory(before: string, limit: number): Promise<number> {
    const b = toUtcIso(before, 'before');
    return this.db.write('pruneHistory', () =>
      this.db.stmt('DELETE FROM node_history WHERE id IN (SELECT id FROM node_history WHERE at < ? ORDER BY id LIMIT ?)').run(b, limit).changes);
  }

  async deleteChangesBefore(before: string, limit: number): Promise<number> {
    const b = toUtcIso(before, 'before');
    return this.db.write('deleteChangesBefore', () =>
      this.db.stmt('DELETE FROM changes WHERE id IN (SELECT id FROM changes WHERE at < ? ORDER BY at LIMIT ?)').run(b, limit).changes
      // Inventory changes are kept as long (GET /api/1/nodes/<id>/inventory/history).
      + this.db.stmt('DELETE FROM inventory_changes WHERE id IN (SELECT id FROM inventory_changes WHERE at < ? ORDER BY at LIMIT ?)').run(b, limit).changes);
  }

  async deleteUnusedExpectationLists(limit: number): Promise<number> {
    return this.db.write('deleteUnusedExpectationLists', () => this.db.stmt(`DELETE FROM expectation_lists WHERE digest IN (SELECT l.digest FROM expectation_lists l
      WHERE NOT EXISTS (SELECT 1 FROM node_expectations e WHERE e.list = l.digest) LIMIT ?)`).run(limit).changes);
  }

  async deleteUnusedPolicyTexts(limit: number): Promise<number> {
    return this.db.write('deleteUnusedPolicyTexts', () => this.db.stmt(`DELETE FROM policy_texts WHERE config_id IN (SELECT t.config_id FROM policy_texts t
      WHERE NOT EXISTS (SELECT 1 FROM policy_bundles b WHERE b.config_id = t.config_id AND b.bundle = '') LIMIT ?)`).run(limit).changes);
  }

  async prepareRunStorage(_now: Date): Promise<void> {
    // One table, one time index: nothing to prepare ahead of time.
  }

  private bump(name: string, by: number): void {
    if (by > 0) this.db.stmt('UPDATE registry_counters SET value = value + ? WHERE name = ?').run(by, name);
  }

  async counts(): Promise<RegistryCounts> {
    return this.db.read('counts', () => {
      const kept = this.db.stmt('SELECT field, value AS k, nodes AS c FROM kept_node_counts WHERE nodes <> 0 ORDER BY field, value').all() as Array<{ field: string; k: string; c: number }>;
      const group = (col: string) => Object.fromEntries(kept.filter((r) => r.field === col).map((r) => [r.k, r.c]));
      return this.withTotals(group);
    });
  }

  async countsFresh(): Promise<RegistryCounts> {
    return this.db.read('counts', () => {
      const group = (col: string) => Object.fromEntries(
        (this.db.stmt(`SELECT ${col} AS k, count(*) AS c FROM nodes GROUP BY ${col} ORDER BY ${col}`).all() as Array<{ k: string; c: number }>)
          .map((r) => [r.k, r.c]),
      );
      return this.withTotals(group);
    });
  }

  /** The counts by `group`, with the registry's totals (inside the caller's read). */
  private withTotals(group: (col: string) => Record<string, number>): RegistryCounts {
    const counters = Object.fromEntries(
      (this.db.stmt('SELECT name, value FROM registry_counters').all() as Array<{ name: string; value: number }>).map((r) => [r.name, r.value]),
    );
    return {
      by_status: group('status'), by_state: group('state'), by_acceptance: group('accepted'),
      purged_nodes: Number(counters.purged_nodes ?? 0), deleted_runs: Number(counters.deleted_runs ?? 0),
    };
  }
}
