/** Change requests on SQLite (see types.ts). */
import { checkPaging } from '../input.js';
import type { SqliteDb } from '../sqlite/db.js';
import type { Page } from '../store.js';
import { CR_COLUMNS, crFromRow, crParams } from './rows.js';
import type { ChangeRequestQuery, ChangeRequestRecord, ChangeRequestReview, ChangeRequestStatus, ChangeRequestStore } from './types.js';

type Row = Record<string, unknown>;

export class SqliteChangeRequests implements ChangeRequestStore {
  constructor(private readonly db: SqliteDb) {}

  async insertChangeRequest(r: ChangeRequestRecord): Promise<void> {
    this.db.write('insert change request', () => this.db.prepare(`INSERT INTO change_requests (${CR_COLUMNS}) VALUES (${crParams(r).map(() => '?').join(', ')})`).run(...crParams(r)));
  }

  async getChangeRequest(id: string): Promise<ChangeRequestRecord | null> {
    const r = this.db.read('get change request', () => this.db.prepare(`SELECT ${CR_COLUMNS} FROM change_requests WHERE id = ?`).get(id) as Row | undefined);
    return r ? crFromRow(r) : null;
  }

  async listChangeRequests(q: ChangeRequestQuery): Promise<Page<ChangeRequestRecord>> {
    const { limit, offset } = checkPaging(q.page, q.per_page);
    const where = q.status ? 'WHERE status = ?' : '';
    const args = q.status ? [q.status] : [];
    return this.db.read('list change requests', () => {
      const total = Number(this.db.prepare(`SELECT count(*) FROM change_requests ${where}`).pluck().get(...args));
      const rows = this.db.prepare(`SELECT ${CR_COLUMNS} FROM change_requests ${where} ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?`).all(...args, limit, offset) as Row[];
      return { data: rows.map(crFromRow), total };
    });
  }

  async transitionChangeRequest(id: string, from: ChangeRequestStatus, to: ChangeRequestStatus, at: string,
    extra: { review?: ChangeRequestReview; deployed_by?: string }): Promise<boolean> {
    return this.db.write('change request status', () => {
      const cur = this.db.prepare('SELECT status, reviews FROM change_requests WHERE id = ?').get(id) as Row | undefined;
      if (!cur || cur.status !== from) return false;
      const reviews = JSON.parse(String(cur.reviews)) as ChangeRequestReview[];
      if (extra.review) reviews.push(extra.review);
      this.db.prepare(`UPDATE change_requests SET status = ?, updated_at = ?, reviews = ?, deployed_at = coalesce(?, deployed_at), deployed_by = coalesce(?, deployed_by)
        WHERE id = ? AND status = ?`).run(to, at, JSON.stringify(reviews), extra.deployed_by ? at : null, extra.deployed_by ?? null, id, from);
      return true;
    });
  }
}
