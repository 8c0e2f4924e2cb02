/** Changes on PostgreSQL: stored with their run, labelled against the node's previous run, listed and counted. */
import type pg from 'pg';
import type { PostgresDb } from '../postgres/db.js';
import { checkPaging } from '../input.js';
import { postgresDialect } from '../nodes/filters/postgres.js';
import type { RunInsert } from '../runs/types.js';
import type { StoreRules } from '../rules.js';
import type { EventInsert } from '../events/types.js';
import { pick, unnestOf } from '../postgres/arrays.js';
import { changeFromRow, changeWhere, labelFor } from './rows.js';
import { keptHistogramSql, keptPlan, POSTGRES_HOURS } from './kept.js';
import { CHANGES_COUNT_LIMIT, type ChangeBucket, type ChangeInput, type ChangeLabel, type ChangePage, type ChangeQuery, type ChangeStore } from './types.js';

export class PostgresChanges implements ChangeStore {
  constructor(private readonly db: PostgresDb, private readonly rules: StoreRules) {}

  /** A stored run's changes, labelled (drift repaired is an event, to `sink`), and the next run's labelled again: inside the run's transaction. */
  async runStored(c: pg.PoolClient, run: RunInsert, runId: number, startedUtc: string, changes: ChangeInput[], sink: EventInsert[]): Promise<void> {
    if (changes.length > 0) {
      const label = await this.insertChanges(c, run, runId, startedUtc, changes);
      const e = this.rules.events.repaired(run.node_id, { id: runId, started_utc: startedUtc }, changes, label);
      if (e) sink.push(e);
    }
    await this.relabelNext(c, run, startedUtc);
  }

  /**
   * runStored for several stored runs of distinct nodes: their neighbours (the previous run's
   * config, for runs with changes; the next run) in one statement, every run's changes in one
   * insert, the next runs' changes labelled again in one update.
   */
  async runsStored(c: pg.PoolClient, runs: ReadonlyArray<{ run: RunInsert; runId: number; startedUtc: string; changes: ChangeInput[]; sink: EventInsert[] }>): Promise<void> {
    if (runs.length === 0) return;
    const what = 'insertChanges';
    const { rows } = await this.db.query<{ n: string; found: boolean | null; prev_config: string | null; next_id: string | null; next_config: string | null }>(what, c, {
      name: 'runs_neighbours',
      text: `SELECT k.n, p.found, p.config_id AS prev_config, x.id AS next_id, x.config_id AS next_config
        FROM ${unnestOf(['text', 'timestamptz', 'boolean'])} WITH ORDINALITY AS k(node_id, s, want_prev, n)
        LEFT JOIN LATERAL (SELECT true AS found, r.config_id FROM runs r WHERE k.want_prev AND r.node_id = k.node_id AND r.started_at_utc < k.s
          ORDER BY r.started_at_utc DESC LIMIT 1) p ON true
        LEFT JOIN LATERAL (SELECT r.id, r.config_id FROM runs r WHERE r.node_id = k.node_id AND r.started_at_utc > k.s
          ORDER BY r.started_at_utc LIMIT 1) x ON true`,
      values: [pick(runs, (r) => r.run.node_id), pick(runs, (r) => r.startedUtc), pick(runs, (r) => r.changes.length > 0)],
    });
    const rel: Array<{ node_id: string; run_id: string; label: string }> = [];
    const all: Array<ChangeInput & { node_id: string; run_id: number; run_started_at: string; label: string; config_id: string | null }> = [];
    for (const row of rows) {
      const { run, runId, startedUtc, changes, sink } = runs[Number(row.n) - 1]!;
      const config = run.config_id ?? null;
      if (changes.length > 0) {
        const label = labelFor(row.found ? row.prev_config : undefined, config);
        for (const ch of changes) all.push({ ...ch, node_id: run.node_id, run_id: runId, run_started_at: run.started_at, label, config_id: config });
        const e = this.rules.events.repaired(run.node_id, { id: runId, started_utc: startedUtc }, changes, label);
        if (e) sink.push(e);
      }
      if (row.next_id !== null) rel.push({ node_id: run.node_id, run_id: row.next_id, label: labelFor(config, row.next_config) });
    }
    if (all.length > 0) {
      await this.db.query(what, c, {
        name: 'changes_insert_batch',
        text: `INSERT INTO changes (node_id, run_id, run_started_at, label, config_id, at, rule_id, directive_id, component, key_value,
            event_type, message, diff, diff_truncated)
          SELECT * FROM ${unnestOf(['text', 'bigint', 'text', 'text', 'text', 'timestamptz', 'text', 'text', 'text', 'text', 'text', 'text', 'text', 'boolean'])}`,
        values: [pick(all, (x) => x.node_id), pick(all, (x) => x.run_id), pick(all, (x) => x.run_started_at), pick(all, (x) => x.label),
          pick(all, (x) => x.config_id), pick(all, (x) => x.at), pick(all, (x) => x.rule_id), pick(all, (x) => x.directive_id),
          pick(all, (x) => x.component), pick(all, (x) => x.key_value), pick(all, (x) => x.event_type), pick(all, (x) => x.message),
          pick(all, (x) => x.diff), pick(all, (x) => x.diff_truncated)],
      });
    }
    if (rel.length > 0) {
      await this.db.query('relabelNext', c, {
        name: 'changes_relabel_batch',
        text: `UPDATE changes x SET label = v.label FROM ${unnestOf(['text', 'bigint', 'text'])} AS v(node_id, run_id, label)
          WHERE x.node_id = v.node_id AND x.run_id = v.run_id`,
        values: [pick(rel, (x) => x.node_id), pick(rel, (x) => x.run_id), pick(rel, (x) => x.label)],
      });
    }
  }

  /** A run's changes, labelled as the SQLite part's insertChanges says. */
  private async insertChanges(c: pg.PoolClient, run: RunInsert, runId: number, startedUtc: string, changes: ChangeInput[]): Promise<ChangeLabel> {
    const what = 'insertChanges';
    const prev = await this.db.query<{ config_id: string | null }>(what, c, {
      name: 'run_previous_config',
      text: 'SELECT config_id FROM runs WHERE node_id = $1 AND started_at_utc < $2 ORDER BY started_at_utc DESC LIMIT 1',
      values: [run.node_id, startedUtc],
    });
    const label = labelFor(prev.rows[0] === undefined ? undefined : prev.rows[0].config_id, run.config_id ?? null);
    const col = <K extends keyof ChangeInput>(k: K) => changes.map((ch) => ch[k]);
    await this.db.query(what, c, {
      name: 'changes_insert',
      text: `INSERT INTO changes (node_id, run_id, run_started_at, label, config_id, at, rule_id, directive_id, component, key_value,
          event_type, message, diff, diff_truncated)
        SELECT $1, $2, $3, $4, $5, * FROM unnest($6::timestamptz[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
          $12::text[], $13::text[], $14::boolean[])`,
      values: [run.node_id, runId, run.started_at, label, run.config_id ?? null, col('at'), col('rule_id'), col('directive_id'),
        col('component'), col('key_value'), col('event_type'), col('message'), col('diff'), col('diff_truncated')],
    });
    return label;
  }

  /** The next run's changes labelled again against this one (see the SQLite part's relabelNext). */
  private async relabelNext(c: pg.PoolClient, run: RunInsert, startedUtc: string): Promise<void> {
    const what = 'relabelNext';
    const next = await this.db.query<{ id: string; config_id: string | null }>(what, c, {
      name: 'run_next_config',
      text: 'SELECT id, config_id FROM runs WHERE node_id = $1 AND started_at_utc > $2 ORDER BY started_at_utc LIMIT 1',
      values: [run.node_id, startedUtc],
    });
    const n = next.rows[0];
    if (!n) return;
    await this.db.query(what, c, {
      name: 'changes_relabel', text: 'UPDATE changes SET label = $1 WHERE node_id = $2 AND run_id = $3', values: [labelFor(run.config_id ?? null, n.config_id), run.node_id, n.id],
    });
  }

  private async changeWhere(q: ChangeQuery, values: unknown[]): Promise<string> {
    return changeWhere(q, await postgresDialect(this.db, values), (ids) => `(SELECT unnest($${values.push(ids)}::text[]))`);
  }

  async listChanges(q: ChangeQuery, page: number, perPage: number): Promise<ChangePage> {
    const { limit, offset } = checkPaging(page, perPage);
    const values: unknown[] = [];
    const where = await this.changeWhere(q, values);
    const { rows } = await this.db.query('listChanges', this.db.pool, {
      text: `SELECT t.total, r.* FROM (SELECT count(*) AS total FROM (SELECT 1 FROM changes c ${where} LIMIT ${CHANGES_COUNT_LIMIT + 1}) l) t
        LEFT JOIN LATERAL (SELECT c.* FROM changes c ${where} ORDER BY c.at DESC, c.id DESC
          LIMIT $${values.length + 1} OFFSET $${values.length + 2}) r ON true`,
      values: [...values, limit, offset],
    });
    const total = Number(rows[0]?.total ?? 0);
    return { data: rows.filter((r) => r.id !== null).map(changeFromRow), total: Math.min(total, CHANGES_COUNT_LIMIT), total_capped: total > CHANGES_COUNT_LIMIT };
  }

  async changesHistogram(q: ChangeQuery, by: 'hour' | 'day'): Promise<ChangeBucket[]> {
    const plan = keptPlan(q);
    if (plan === null) return this.changesHistogramFresh(q, by);
    const values: unknown[] = [];
    const text = keptHistogramSql(q, plan, by, await postgresDialect(this.db, values), (ids) => `(SELECT unnest($${values.push(ids)}::text[]))`, POSTGRES_HOURS, true);
    return bucketsOf((await this.db.query('changesHistogram', this.db.pool, { text, values })).rows);
  }

  async changesHistogramFresh(q: ChangeQuery, by: 'hour' | 'day'): Promise<ChangeBucket[]> {
    const values: unknown[] = [];
    const where = await this.changeWhere(q, values);
    const { rows } = await this.db.query('changesHistogram', this.db.pool, {
      text: `SELECT date_trunc('${by}', c.at AT TIME ZONE 'UTC') AS at,
          count(*) FILTER (WHERE c.label = 'intentional') AS intentional, count(*) FILTER (WHERE c.label = 'corrective') AS corrective
        FROM changes c ${where} GROUP BY 1 ORDER BY 1`,
      values,
    });
    return bucketsOf(rows);
  }
}

/** Buckets from rows whose `at` is a UTC timestamp without time zone (read as local time by node-pg). */
const bucketsOf = (rows: Array<Record<string, unknown>>): ChangeBucket[] =>
  rows.map((r) => ({ at: new Date(`${(r.at as Date).toISOString().slice(0, 19)}Z`).toISOString(), intentional: Number(r.intentional), corrective: Number(r.corrective) }));
