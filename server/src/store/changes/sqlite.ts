/** Changes on SQLite: stored with their run, labelled against the node's previous run, listed and counted. */
import type { SqliteDb } from '../sqlite/db.js';
import { checkPaging } from '../input.js';
import { sqliteDialect } from '../nodes/filters/sqlite.js';
import type { RunInsert } from '../runs/types.js';
import type { StoreRules } from '../rules.js';
import type { SqliteEvents } from '../events/sqlite.js';
import { changeFromRow, changeWhere, labelFor } from './rows.js';
import { keptHistogramSql, keptPlan, SQLITE_HOURS } from './kept.js';
import { CHANGES_COUNT_LIMIT, type ChangeBucket, type ChangeInput, type ChangeLabel, type ChangePage, type ChangeQuery, type ChangeStore } from './types.js';

export class SqliteChanges implements ChangeStore {
  constructor(private readonly db: SqliteDb, private readonly events: SqliteEvents, private readonly rules: StoreRules) {}

  /**
   * A stored run's changes, labelled (drift repaired is an event too), and the next run's
   * labelled again: inside the run's transaction.
   */
  runStored(run: RunInsert, runId: number, startedUtc: string, changes: ChangeInput[]): void {
    if (changes.length > 0) {
      const label = this.insertChanges(run, runId, startedUtc, changes);
      const e = this.rules.events.repaired(run.node_id, { id: runId, started_utc: startedUtc }, changes, label);
      if (e) this.events.write([e]);
    }
    this.relabelNext(run, startedUtc);
  }

  /**
   * A run's changes, labelled: intentional when the run's config id differs from the node's
   * previous run's (by start time: a back-filled run is compared with the run before it), or
   * when the node has no run before it; corrective otherwise.
   */
  private insertChanges(run: RunInsert, runId: number, startedUtc: string, changes: ChangeInput[]): ChangeLabel {
    const prev = this.db.stmt('SELECT config_id FROM runs WHERE node_id = ? AND started_at_utc < ? ORDER BY started_at_utc DESC LIMIT 1')
      .get(run.node_id, startedUtc) as { config_id: string | null } | undefined;
    const label = labelFor(prev === undefined ? undefined : prev.config_id, run.config_id ?? null);
    const ins = this.db.stmt(`INSERT INTO changes (node_id, run_id, run_started_at, at, rule_id, directive_id, component, key_value,
        event_type, message, label, config_id, diff, diff_truncated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
    for (const c of changes) {
      ins.run(run.node_id, runId, run.started_at, c.at, c.rule_id, c.directive_id, c.component, c.key_value, c.event_type,
        c.message, label, run.config_id ?? null, c.diff, c.diff_truncated ? 1 : 0);
    }
    return label;
  }

  /**
   * A run stored after a later one of the same node (the relay forwarded them out of order, or
   * one was back-filled) is that later run's predecessor now: its changes are labelled again
   * against this run's config id.
   */
  private relabelNext(run: RunInsert, startedUtc: string): void {
    const next = this.db.stmt('SELECT id, config_id FROM runs WHERE node_id = ? AND started_at_utc > ? ORDER BY started_at_utc LIMIT 1')
      .get(run.node_id, startedUtc) as { id: number; config_id: string | null } | undefined;
    if (next) this.db.stmt('UPDATE changes SET label = ? WHERE node_id = ? AND run_id = ?').run(labelFor(run.config_id ?? null, next.config_id), run.node_id, next.id);
  }

  private changeWhere(q: ChangeQuery, values: unknown[]): string {
    return changeWhere(q, sqliteDialect(this.db, values), (ids) => {
      values.push(JSON.stringify(ids));
      return '(SELECT value FROM json_each(?))';
    });
  }

  async listChanges(q: ChangeQuery, page: number, perPage: number): Promise<ChangePage> {
    const { limit, offset } = checkPaging(page, perPage);
    const values: unknown[] = [];
    const where = this.changeWhere(q, values);
    return this.db.read('listChanges', () => {
      const { n } = this.db.stmt(`SELECT count(*) AS n FROM (SELECT 1 FROM changes c ${where} LIMIT ${CHANGES_COUNT_LIMIT + 1})`).get(...values) as { n: number };
      const rows = this.db.stmt(`SELECT c.* FROM changes c ${where} ORDER BY c.at DESC, c.id DESC LIMIT ? OFFSET ?`)
        .all(...values, limit, offset) as Record<string, unknown>[];
      return { data: rows.map(changeFromRow), total: Math.min(n, CHANGES_COUNT_LIMIT), total_capped: n > CHANGES_COUNT_LIMIT };
    });
  }

  async changesHistogram(q: ChangeQuery, by: 'hour' | 'day'): Promise<ChangeBucket[]> {
    const plan = keptPlan(q);
    if (plan === null) return this.changesHistogramFresh(q, by);
    const values: unknown[] = [];
    const sql = keptHistogramSql(q, plan, by, sqliteDialect(this.db, values), (ids) => {
      values.push(JSON.stringify(ids));
      return '(SELECT value FROM json_each(?))';
    }, SQLITE_HOURS, false);
    return bucketsOf(this.db.read('changesHistogram', () => this.db.stmt(sql).all(...values)) as Array<Record<string, unknown>>);
  }

  async changesHistogramFresh(q: ChangeQuery, by: 'hour' | 'day'): Promise<ChangeBucket[]> {
    const values: unknown[] = [];
    const where = this.changeWhere(q, values);
    // ISO text: the first 13 characters are the hour, the first 10 the day.
    const bucket = by === 'hour' ? "substr(c.at, 1, 13) || ':00:00.000Z'" : "substr(c.at, 1, 10) || 'T00:00:00.000Z'";
    return bucketsOf(this.db.read('changesHistogram', () => this.db.stmt(`SELECT ${bucket} AS at,
        sum(c.label = 'intentional') AS intentional, sum(c.label = 'corrective') AS corrective
      FROM changes c ${where} GROUP BY 1 ORDER BY 1`).all(...values)) as Array<Record<string, unknown>>);
  }
}

const bucketsOf = (rows: Array<Record<string, unknown>>): ChangeBucket[] =>
  rows.map((r) => ({ at: r.at as string, intentional: Number(r.intentional), corrective: Number(r.corrective) }));
