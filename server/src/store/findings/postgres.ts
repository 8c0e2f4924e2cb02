/** Findings on PostgreSQL: opened and closed inside the compliance write's transaction (under the node's row lock). */
import type pg from 'pg';
import { postgresRows, type PostgresDb } from '../postgres/db.js';
import { checkPaging } from '../input.js';
import { postgresDialect } from '../nodes/filters/postgres.js';
import type { ReconcileInput, StoreRules } from '../rules.js';
import type { EventInsert } from '../events/types.js';
import type { Page } from '../store.js';
import { toUtcIso } from '../time.js';
import { FINDING_SELECT, findingFromRow, findingText, findingWhere, OPEN_FINDINGS_SQL, openFromRow } from './rows.js';
import type { FindingQuery, FindingRecord, FindingStore } from './types.js';
import { pick, unnestOf } from '../postgres/arrays.js';

export class PostgresFindings implements FindingStore {
  constructor(private readonly db: PostgresDb, private readonly rules: StoreRules) {}

  /** What a compliance write does to a node's findings, on the write's connection: the events to write. */
  async reconcile(c: pg.PoolClient, input: Omit<ReconcileInput, 'open'>): Promise<EventInsert[]> {
    const what = 'reconcileFindings';
    const { rows } = await this.db.query(what, c, { name: 'findings_open', text: OPEN_FINDINGS_SQL('$1'), values: [input.node_id] });
    const r = this.rules.events.reconcile({ ...input, open: rows.map(openFromRow) });
    const runId = input.run?.id ?? null;
    if (r.open.length) {
      const t = r.open.map((o) => findingText(o.input));
      const col = <K extends keyof (typeof t)[number]>(k: K) => t.map((x) => x[k]);
      const ins = await this.db.query<{ id: string }>(what, c, {
        name: 'findings_insert',
        text: `INSERT INTO findings (node_id, rule_id, directive_id, component, key_value, kind, event_type, message, diff, diff_truncated,
            first_seen_at, first_run_id, first_count)
          SELECT $1, g.rule_id, g.directive_id, g.component, g.key_value, g.kind, g.event_type, g.message, g.diff, g.diff_truncated, $2, $3, $4
          FROM unnest($5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::boolean[])
            WITH ORDINALITY AS g(rule_id, directive_id, component, key_value, kind, event_type, message, diff, diff_truncated, n)
          ORDER BY g.n RETURNING id`,
        values: [input.node_id, input.at, runId, input.runs_seen, col('rule_id'), col('directive_id'), col('component'), col('key_value'),
          r.open.map((o) => o.kind), col('event_type'), col('message'), col('diff'), col('diff_truncated')],
      });
      // Ids are handed out in the SELECT's order (ORDER BY g.n): the n-th id is the n-th finding's.
      const ids = ins.rows.map((x) => Number(x.id)).sort((a, b) => a - b);
      r.open.forEach((o, i) => (o.event.data.finding_id = ids[i]));
    }
    if (r.close.length) {
      await this.db.query(what, c, {
        name: 'findings_close',
        text: `UPDATE findings f SET closed_at = $1, closed_run_id = $2, close_reason = g.reason, runs = g.runs, last_seen_at = $3, last_run_id = $4
          FROM unnest($5::bigint[], $6::text[], $7::bigint[]) AS g(id, reason, runs) WHERE f.id = g.id`,
        values: [input.at, runId, input.last_seen.at, input.last_seen.run_id, r.close.map((x) => x.id), r.close.map((x) => x.reason), r.close.map((x) => x.runs)],
      });
    }
    for (const s of r.restate) {
      await this.db.query(what, c, { name: 'findings_restate', text: 'UPDATE findings SET kind = $2, event_type = $3 WHERE id = $1', values: [s.id, s.kind, s.event_type] });
    }
    return [...r.open.map((o) => o.event), ...r.close.map((x) => x.event), ...r.events];
  }

  /**
   * reconcile for several nodes (one input each) on the write's connection: their open findings
   * read in one statement (in id order, as one node's read takes them), the new ones inserted in
   * one, the closed ones updated in one. The events of each input, in the order given.
   */
  async reconcileMany(c: pg.PoolClient, inputs: ReadonlyArray<Omit<ReconcileInput, 'open'>>): Promise<EventInsert[][]> {
    if (inputs.length === 0) return [];
    const what = 'reconcileFindings';
    const { rows } = await this.db.query(what, c, {
      name: 'findings_open_batch',
      text: `SELECT node_id, id, rule_id, directive_id, component, key_value, kind, first_seen_at, first_count
        FROM findings WHERE node_id = ANY($1::text[]) AND closed_at IS NULL ORDER BY node_id, id`,
      values: [pick(inputs, (i) => i.node_id)],
    });
    const open = new Map<string, Record<string, unknown>[]>();
    for (const r of rows) {
      const list = open.get(r.node_id as string);
      if (list) list.push(r);
      else open.set(r.node_id as string, [r]);
    }
    const decided = inputs.map((input) => ({ input, r: this.rules.events.reconcile({ ...input, open: (open.get(input.node_id) ?? []).map(openFromRow) }) }));
    const opens = decided.flatMap(({ input, r }) => r.open.map((o) => ({ input, o, t: findingText(o.input) })));
    if (opens.length > 0) {
      const ins = await this.db.query<{ id: string }>(what, c, {
        name: 'findings_insert_batch',
        text: `INSERT INTO findings (node_id, rule_id, directive_id, component, key_value, kind, event_type, message, diff, diff_truncated,
            first_seen_at, first_run_id, first_count)
          SELECT g.node_id, g.rule_id, g.directive_id, g.component, g.key_value, g.kind, g.event_type, g.message, g.diff, g.diff_truncated,
            g.at, g.run_id, g.runs_seen
          FROM ${unnestOf(['text', 'text', 'text', 'text', 'text', 'text', 'text', 'text', 'text', 'boolean', 'timestamptz', 'bigint', 'bigint'])}
            WITH ORDINALITY AS g(node_id, rule_id, directive_id, component, key_value, kind, event_type, message, diff, diff_truncated, at, run_id, runs_seen, n)
          ORDER BY g.n RETURNING id`,
        values: [pick(opens, (x) => x.input.node_id), pick(opens, (x) => x.t.rule_id), pick(opens, (x) => x.t.directive_id), pick(opens, (x) => x.t.component),
          pick(opens, (x) => x.t.key_value), pick(opens, (x) => x.o.kind), pick(opens, (x) => x.t.event_type), pick(opens, (x) => x.t.message),
          pick(opens, (x) => x.t.diff), pick(opens, (x) => x.t.diff_truncated), pick(opens, (x) => x.input.at), pick(opens, (x) => x.input.run?.id ?? null),
          pick(opens, (x) => x.input.runs_seen)],
      });
      // Ids are handed out in the SELECT's order (ORDER BY g.n): the n-th id is the n-th finding's.
      const ids = ins.rows.map((x) => Number(x.id)).sort((a, b) => a - b);
      opens.forEach((x, i) => (x.o.event.data.finding_id = ids[i]));
    }
    const closes = decided.flatMap(({ input, r }) => r.close.map((x) => ({ input, x })));
    if (closes.length > 0) {
      await this.db.query(what, c, {
        name: 'findings_close_batch',
        text: `UPDATE findings f SET closed_at = g.at, closed_run_id = g.run_id, close_reason = g.reason, runs = g.runs, last_seen_at = g.last_at, last_run_id = g.last_run_id
          FROM ${unnestOf(['bigint', 'text', 'bigint', 'timestamptz', 'bigint', 'timestamptz', 'bigint'])} AS g(id, reason, runs, at, run_id, last_at, last_run_id)
          WHERE f.id = g.id`,
        values: [pick(closes, (y) => y.x.id), pick(closes, (y) => y.x.reason), pick(closes, (y) => y.x.runs), pick(closes, (y) => y.input.at),
          pick(closes, (y) => y.input.run?.id ?? null), pick(closes, (y) => y.input.last_seen.at), pick(closes, (y) => y.input.last_seen.run_id)],
      });
    }
    const restates = decided.flatMap(({ r }) => r.restate);
    if (restates.length > 0) {
      await this.db.query(what, c, {
        name: 'findings_restate_batch',
        text: `UPDATE findings f SET kind = g.kind, event_type = g.event_type FROM ${unnestOf(['bigint', 'text', 'text'])} AS g(id, kind, event_type) WHERE f.id = g.id`,
        values: [pick(restates, (x) => x.id), pick(restates, (x) => x.kind), pick(restates, (x) => x.event_type)],
      });
    }
    return decided.map(({ r }) => [...r.open.map((o) => o.event), ...r.close.map((x) => x.event), ...r.events]);
  }

  async listFindings(q: FindingQuery, page: number, perPage: number): Promise<Page<FindingRecord>> {
    const { limit, offset } = checkPaging(page, perPage);
    const checked = this.rules.filters.check({ filters: q.filters ?? [] });
    const values: unknown[] = [];
    const where = findingWhere(q, checked, await postgresDialect(this.db, values, checked, this.rules.filters.check),
      (ids) => `(SELECT unnest($${values.push(ids)}::text[]))`);
    const total = await this.db.query('listFindings', this.db.pool, { text: `SELECT count(*) AS n FROM findings f ${where}`, values });
    const { rows } = await this.db.query('listFindings', this.db.pool, {
      text: `${FINDING_SELECT} ${where} ORDER BY f.id DESC LIMIT $${values.length + 1} OFFSET $${values.length + 2}`,
      values: [...values, limit, offset],
    });
    return { data: rows.map((r) => findingFromRow(r, postgresRows)), total: Number(total.rows[0]!.n) };
  }

  async deleteClosedFindingsBefore(before: string, limit: number): Promise<number> {
    const { rowCount } = await this.db.query('deleteClosedFindingsBefore', this.db.pool, {
      text: `DELETE FROM findings WHERE id IN (SELECT id FROM findings WHERE closed_at IS NOT NULL AND closed_at < $1 ORDER BY closed_at LIMIT $2)`,
      values: [toUtcIso(before, 'before'), limit],
    });
    return rowCount ?? 0;
  }
}
