/** Findings on SQLite: opened and closed inside the compliance write's transaction, listed with their node's last sighting. */
import type { SqliteDb } from '../sqlite/db.js';
import { sqliteRows } from '../sqlite/db.js';
import { checkPaging } from '../input.js';
import { sqliteDialect } from '../nodes/filters/sqlite.js';
import type { ReconcileInput, StoreRules } from '../rules.js';
import type { EventInsert } from '../events/types.js';
import type { Page } from '../store.js';
import { toUtcIso } from '../time.js';
import { FINDING_SELECT, findingFromRow, findingText, findingWhere, OPEN_FINDINGS_SQL, openFromRow } from './rows.js';
import type { FindingQuery, FindingRecord, FindingStore } from './types.js';

export class SqliteFindings implements FindingStore {
  constructor(private readonly db: SqliteDb, private readonly rules: StoreRules) {}

  /** What a compliance write does to a node's findings, inside its transaction: the events to write. */
  reconcile(input: Omit<ReconcileInput, 'open'>): EventInsert[] {
    const open = (this.db.stmt(OPEN_FINDINGS_SQL('?')).all(input.node_id) as Record<string, unknown>[]).map(openFromRow);
    const r = this.rules.events.reconcile({ ...input, open });
    const runId = input.run?.id ?? null;
    if (r.open.length) {
      const ins = this.db.stmt(`INSERT INTO findings (node_id, rule_id, directive_id, component, key_value, kind, event_type, message, diff,
        diff_truncated, first_seen_at, first_run_id, first_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
      for (const o of r.open) {
        const t = findingText(o.input);
        const id = Number(ins.run(input.node_id, t.rule_id, t.directive_id, t.component, t.key_value, o.kind, t.event_type, t.message, t.diff,
          t.diff_truncated ? 1 : 0, input.at, runId, input.runs_seen).lastInsertRowid);
        o.event.data.finding_id = id;
      }
    }
    if (r.close.length) {
      const upd = this.db.stmt(`UPDATE findings SET closed_at = ?, closed_run_id = ?, close_reason = ?, runs = ?, last_seen_at = ?, last_run_id = ?
        WHERE id = ?`);
      for (const c of r.close) upd.run(input.at, runId, c.reason, c.runs, input.last_seen.at, input.last_seen.run_id, c.id);
    }
    for (const s of r.restate) this.db.stmt('UPDATE findings SET kind = ?, event_type = ? WHERE id = ?').run(s.kind, s.event_type, s.id);
    return [...r.open.map((o) => o.event), ...r.close.map((c) => c.event), ...r.events];
  }

  async listFindings(q: FindingQuery, page: number, perPage: number): Promise<Page<FindingRecord>> {
    const { limit, offset } = checkPaging(page, perPage);
    const checked = this.rules.filters.check({ filters: q.filters ?? [] });
    const values: unknown[] = [];
    const where = findingWhere(q, checked, sqliteDialect(this.db, values, checked, this.rules.filters.check), (ids) => {
      values.push(JSON.stringify(ids));
      return '(SELECT value FROM json_each(?))';
    });
    return this.db.read('listFindings', () => {
      const total = Number(this.db.stmt(`SELECT count(*) FROM findings f ${where}`).pluck().get(...values));
      const rows = this.db.stmt(`${FINDING_SELECT} ${where} ORDER BY f.id DESC LIMIT ? OFFSET ?`).all(...values, limit, offset) as Record<string, unknown>[];
      return { data: rows.map((r) => findingFromRow(r, sqliteRows)), total };
    });
  }

  async deleteClosedFindingsBefore(before: string, limit: number): Promise<number> {
    const b = toUtcIso(before, 'before');
    return this.db.write('deleteClosedFindingsBefore', () => this.db.stmt(`DELETE FROM findings WHERE id IN (
      SELECT id FROM findings WHERE closed_at IS NOT NULL AND closed_at < ? ORDER BY closed_at LIMIT ?)`).run(b, limit).changes);
  }
}
