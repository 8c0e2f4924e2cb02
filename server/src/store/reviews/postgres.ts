/** Change requests on PostgreSQL (see types.ts). */
import { checkPaging } from '../input.js';
import type { PostgresDb } from '../postgres/db.js';
import type { Page } from '../store.js';
import { CR_COLUMNS, crFromRow, crParams } from './rows.js';
import type { ChangeRequestQuery, ChangeRequestRecord, ChangeRequestReview, ChangeRequestStatus, ChangeRequestStore } from './types.js';

type Row = Record<string, unknown>;

export class PostgresChangeRequests implements ChangeRequestStore {
  constructor(private readonly db: PostgresDb) {}

  async insertChangeRequest(r: ChangeRequestRecord): Promise<void> {
    const p = crParams(r);
    await this.db.query('insert change request', `INSERT INTO change_requests (${CR_COLUMNS}) VALUES (${p.map((_, i) => `$${i + 1}`).join(', ')})`, p);
  }

  async getChangeRequest(id: string): Promise<ChangeRequestRecord | null> {
    const r = await this.db.query<Row>('get change request', `SELECT ${CR_COLUMNS} FROM change_requests WHERE id = $1`, [id]);
    return r.rows[0] ? crFromRow(r.rows[0]) : null;
  }

  async listChangeRequests(q: ChangeRequestQuery): Promise<Page<ChangeRequestRecord>> {
    const { limit, offset } = checkPaging(q.page, q.per_page);
    const where = q.status ? 'WHERE status = $3' : '';
    const r = await this.db.query<Row>('list change requests', `SELECT ${CR_COLUMNS}, count(*) OVER () AS total_rows FROM change_requests ${where}
      ORDER BY created_at DESC, id DESC LIMIT $1 OFFSET $2`, q.status ? [limit, offset, q.status] : [limit, offset]);
    const total = r.rows[0] ? Number(r.rows[0].total_rows)
      : Number((await this.db.query<Row>('count change requests', `SELECT count(*) AS c FROM change_requests ${q.status ? 'WHERE status = $1' : ''}`, q.status ? [q.status] : [])).rows[0]!.c);
    return { data: r.rows.map(crFromRow), total };
  }

  async transitionChangeRequest(id: string, from: ChangeRequestStatus, to: ChangeRequestStatus, at: string,
    extra: { review?: ChangeRequestReview; deployed_by?: string }): Promise<boolean> {
    // One statement: the review is appended to the JSON text only where the status is still `from`.
    const r = await this.db.query('change request status', `UPDATE change_requests SET status = $3, updated_at = $4,
        reviews = CASE WHEN $5::text IS NULL THEN reviews ELSE (reviews::jsonb || jsonb_build_array($5::jsonb))::text END,
        deployed_at = CASE WHEN $6::text IS NULL THEN deployed_at ELSE $4 END, deployed_by = coalesce($6, deployed_by)
      WHERE id = $1 AND status = $2`, [id, from, to, at, extra.review ? JSON.stringify(extra.review) : null, extra.deployed_by ?? null]);
    return (r.rowCount ?? 0) > 0;
  }
}
